// Shared helpers of the optimized-CPU-kernel tests: seeded inputs, element-wise
// comparison against the reference kernels, and running a kernel at a given thread count.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/tables.h"

namespace wedge::kernels::testing {

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// |actual - expected| <= atol + rtol |expected| everywhere (equal infinities and NaNs
// match); reports the first few misses with their index.
inline void expect_close(const std::vector<float>& actual, const std::vector<float>& expected,
                         double atol, double rtol, const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  int bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const bool ok = std::fabs(a - e) <= atol + rtol * std::fabs(e) || (std::isinf(e) && a == e) ||
                    (std::isnan(e) && std::isnan(a));
    if (!ok && bad++ < 5) {
      INFO(what << " [" << i << "]: got " << a << ", reference " << e);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " element(s) differ");
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs f() with the global pool resized to `threads`, restoring the size afterwards.
template <typename F>
void with_threads(int threads, F&& f) {
  const int saved = num_threads();
  set_num_threads(threads);
  f();
  set_num_threads(saved);
}

// The AVX-512 kernels exist only on CPUs that have it; tests say so instead of passing
// silently.
inline bool avx512_available() {
  if (!cpu::has_avx512()) MESSAGE("this CPU has no AVX-512: AVX-512 kernel tests skipped");
  return cpu::has_avx512();
}

}  // namespace wedge::kernels::testing
