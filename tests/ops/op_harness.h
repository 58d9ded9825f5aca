// The op-test harness: a float64 central-difference gradient check that any op (or
// composition of ops) can be run through.
//
//   L(x_1..x_n) = sum(w * f(x_1..x_n))      with a fixed random weight w
//   analytic:   dL/dx_i from backward()
//   numeric:    (L(x + h e_j) - L(x - h e_j)) / 2h for every element j of every input
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "ops/ops.h"

namespace wedge::testing {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Storage offsets (elements) of every logical element of t, row-major.
inline std::vector<std::int64_t> element_offsets(const Tensor& t) {
  std::vector<std::int64_t> out;
  const Shape& s = t.shape();
  const std::int64_t n = t.numel();
  std::vector<std::int64_t> idx(s.size(), 0);
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t off = t.offset();
    for (std::size_t d = 0; d < s.size(); ++d) off += idx[d] * t.strides()[d];
    out.push_back(off);
    for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

inline double weighted_sum(const Tensor& y, const Tensor& w) {
  NoGradGuard no_grad;
  return ops::sum(ops::mul(y, w)).item();
}

// A float64 input: random normal values, requiring grad. With transposed = true the
// returned leaf is a non-contiguous view (the transpose of a packed tensor).
inline Tensor input(const Shape& shape, std::uint64_t seed, bool transposed = false, double offset = 0.0,
                    double scale = 1.0) {
  Tensor t;
  if (transposed && shape.size() >= 2) {
    Shape swapped = shape;
    std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    Tensor base = Tensor::randn(swapped, seed, offset, scale, DType::F64);
    const int n = static_cast<int>(shape.size());
    Shape st = base.strides();
    std::swap(st[n - 1], st[n - 2]);
    t = base.as_strided(shape, st, 0);
  } else {
    t = Tensor::randn(shape, seed, offset, scale, DType::F64);
  }
  t.set_requires_grad(true);
  return t;
}

// Runs the check; returns the largest error found (also asserted against tol).
inline double gradcheck(const std::string& name, const OpFn& f, std::vector<Tensor> inputs, double tol = 1e-6,
                        double h = 1e-6) {
  INFO("gradcheck of " << name);
  Tensor y = f(inputs);
  REQUIRE(y.dtype() == DType::F64);
  const Tensor w = Tensor::randn(y.shape(), 1234, 0, 1, DType::F64);
  ops::sum(ops::mul(y, w)).backward();
  double worst = 0.0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.requires_grad()) continue;
    Tensor g = x.grad();
    REQUIRE_MESSAGE(g.defined(), name << ": input " << i << " received no gradient");
    REQUIRE(g.shape() == x.shape());
    const std::vector<double> analytic = g.contiguous().to_vector<double>();
    double* base = static_cast<double*>(x.impl().storage->data());
    const std::vector<std::int64_t> offs = element_offsets(x);
    NoGradGuard no_grad;  // the finite differences need no graph
    for (std::size_t j = 0; j < offs.size(); ++j) {
      const double keep = base[offs[j]];
      base[offs[j]] = keep + h;
      const double lp = weighted_sum(f(inputs), w);
      base[offs[j]] = keep - h;
      const double lm = weighted_sum(f(inputs), w);
      base[offs[j]] = keep;
      const double numeric = (lp - lm) / (2 * h);
      const double err = std::abs(numeric - analytic[j]) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, err);
      if (err > tol) {
        FAIL_CHECK(name << ": input " << i << " element " << j << " analytic " << analytic[j] << " vs numeric "
                        << numeric);
        return err;
      }
    }
  }
  CHECK(worst <= tol);
  return worst;
}

}  // namespace wedge::testing
