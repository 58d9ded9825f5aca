// AVX-512 layer norm forward/backward (kernels/cpu/layer_norm_avx512.cpp) against the
// reference: widths around the vector width, with and without gamma/beta, and
// thread-count independence (gamma/beta gradients are column sums over rows).
#include <doctest/doctest.h>

#include "test_cpu_helpers.h"

namespace wedge::kernels {

using testing::avx512_available;
using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::with_threads;

TEST_CASE("cpu layer_norm forward and backward match the reference") {
  if (!avx512_available()) return;
  struct Shape {
    i64 rows, D;
  };
  for (Shape s : {Shape{1, 1}, Shape{7, 7}, Shape{33, 33}, Shape{5, 16}, Shape{3, 1000},
                  Shape{300, 256}, Shape{2, 1037}, Shape{70, 65}}) {
    for (bool affine : {true, false}) {
      INFO("rows " << s.rows << " D " << s.D << (affine ? " affine" : " no affine"));
      const std::size_t n = static_cast<std::size_t>(s.rows * s.D);
      std::vector<float> x = random_floats(n, 1, -2.0f, 2.0f);
      for (i64 r = 0; r < s.rows; r += 2)
        for (i64 d = 0; d < s.D; ++d) x[r * s.D + d] += 10.0f;
      const std::vector<float> gamma = random_floats(s.D, 2, 0.5f, 1.5f);
      const std::vector<float> beta = random_floats(s.D, 3);
      const float* g = affine ? gamma.data() : nullptr;
      const float* b = affine ? beta.data() : nullptr;
      const float eps = 1e-5f;

      std::vector<float> y(n), y_ref(n), mean(s.rows), mean_ref(s.rows), rstd(s.rows),
          rstd_ref(s.rows);
      cpu::avx512::layer_norm_forward(x.data(), g, b, s.rows, s.D, eps, y.data(), mean.data(),
                                      rstd.data());
      ref_table_f32().layer_norm_forward(x.data(), g, b, s.rows, s.D, eps, y_ref.data(),
                                         mean_ref.data(), rstd_ref.data());
      expect_close(y, y_ref, 2e-5, 2e-5, "y");
      expect_close(mean, mean_ref, 1e-6, 1e-6, "mean");
      expect_close(rstd, rstd_ref, 0, 2e-5, "rstd");

      const std::vector<float> gy = random_floats(n, 4);
      std::vector<float> gx(n), gx_ref(n), gg(s.D), gg_ref(s.D), gb(s.D), gb_ref(s.D);
      cpu::avx512::layer_norm_backward(x.data(), g, mean_ref.data(), rstd_ref.data(), gy.data(),
                                       s.rows, s.D, gx.data(), affine ? gg.data() : nullptr,
                                       affine ? gb.data() : nullptr);
      ref_table_f32().layer_norm_backward(x.data(), g, mean_ref.data(), rstd_ref.data(), gy.data(),
                                          s.rows, s.D, gx_ref.data(), gg_ref.data(), gb_ref.data());
      // gx is a difference of terms of size ~rstd |g|, so judge it against that scale.
      expect_close(gx, gx_ref, 5e-5, 1e-4, "gx");
      if (affine) {
        expect_close(gg, gg_ref, 1e-5, 1e-5, "ggamma");
        expect_close(gb, gb_ref, 1e-5, 1e-5, "gbeta");
      }
    }
  }
}

TEST_CASE("cpu layer_norm does not depend on the thread count") {
  if (!avx512_available()) return;
  const i64 rows = 513, D = 200;
  const std::vector<float> x = random_floats(rows * D, 5), gy = random_floats(rows * D, 6);
  const std::vector<float> gamma = random_floats(D, 7), beta = random_floats(D, 8);
  auto run = [&](int threads) {
    std::vector<float> out(rows * D * 2 + 2 * D + 2 * rows);
    float* y = out.data();
    float* gx = y + rows * D;
    float* gg = gx + rows * D;
    float* gb = gg + D;
    float* mean = gb + D;
    float* rstd = mean + rows;
    with_threads(threads, [&] {
      cpu_table_f32().layer_norm_forward(x.data(), gamma.data(), beta.data(), rows, D, 1e-5f, y,
                                         mean, rstd);
      cpu_table_f32().layer_norm_backward(x.data(), gamma.data(), mean, rstd, gy.data(), rows, D,
                                          gx, gg, gb);
    });
    return out;
  };
  CHECK(bitwise_equal(run(1), run(2)));
  CHECK(bitwise_equal(run(2), run(3)));
}

}  // namespace wedge::kernels
