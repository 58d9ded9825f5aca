// The CUDA teaching ladders (bench/cuda/*_ladder.cuh) compiled for the host and run on the
// fiber emulation of kernels/cuda/host_emulation.h. The GPU programs
// (build/bench/cuda_*_ladder) validate and time the same kernels on a GPU; this is how
// machines without one (CI) check them: every rung of every ladder, on awkward shapes
// (rows not a multiple of a block, row lengths of 1, 31, 33 and 1000, sequence lengths
// that end inside a tile), against the ladder's own float64 reference, with the threads of
// a block scheduled first-to-last and then last-to-first (a shared-memory read not ordered
// after its write by a barrier fails one of them). Outputs start as NaN, so an element a
// rung forgets to write fails too. The references themselves are checked against the
// engine's reference kernels.
//
// The emulation runs every thread as a fiber: the shapes are kept small so the whole file
// takes a few seconds.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/tables.h"

#define WEDGE_CUDA_EMULATE 1
#include "bench/cuda/attention_ladder.cuh"
#include "bench/cuda/layer_norm_ladder.cuh"
#include "bench/cuda/softmax_ladder.cuh"

namespace {

namespace ladders = wedge::ladders_emulated;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> uniform(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Runs `check` with the block's threads scheduled first-to-last, then last-to-first.
template <typename Check>
void in_both_orders(Check check) {
  for (bool reverse : {false, true}) {
    wedge::emu::g_reverse_order = reverse;
    check(reverse ? "last-to-first" : "first-to-last");
  }
  wedge::emu::g_reverse_order = false;
}

std::string label(const char* ladder, const char* rung, const std::string& shape, const char* order) {
  return std::string(ladder) + " / " + rung + " / " + shape + " / threads " + order;
}

}  // namespace

TEST_CASE("CUDA ladders (emulated): softmax cross-entropy, every rung on awkward shapes") {
  namespace sm = ladders::softmax_ce;
  for (const int rows : {1, 37}) {
    for (const int V : {1, 31, 33, 300, 1000}) {
      const std::vector<float> x = uniform(std::size_t(rows) * V, -4.0f, 4.0f, unsigned(rows * 7919 + V));
      std::vector<int> targets(static_cast<std::size_t>(rows));
      for (int r = 0; r < rows; ++r) targets[std::size_t(r)] = (r * 7 + 3) % V;
      std::vector<double> loss_ref, grad_ref;
      sm::reference(x, targets, rows, V, loss_ref, grad_ref);
      for (const sm::Rung rung : sm::kRungs) {
        in_both_orders([&](const char* order) {
          std::vector<float> loss(std::size_t(rows), kNaN), grad(x.size(), kNaN);
          sm::run(rung, x.data(), targets.data(), rows, V, loss.data(), grad.data());
          const double loss_err = ladders::relative_error(loss, loss_ref);
          const double grad_err = ladders::relative_error(grad, grad_ref);
          INFO(label("softmax", sm::rung_name(rung), std::to_string(rows) + " x " + std::to_string(V), order));
          INFO("loss error " << loss_err << ", gradient error " << grad_err);
          CHECK(loss_err <= sm::kTolerance);
          CHECK(grad_err <= sm::kTolerance);
        });
      }
    }
  }
}

TEST_CASE("CUDA ladders (emulated): layer norm forward and backward, every rung on awkward shapes") {
  namespace ln = ladders::layer_norm;
  const float eps = 1e-5f;
  struct Shape {
    int rows, D, chunk_rows;
  };
  // Column-sum chunks: the default (one partial chunk for these few rows) and small ones
  // (several chunks, the last one short) so stage two really adds partials.
  // Widths 64, 129, 257 and 600 reach each register size of the fused rung (2, 8, 16 and 32
  // values per lane).
  const Shape shapes[] = {{1, 1, ln::kChunkRows}, {13, 31, ln::kChunkRows}, {37, 33, 5},
                          {37, 1000, 8},          {70, 64, ln::kChunkRows}, {21, 129, 4},
                          {150, 257, 64},         {9, 600, ln::kChunkRows}};
  for (const Shape& s : shapes) {
    const std::size_t n = std::size_t(s.rows) * s.D;
    std::vector<float> x = uniform(n, -2.0f, 2.0f, unsigned(s.rows * 31 + s.D));
    for (float& v : x) v += 3.0f;  // an offset mean, as activations have
    const std::vector<float> gy = uniform(n, -1.0f, 1.0f, unsigned(s.rows * 17 + s.D));
    std::vector<float> gamma = uniform(std::size_t(s.D), -0.1f, 0.1f, 5),
                       beta = uniform(std::size_t(s.D), -0.1f, 0.1f, 6);
    for (float& g : gamma) g += 1.0f;
    std::vector<double> y_ref, mean_ref, rstd_ref, gx_ref, gg_ref, gb_ref;
    ln::reference_forward(x, gamma, beta, s.rows, s.D, eps, y_ref, mean_ref, rstd_ref);
    ln::reference_backward(x, gamma, mean_ref, rstd_ref, gy, s.rows, s.D, gx_ref, gg_ref, gb_ref);
    // The backward reads the reference statistics, so its error is its own.
    const std::vector<float> mean_f(mean_ref.begin(), mean_ref.end()), rstd_f(rstd_ref.begin(), rstd_ref.end());
    const std::string shape =
        std::to_string(s.rows) + " x " + std::to_string(s.D) + ", chunks of " + std::to_string(s.chunk_rows);
    for (const ln::Rung rung : ln::kRungs) {
      REQUIRE(ln::supported(rung, s.D));
      in_both_orders([&](const char* order) {
        std::vector<float> y(n, kNaN), mean(std::size_t(s.rows), kNaN), rstd(std::size_t(s.rows), kNaN);
        ln::forward(rung, x.data(), gamma.data(), beta.data(), s.rows, s.D, eps, y.data(), mean.data(), rstd.data());
        std::vector<float> gx(n, kNaN), gg(std::size_t(s.D), kNaN), gb(std::size_t(s.D), kNaN);
        std::vector<float> scratch(ln::backward_scratch_floats(rung, s.rows, s.D, s.chunk_rows) + 1, kNaN);
        ln::backward(rung, x.data(), gamma.data(), mean_f.data(), rstd_f.data(), gy.data(), s.rows, s.D, gx.data(),
                     gg.data(), gb.data(), scratch.data(), s.chunk_rows);
        const double y_err = ladders::relative_error(y, y_ref), mean_err = ladders::relative_error(mean, mean_ref),
                     rstd_err = ladders::relative_error(rstd, rstd_ref), gx_err = ladders::relative_error(gx, gx_ref),
                     gg_err = ladders::relative_error(gg, gg_ref), gb_err = ladders::relative_error(gb, gb_ref);
        INFO(label("layer norm", ln::rung_name(rung), shape, order));
        INFO("errors: y " << y_err << ", mean " << mean_err << ", rstd " << rstd_err << ", gx " << gx_err << ", ggamma "
                          << gg_err << ", gbeta " << gb_err);
        CHECK(y_err <= ln::kTolerance);
        CHECK(mean_err <= ln::kTolerance);
        CHECK(rstd_err <= ln::kTolerance);
        CHECK(gx_err <= ln::kTolerance);
        CHECK(gg_err <= ln::kTolerance);
        CHECK(gb_err <= ln::kTolerance);
      });
    }
  }
}

TEST_CASE("CUDA ladders (emulated): causal attention forward, every rung on awkward shapes") {
  namespace at = ladders::attention;
  const int BH = 3;
  for (const int dh : {64, 20}) {
    // T = 1; inside the first key tile; one past a tile; inside the second tile; past the
    // first 64-row query block of the flash rung (its first tiles unmasked, the last not).
    for (const int T : {1, 17, 33, 45, 70}) {
      const std::size_t n = std::size_t(BH) * T * dh;
      const std::vector<float> q = uniform(n, -1.5f, 1.5f, unsigned(T * 3 + dh)),
                               k = uniform(n, -1.5f, 1.5f, unsigned(T * 5 + dh)),
                               v = uniform(n, -1.0f, 1.0f, unsigned(T * 7 + dh));
      std::vector<double> out_ref;
      at::reference(q, k, v, BH, T, dh, out_ref);
      for (const at::Rung rung : at::kRungs) {
        REQUIRE(at::supported(rung, T, dh));
        in_both_orders([&](const char* order) {
          std::vector<float> out(n, kNaN);
          at::run(rung, q.data(), k.data(), v.data(), BH, T, dh, out.data());
          const double err = ladders::relative_error(out, out_ref);
          INFO(label("attention", at::rung_name(rung),
                     std::to_string(BH) + " x " + std::to_string(T) + " x " + std::to_string(dh), order));
          INFO("error " << err);
          CHECK(err <= at::kTolerance);
        });
      }
    }
  }
}

// The oracles above are the ladders' own float64 loops; here they meet the engine's
// reference kernels (kernels/ref, in double) on one shape each.
TEST_CASE("CUDA ladders: the ladders' float64 references agree with the engine's reference kernels") {
  const wedge::kernels::KernelTable<double>& ref = wedge::kernels::ref_table_f64();
  using wedge::kernels::i64;
  auto max_diff = [](const std::vector<double>& a, const std::vector<double>& b) {
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
  };

  SUBCASE("softmax cross-entropy") {
    const int rows = 5, V = 77;
    const std::vector<float> x = uniform(std::size_t(rows) * V, -4.0f, 4.0f, 11);
    std::vector<int> targets = {0, 76, 3, 40, 12};
    std::vector<double> loss, grad;
    ladders::softmax_ce::reference(x, targets, rows, V, loss, grad);
    const std::vector<double> xd(x.begin(), x.end());
    std::vector<double> lse(static_cast<std::size_t>(rows)), glogits(xd.size());
    double mean_loss = 0, count = 0, gloss = 1;
    ref.cross_entropy_forward(xd.data(), targets.data(), rows, V, -100, lse.data(), &mean_loss, &count);
    ref.cross_entropy_backward(xd.data(), targets.data(), lse.data(), &count, &gloss, rows, V, -100, glogits.data());
    double ladder_mean = 0;
    for (double l : loss) ladder_mean += l / rows;
    CHECK(std::fabs(ladder_mean - mean_loss) < 1e-12);
    for (double& g : grad) g /= rows;  // the engine's gradient is of the mean loss
    CHECK(max_diff(grad, glogits) < 1e-12);
  }
  SUBCASE("layer norm") {
    const int rows = 6, D = 45;
    const std::vector<float> x = uniform(std::size_t(rows) * D, -2.0f, 2.0f, 12),
                             gy = uniform(std::size_t(rows) * D, -1.0f, 1.0f, 13),
                             gamma = uniform(std::size_t(D), 0.5f, 1.5f, 14), beta = uniform(std::size_t(D), -1, 1, 15);
    std::vector<double> y, mean, rstd, gx, gg, gb;
    ladders::layer_norm::reference_forward(x, gamma, beta, rows, D, 1e-5, y, mean, rstd);
    ladders::layer_norm::reference_backward(x, gamma, mean, rstd, gy, rows, D, gx, gg, gb);
    const std::vector<double> xd(x.begin(), x.end()), gyd(gy.begin(), gy.end()), gd(gamma.begin(), gamma.end()),
        bd(beta.begin(), beta.end());
    std::vector<double> y2(y.size()), mean2(mean.size()), rstd2(rstd.size()), gx2(gx.size()), gg2(gg.size()),
        gb2(gb.size());
    ref.layer_norm_forward(xd.data(), gd.data(), bd.data(), rows, D, 1e-5, y2.data(), mean2.data(), rstd2.data());
    ref.layer_norm_backward(xd.data(), gd.data(), mean2.data(), rstd2.data(), gyd.data(), rows, D, gx2.data(),
                            gg2.data(), gb2.data());
    CHECK(max_diff(y, y2) < 1e-12);
    CHECK(max_diff(gx, gx2) < 1e-12);
    CHECK(max_diff(gg, gg2) < 1e-12);
    CHECK(max_diff(gb, gb2) < 1e-12);
  }
  SUBCASE("causal attention") {
    const int BH = 2, T = 19, dh = 12;
    const std::size_t n = std::size_t(BH) * T * dh;
    const std::vector<float> q = uniform(n, -1.5f, 1.5f, 16), k = uniform(n, -1.5f, 1.5f, 17),
                             v = uniform(n, -1.0f, 1.0f, 18);
    std::vector<double> out;
    ladders::attention::reference(q, k, v, BH, T, dh, out);
    const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    std::vector<double> out2(n), lse(std::size_t(BH) * T);
    ref.attention_forward(qd.data(), kd.data(), vd.data(), BH, T, dh, 1.0 / std::sqrt(double(dh)), true, out2.data(),
                          lse.data());
    CHECK(max_diff(out, out2) < 1e-12);
  }
}
