// AVX-512 blocked attention (kernels/cpu/attention_avx512.cpp) against the reference
// kernels: sequence lengths around the 64-row tile (1, 7, 33, 64, 65, 130), head sizes
// that are not multiples of 16, causal and not, several heads, and thread-count
// independence.
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

struct Shape {
  i64 BH, L, dh;
};

void check_shape(const Shape& s, bool causal) {
  INFO("BH " << s.BH << " L " << s.L << " dh " << s.dh << (causal ? " causal" : ""));
  const std::size_t n = static_cast<std::size_t>(s.BH * s.L * s.dh);
  // Scores of a few units: the softmax is neither uniform nor one-hot.
  const std::vector<float> q = random_floats(n, 1, -1.5f, 1.5f),
                           k = random_floats(n, 2, -1.5f, 1.5f);
  const std::vector<float> v = random_floats(n, 3), gout = random_floats(n, 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.dh));
  const std::size_t rows = static_cast<std::size_t>(s.BH * s.L);

  std::vector<float> out(n), out_ref(n), lse(rows), lse_ref(rows);
  cpu::avx512::attention_forward(q.data(), k.data(), v.data(), s.BH, s.L, s.dh, scale, causal,
                                 out.data(), lse.data());
  ref_table_f32().attention_forward(q.data(), k.data(), v.data(), s.BH, s.L, s.dh, scale, causal,
                                    out_ref.data(), lse_ref.data());
  expect_close(out, out_ref, 2e-6, 2e-5, "out");
  expect_close(lse, lse_ref, 2e-6, 2e-6, "lse");

  // Backward from the reference forward results, so only backward is judged.
  std::vector<float> gq(n), gk(n), gv(n), gq_ref(n), gk_ref(n), gv_ref(n);
  cpu::avx512::attention_backward(q.data(), k.data(), v.data(), out_ref.data(), lse_ref.data(),
                                  gout.data(), s.BH, s.L, s.dh, scale, causal, gq.data(), gk.data(),
                                  gv.data());
  ref_table_f32().attention_backward(q.data(), k.data(), v.data(), out_ref.data(), lse_ref.data(),
                                     gout.data(), s.BH, s.L, s.dh, scale, causal, gq_ref.data(),
                                     gk_ref.data(), gv_ref.data());
  // Gradients are sums of up to L terms of either sign: absolute tolerance grows with L.
  const double atol = 2e-6 * std::sqrt(static_cast<double>(s.L));
  expect_close(gq, gq_ref, atol, 1e-4, "gq");
  expect_close(gk, gk_ref, atol, 1e-4, "gk");
  expect_close(gv, gv_ref, atol, 1e-4, "gv");
}

}  // namespace

TEST_CASE("cpu attention forward and backward match the reference") {
  if (!avx512_available()) return;
  for (bool causal : {true, false}) {
    for (Shape s : {Shape{1, 1, 1}, Shape{2, 7, 5}, Shape{3, 33, 16}, Shape{1, 64, 64},
                    Shape{2, 65, 33}, Shape{1, 130, 70}, Shape{4, 100, 64}}) {
      check_shape(s, causal);
    }
  }
}

TEST_CASE("cpu attention does not depend on the thread count") {
  if (!avx512_available()) return;
  const Shape s{3, 150, 32};
  const std::size_t n = static_cast<std::size_t>(s.BH * s.L * s.dh);
  const std::vector<float> q = random_floats(n, 5), k = random_floats(n, 6),
                           v = random_floats(n, 7);
  const std::vector<float> gout = random_floats(n, 8);
  auto run = [&](int threads) {
    std::vector<float> all(4 * n + s.BH * s.L);
    float* out = all.data();
    float* gq = out + n;
    float* gk = gq + n;
    float* gv = gk + n;
    float* lse = gv + n;
    with_threads(threads, [&] {
      cpu_table_f32().attention_forward(q.data(), k.data(), v.data(), s.BH, s.L, s.dh, 0.2f, true,
                                        out, lse);
      cpu_table_f32().attention_backward(q.data(), k.data(), v.data(), out, lse, gout.data(), s.BH,
                                         s.L, s.dh, 0.2f, true, gq, gk, gv);
    });
    return all;
  };
  CHECK(bitwise_equal(run(1), run(2)));
  CHECK(bitwise_equal(run(2), run(3)));
}

}  // namespace wedge::kernels
