// Shared helpers of the reference-kernel tests: seeded random inputs, element-wise
// comparison, and central finite differences of a weighted-sum loss.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/tables.h"

namespace wedge::kernels::testing {

inline std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

template <typename T>
std::vector<T> cast_vector(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Every element of `actual` within atol + rtol * |expected| of `expected`; the first few
// failures are reported with their index.
template <typename A, typename E>
void check_all_close(const A& actual, const E& expected, double atol, double rtol = 0.0,
                     const std::string& what = "") {
  REQUIRE(actual.size() == expected.size());
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = double(actual[i]), e = double(expected[i]);
    const bool ok = std::fabs(a - e) <= atol + rtol * std::fabs(e) || (std::isinf(e) && a == e) ||
                    (std::isnan(e) && std::isnan(a));
    if (!ok && reported++ < 5) {
      INFO(what << " index " << i << ": actual " << a << ", expected " << e);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(reported == 0, what << ": " << reported << " element(s) differ");
}

// L = sum_k w_k y_k: the scalar whose gradient with respect to y is exactly w, so a
// backward kernel given gy = w must return dL/dx.
inline double weighted_sum(const std::vector<double>& w, const std::vector<double>& y) {
  REQUIRE(w.size() == y.size());
  double sum = 0;
  for (std::size_t i = 0; i < w.size(); ++i) sum += w[i] * y[i];
  return sum;
}

// dL/dx_i by central differences, (L(x + h e_i) - L(x - h e_i)) / 2h, where `loss` reads x
// (captured by reference), for every i. Error O(h^2) + O(rounding / h): about 1e-9
// relative in double with h = 1e-5 on smooth inputs.
inline std::vector<double> numeric_gradient(std::vector<double>& x,
                                            const std::function<double()>& loss, double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// The analytic gradient (from a backward kernel) against the numeric one.
inline void check_gradient(const std::vector<double>& analytic, const std::vector<double>& numeric,
                           const std::string& what) {
  check_all_close(analytic, numeric, 1e-7, 1e-6, what);
}

}  // namespace wedge::kernels::testing
