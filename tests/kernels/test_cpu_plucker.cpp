// AVX-512 fused Plücker mean (kernels/cpu/plucker_avx512.cpp) against the reference:
// ranks 2..64 around the vector width, sequence lengths shorter than the offsets (rows
// with no valid offset), the paper's offsets {1,2,4,8,12,16}, a degenerate pair (norm
// clamped at eps), and thread-count independence.
#include <doctest/doctest.h>

#include <cmath>

#include "test_cpu_helpers.h"

namespace wedge::kernels {

using testing::avx512_available;
using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::with_threads;

namespace {

void check_shape(i64 B, i64 L, i64 r, const std::vector<std::int32_t>& offsets, bool degenerate) {
  INFO("B " << B << " L " << L << " r " << r << " m " << offsets.size()
            << (degenerate ? " degenerate" : ""));
  const i64 m = static_cast<i64>(offsets.size());
  const i64 P = r * (r - 1) / 2;
  std::vector<float> z = random_floats(static_cast<std::size_t>(B * L * r), 1);
  if (degenerate && L > 1) {
    // z[1] parallel to z[0] (pair norm 0, clamped to eps) and z[2] almost parallel.
    for (i64 i = 0; i < r; ++i) z[r + i] = 2.0f * z[i];
    if (L > 2)
      for (i64 i = 0; i < r; ++i) z[2 * r + i] = -z[i] + (i == 0 ? 1e-3f : 0.0f);
  }
  const float eps = 1e-6f;
  const std::size_t out_size = static_cast<std::size_t>(B * L * P),
                    norm_size = static_cast<std::size_t>(B * L * m);
  std::vector<float> out(out_size), out_ref(out_size), norms(norm_size), norms_ref(norm_size);
  cpu::avx512::plucker_mean_forward(z.data(), B, L, r, offsets.data(), m, eps, out.data(),
                                    norms.data());
  ref_table_f32().plucker_mean_forward(z.data(), B, L, r, offsets.data(), m, eps, out_ref.data(),
                                       norms_ref.data());
  expect_close(norms, norms_ref, 1e-6, 1e-5, "norms");
  expect_close(out, out_ref, 1e-6, 1e-4, "out");

  const std::vector<float> gout = random_floats(out_size, 2);
  std::vector<float> gz(static_cast<std::size_t>(B * L * r)), gz_ref(gz.size());
  cpu::avx512::plucker_mean_backward(z.data(), B, L, r, offsets.data(), m, eps, norms_ref.data(),
                                     gout.data(), gz.data());
  ref_table_f32().plucker_mean_backward(z.data(), B, L, r, offsets.data(), m, eps, norms_ref.data(),
                                        gout.data(), gz_ref.data());
  // A clamped pair scales its gradient by 1/eps: judge relative to the largest entry.
  // The absolute floor covers entries that are differences of O(1) terms cancelling to
  // ~0 (for r = 2 the normalised coordinate is +-1 and its gradient is exactly 0).
  double scale = 0;
  for (float g : gz_ref) scale = std::max(scale, double(std::fabs(g)));
  expect_close(gz, gz_ref, 2e-5 * scale + 5e-6, 1e-4, "gz");
}

}  // namespace

TEST_CASE("cpu plucker_mean forward and backward match the reference") {
  if (!avx512_available()) return;
  const std::vector<std::int32_t> paper{1, 2, 4, 8, 12, 16};
  check_shape(2, 40, 32, paper, false);  // the paper's rank and offsets
  check_shape(1, 20, 16, {1, 3}, false);
  check_shape(3, 7, 7, {1, 2, 4, 8}, false);  // L shorter than the largest offset
  check_shape(1, 33, 33, {1, 5}, false);
  check_shape(2, 5, 2, {1}, false);       // P = 1
  check_shape(1, 18, 64, {2, 1}, false);  // largest rank on the fast path, unsorted offsets
  check_shape(1, 6, 70, {1, 2}, false);   // above it: the reference fallback
  check_shape(1, 1, 32, paper, false);    // no valid offset anywhere
  check_shape(1, 12, 32, paper, true);    // norm clamped at eps
}

TEST_CASE("cpu plucker_mean does not depend on the thread count") {
  if (!avx512_available()) return;
  const i64 B = 2, L = 130, r = 32;
  const std::vector<std::int32_t> offsets{1, 2, 4, 8, 12, 16};
  const i64 m = 6, P = r * (r - 1) / 2;
  const std::vector<float> z = random_floats(B * L * r, 3), gout = random_floats(B * L * P, 4);
  auto run = [&](int threads) {
    std::vector<float> all(B * L * (P + m + r));
    float* out = all.data();
    float* norms = out + B * L * P;
    float* gz = norms + B * L * m;
    with_threads(threads, [&] {
      cpu_table_f32().plucker_mean_forward(z.data(), B, L, r, offsets.data(), m, 1e-6f, out, norms);
      cpu_table_f32().plucker_mean_backward(z.data(), B, L, r, offsets.data(), m, 1e-6f, norms,
                                            gout.data(), gz);
    });
    return all;
  };
  CHECK(bitwise_equal(run(1), run(2)));
  CHECK(bitwise_equal(run(2), run(3)));
}

}  // namespace wedge::kernels
