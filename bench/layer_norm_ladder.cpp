// The layer norm teaching ladder: from the reference loops to wedge's AVX-512 kernel on
// every thread, forward and backward, each step checked against the float64 reference and
// timed as GB/s and % of this machine's measured memory bandwidth. Layer norm does a few
// flops per byte, so bandwidth, not arithmetic, is its ceiling: the question each step
// answers is how close it gets to streaming its operands once.
//
//   build/bench/layer_norm_ladder [rows] [D]      (default 32768 x 256: 32 MB per tensor,
//                                                  beyond the caches; D = the paper models')
//
// The steps (read them beside ops/layer_norm_walkthrough.md):
//   1. reference    kernels/ref/layer_norm.cpp: two passes over each row in double, one
//                   element at a time, then (backward) the column sums one column at a
//                   time — a walk down each column of x and gy, one cache line per element.
//   2. float loops  the same formulas in float with the row's sums kept in locals and the
//                   column sums accumulated row by row into a D-wide array, so every pass
//                   is unit-stride and the compiler vectorises it.
//   3. avx512       wedge's kernel (kernels/cpu/layer_norm_simd.cpp at 16 lanes) on one thread: 16
//                   lanes, two accumulators per sum, masked tails, column sums in double in
//                   registers for 64 columns per sweep over the rows.
//   4. + threads    the same on all pool threads: rows split for the per-row work, whole
//                   column groups for the column sums (no partial sums to combine, so the
//                   result does not depend on the thread count).
// Bytes counted are the minimum each direction must move: forward reads x and writes y (8
// bytes per element); backward reads x and gy and writes gx (12 bytes per element; the
// column sums read x and gy again in wedge's kernel, which this count does not credit).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/tables.h"
#include "ladder.h"

using namespace wedge;
using namespace wedge::kernels;
using namespace wedge::ladder;

namespace {

// ---- step 2: plain float loops ---------------------------------------------------------------

void float_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D, float eps, float* y,
                   float* mean, float* rstd) {
  for (i64 r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float sum = 0;
    for (i64 d = 0; d < D; ++d) sum += xr[d];
    const float mu = sum / float(D);
    float squares = 0;
    for (i64 d = 0; d < D; ++d) squares += (xr[d] - mu) * (xr[d] - mu);
    const float inv_std = 1.0f / std::sqrt(squares / float(D) + eps);
    for (i64 d = 0; d < D; ++d) y[r * D + d] = gamma[d] * ((xr[d] - mu) * inv_std) + beta[d];
    mean[r] = mu;
    rstd[r] = inv_std;
  }
}

void float_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* gy, i64 rows,
                    i64 D, float* gx, float* ggamma, float* gbeta) {
  std::fill(ggamma, ggamma + D, 0.0f);
  std::fill(gbeta, gbeta + D, 0.0f);
  for (i64 r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    const float* gyr = gy + r * D;
    float sum_g = 0, sum_g_xhat = 0;
    for (i64 d = 0; d < D; ++d) {
      const float xhat = (xr[d] - mean[r]) * rstd[r];
      sum_g += gyr[d] * gamma[d];
      sum_g_xhat += gyr[d] * gamma[d] * xhat;
      ggamma[d] += gyr[d] * xhat;  // the column sums, row by row: unit stride
      gbeta[d] += gyr[d];
    }
    const float mean_g = sum_g / float(D), mean_g_xhat = sum_g_xhat / float(D);
    for (i64 d = 0; d < D; ++d) {
      const float xhat = (xr[d] - mean[r]) * rstd[r];
      gx[r * D + d] = rstd[r] * (gyr[d] * gamma[d] - mean_g - xhat * mean_g_xhat);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const i64 rows = argc > 1 ? std::atoll(argv[1]) : 32768, D = argc > 2 ? std::atoll(argv[2]) : 256;
  if (rows <= 0 || D <= 0) {
    std::fprintf(stderr, "usage: layer_norm_ladder [rows > 0] [D > 0]\n");
    return 1;
  }
  const int threads = num_threads();
  const Ceiling bw = copy_bandwidth();
  std::printf("layer norm over (%lld, %lld), fp32.  %s\n", static_cast<long long>(rows), static_cast<long long>(D),
              cpu_backend_name());
  bw.print("copy bandwidth (read + write)", "GB/s");
  std::printf("\n");

  const auto n = static_cast<std::size_t>(rows * D);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(n), gy(n), gamma(static_cast<std::size_t>(D)), beta(static_cast<std::size_t>(D));
  for (float& v : x) v = dist(gen) + 3.0f;  // an offset mean, as activations have
  for (float& v : gy) v = dist(gen);
  for (float& v : gamma) v = 1.0f + 0.1f * dist(gen);
  for (float& v : beta) v = 0.1f * dist(gen);

  // The oracle: the reference in float64.
  std::vector<double> xd(x.begin(), x.end()), gyd(gy.begin(), gy.end()), gd(gamma.begin(), gamma.end()),
      bd(beta.begin(), beta.end());
  std::vector<double> y_ref(n), mean_ref(static_cast<std::size_t>(rows)), rstd_ref(static_cast<std::size_t>(rows)),
      gx_ref(n), gg_ref(static_cast<std::size_t>(D)), gb_ref(static_cast<std::size_t>(D));
  ref_table_f64().layer_norm_forward(xd.data(), gd.data(), bd.data(), rows, D, 1e-5, y_ref.data(), mean_ref.data(),
                                     rstd_ref.data());
  ref_table_f64().layer_norm_backward(xd.data(), gd.data(), mean_ref.data(), rstd_ref.data(), gyd.data(), rows, D,
                                      gx_ref.data(), gg_ref.data(), gb_ref.data());
  std::vector<double> params_ref(gg_ref);
  params_ref.insert(params_ref.end(), gb_ref.begin(), gb_ref.end());

  std::vector<float> y(n), mean(static_cast<std::size_t>(rows)), rstd(static_cast<std::size_t>(rows)), gx(n),
      gg(static_cast<std::size_t>(D)), gb(static_cast<std::size_t>(D));
  using Forward = void (*)(const float*, const float*, const float*, i64, i64, float, float*, float*, float*);
  using Backward = void (*)(const float*, const float*, const float*, const float*, const float*, i64, i64, float*,
                            float*, float*);
  using Step = PairStep<Forward, Backward>;
  std::vector<Step> steps = {
      {"1 reference (double, scalar)", 1, ref_table_f32().layer_norm_forward, ref_table_f32().layer_norm_backward},
      {"2 float loops, unit stride", 1, float_forward, float_backward},
  };
  if (has_avx512()) {
    steps.push_back({"3 avx512 kernel", 1, cpu_table_f32().layer_norm_forward, cpu_table_f32().layer_norm_backward});
    steps.push_back({"4 + all threads", threads, cpu_table_f32().layer_norm_forward, cpu_table_f32().layer_norm_backward});
  } else {
    std::printf("(no AVX-512 on this CPU: steps 3-4 skipped)\n");
  }

  Table table({"fwd", "bwd"}, "GB/s", "bw");
  table.header();
  for (const Step& st : steps) {
    Cell fwd = timed(
        [&] { st.forward(x.data(), gamma.data(), beta.data(), rows, D, 1e-5f, y.data(), mean.data(), rstd.data()); },
        8.0 * double(n), bw, st.threads);
    // The backward reads the reference statistics, so its error is its own.
    std::vector<float> mean_f(mean_ref.begin(), mean_ref.end()), rstd_f(rstd_ref.begin(), rstd_ref.end());
    Cell bwd = timed(
        [&] {
          st.backward(x.data(), gamma.data(), mean_f.data(), rstd_f.data(), gy.data(), rows, D, gx.data(), gg.data(),
                      gb.data());
        },
        12.0 * double(n), bw, st.threads);
    std::vector<float> params(gg);
    params.insert(params.end(), gb.begin(), gb.end());
    const Error gx_err = max_error(gx, gx_ref), params_err = max_error(params, params_ref);
    fwd.error = max_error(y, y_ref);
    bwd.error = worst(gx_err, params_err);
    // float32 against float64: y and gx are O(1); the column sums add `rows` terms.
    fwd.ok = fwd.error.abs < 1e-4;
    bwd.ok = gx_err.abs < 1e-4 && params_err.abs < 1e-6 * double(rows) * 4;
    table.row(st.name, st.threads, {fwd, bwd});
  }
  set_num_threads(threads);
  return table.all_ok() ? 0 : 1;
}
