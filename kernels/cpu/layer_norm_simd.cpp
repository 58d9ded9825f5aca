// Layer normalisation forward and backward, threaded over rows; one source for both widths
// (simd.h). Same math as kernels/ref/layer_norm.cpp (two-pass mean and variance, biased
// variance); the row statistics are float sums over the lanes, so they depend on the width.
//
// Backward reads x and gy once: gx is per row, and ggamma and gbeta (sums over rows per
// column) are gathered in the same sweep as double partials per fixed chunk of rows, then
// summed per column in chunk order. The chunks depend on the row count only, so results
// do not depend on the thread count (and, each column being its own sum, ggamma and gbeta
// do not depend on the width either).
//
// The residual pair (s = x + dropout(y), then the norm of s) runs the same row code: the
// forward drops a group of rows of y into s (dropout_simd.h), then adds x and normalises
// each row while it is in L1; the backward's sweep adds the gradient that reaches s
// directly to each row of gx and drops each finished chunk of rows into gy. So each is bit
// for bit the kernels run apart.
//
// Row tails go through masked loads and stores, which neither read nor write past the row.
#include "kernels/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/dropout_simd.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {

i64 row_grain(i64 D) { return D >= 2048 ? 1 : 2048 / (D < 1 ? 1 : D) + 1; }

// v, through an empty asm: the compiler cannot contract the multiply that made v into the
// add that uses it.
inline vf rounded(vf v) {
  asm("" : "+v"(v));
  return v;
}

// One row: y = the normalised x (times gamma, plus beta), its mean and 1 / std.
inline void normalise_row(const float* xr, const float* gamma, const float* beta, i64 D, float eps, float* yr,
                          float& mean, float& rstd) {
  // Two accumulators over pairs of vectors, the tail into the first.
  vf s0 = zero(), s1 = zero();
  i64 j = 0;
  for (; j + 2 * kLanes <= D; j += 2 * kLanes) {
    s0 = add(s0, load(xr + j));
    s1 = add(s1, load(xr + j + kLanes));
  }
  for (; j < D; j += kLanes) s0 = add(s0, load_first(xr + j, D - j));
  const float mu = hsum(add(s0, s1)) / float(D);
  const vf vmu = set1(mu);
  vf q0 = zero(), q1 = zero();
  for (j = 0; j + 2 * kLanes <= D; j += 2 * kLanes) {
    const vf d0 = sub(load(xr + j), vmu);
    const vf d1 = sub(load(xr + j + kLanes), vmu);
    q0 = fmadd(d0, d0, q0);
    q1 = fmadd(d1, d1, q1);
  }
  for (; j < D; j += kLanes) {
    // The lanes past the row read 0, and 0 - mean is not 0: mask the deviation.
    const vf d = keep(first_lanes(D - j), sub(load_first(xr + j, D - j), vmu));
    q0 = fmadd(d, d, q0);
  }
  const float var = hsum(add(q0, q1)) / float(D);
  const float inv_std = float(1.0 / std::sqrt(double(var) + double(eps)));
  const vf vinv = set1(inv_std);
  for (j = 0; j < D; j += kLanes) {
    vf out = mul(sub(load_first(xr + j, D - j), vmu), vinv);
    if (gamma) out = mul(out, load_first(gamma + j, D - j));
    if (beta) out = add(out, load_first(beta + j, D - j));
    store_first(yr + j, D - j, out);
  }
  mean = mu;
  rstd = inv_std;
}

// The backward sweep of layer_norm_backward (which see), with the residual pair's extras:
// gs (may be null) is added to each row of the input gradient, which goes to gx, or to
// scratch when gx is null; finish_rows(r0, r1, first) then sees the finished rows r0 .. r1 - 1
// of a chunk, `first` pointing at row r0's gradient (rows D apart).
template <typename FinishRows>
void backward_sweep(const float* x, const float* gamma, const float* mean, const float* rstd, const float* gy,
                    const float* gs, i64 rows, i64 D, float* gx, float* ggamma, float* gbeta, FinishRows finish_rows) {
  // gx_d = rstd (g_d - mean(g) - xhat_d mean(g xhat)),  g = gy * gamma, per row; and the
  // column sums ggamma_d = sum_rows gy_d xhat_d, gbeta_d = sum_rows gy_d in the same sweep:
  // each chunk of kChunkRows rows adds its rows, in order, into its own double partials
  // (D of each, in L1), and the partials are summed per column in chunk order at the end.
  // The chunks are fixed by the row count alone, so the result does not depend on the
  // thread count; x and gy are read once.
  constexpr i64 kChunkRows = 64;
  const bool columns = ggamma != nullptr || gbeta != nullptr;
  const i64 chunks = (rows + kChunkRows - 1) / kChunkRows;
  std::vector<double> partial(columns ? static_cast<std::size_t>(chunks * 2 * D) : 0);
  const i64 grain = std::max<i64>(1, row_grain(D) / kChunkRows);
  parallel_for(0, chunks, grain, [&](i64 c0, i64 c1) {
    std::vector<float> scratch(gx ? 0 : static_cast<std::size_t>(kChunkRows * D));
    for (i64 c = c0; c < c1; ++c) {
      const i64 first_row = c * kChunkRows, end_row = std::min(rows, (c + 1) * kChunkRows);
      double* part_gamma = columns ? partial.data() + c * 2 * D : nullptr;
      double* part_beta = columns ? part_gamma + D : nullptr;
      if (columns) std::fill(part_gamma, part_gamma + 2 * D, 0.0);
      for (i64 r = first_row; r < end_row; ++r) {
        const float* xr = x + r * D;
        const float* gyr = gy + r * D;
        float* gxr = gx ? gx + r * D : scratch.data() + (r - first_row) * D;
        const float* gsr = gs ? gs + r * D : nullptr;
        const vf vmu = set1(mean[r]), vrstd = set1(rstd[r]);
        vf sum_g = zero(), sum_gx = zero();
        for (i64 j = 0; j < D; j += kLanes) {
          // xhat of the lanes past the row is -mean rstd, not 0: masked, so that a huge
          // one cannot make 0 * xhat a NaN.
          const vf xhat = keep(first_lanes(D - j), mul(sub(load_first(xr + j, D - j), vmu), vrstd));
          vf g = load_first(gyr + j, D - j);
          if (gamma) g = mul(g, load_first(gamma + j, D - j));
          sum_g = add(sum_g, g);
          sum_gx = fmadd(g, xhat, sum_gx);
        }
        const vf mean_g = set1(hsum(sum_g) / float(D));
        const vf mean_gx = set1(hsum(sum_gx) / float(D));
        const vd mu_d = set1(double(mean[r])), rs_d = set1(double(rstd[r]));
        for (i64 j = 0; j < D; j += kLanes) {
          const vf xv = load_first(xr + j, D - j), gyv = load_first(gyr + j, D - j);
          const vf xhat = mul(sub(xv, vmu), vrstd);
          const vf g = gamma ? mul(gyv, load_first(gamma + j, D - j)) : gyv;
          const vf inner = fnmadd(xhat, mean_gx, sub(g, mean_g));
          vf gxv = mul(vrstd, inner);
          // Rounded before gs is added (no fused multiply-add), as when autograd adds them.
          if (gsr) gxv = add(rounded(gxv), load_first(gsr + j, D - j));
          store_first(gxr + j, D - j, gxv);
          if (!columns) continue;
          // This row's column terms, in double (xhat from the float statistics, as the
          // reference forms it), added into the chunk's partials kDoubleLanes columns at a
          // time: the lower half of the vector's lanes, then the upper.
          for (int half = 0; half < 2 && j + kDoubleLanes * half < D; ++half) {
            const vd gd = half ? widen_hi(gyv) : widen_lo(gyv);
            const vd xd = half ? widen_hi(xv) : widen_lo(xv);
            const vd xhat_d = mul(sub(xd, mu_d), rs_d);
            const i64 k = j + kDoubleLanes * half, n = D - k;
            store_first(part_gamma + k, n, fmadd(gd, xhat_d, load_first(part_gamma + k, n)));
            store_first(part_beta + k, n, add(gd, load_first(part_beta + k, n)));
          }
        }
      }
      finish_rows(first_row, end_row, gx ? gx + first_row * D : scratch.data());
    }
  });
  if (!columns) return;
  // The chunks' partials, per column in chunk order, kLanes columns at a time (a lower and
  // an upper half in double, narrowed to floats at the end); 64 columns per task.
  parallel_for(0, (D + kLanes - 1) / kLanes, 64 / kLanes, [&](i64 q0, i64 q1) {
    for (i64 q = q0; q < q1; ++q) {
      const i64 j = q * kLanes;
      vd gamma_lo = zero_d(), gamma_hi = zero_d();
      vd beta_lo = zero_d(), beta_hi = zero_d();
      for (i64 c = 0; c < chunks; ++c) {
        const double* pg = partial.data() + c * 2 * D + j;
        const double* pb = pg + D;
        gamma_lo = add(gamma_lo, load_first(pg, D - j));
        gamma_hi = add(gamma_hi, load_first(pg + kDoubleLanes, D - j - kDoubleLanes));
        beta_lo = add(beta_lo, load_first(pb, D - j));
        beta_hi = add(beta_hi, load_first(pb + kDoubleLanes, D - j - kDoubleLanes));
      }
      if (ggamma) store_first(ggamma + j, D - j, narrow(gamma_lo, gamma_hi));
      if (gbeta) store_first(gbeta + j, D - j, narrow(beta_lo, beta_hi));
    }
  });
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D,
                        float eps, float* y, float* mean, float* rstd) {
  parallel_for(0, rows, row_grain(D), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) normalise_row(x + r * D, gamma, beta, D, eps, y + r * D, mean[r], rstd[r]);
  });
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* gy, i64 rows, i64 D, float* gx, float* ggamma, float* gbeta) {
  backward_sweep(x, gamma, mean, rstd, gy, nullptr, rows, D, gx, ggamma, gbeta, [](i64, i64, const float*) {});
}

void residual_layer_norm_forward(const float* x, const float* y, const float* gamma, const float* beta, i64 rows,
                                 i64 D, float p, std::uint64_t seed, std::uint64_t offset, float eps, float* s,
                                 float* out, float* mean, float* rstd) {
  const double scale = dropout_scale(p);
  // Rows in groups of about 16 KB: the group's y dropped into s in one span (whole Philox
  // blocks across row ends), then row by row x added and the sum normalised, from L1.
  const i64 group = std::max<i64>(1, 4096 / std::max<i64>(D, 1));
  parallel_for(0, rows, row_grain(D), [&](i64 r0, i64 r1) {
    for (i64 g0 = r0; g0 < r1; g0 += group) {
      const i64 g1 = std::min(r1, g0 + group);
      if (p > 0.0f) dropout_span(y + g0 * D, s + g0 * D, (g1 - g0) * D, p, scale, seed,
                                 offset + static_cast<std::uint64_t>(g0 * D));
      const float* dropped = p > 0.0f ? s : y;  // p == 0 adds y itself
      for (i64 r = g0; r < g1; ++r) {
        const float* xr = x + r * D;
        const float* yr = dropped + r * D;
        float* sr = s + r * D;
        for (i64 j = 0; j < D; j += kLanes)
          store_first(sr + j, D - j, add(load_first(xr + j, D - j), load_first(yr + j, D - j)));
        normalise_row(sr, gamma, beta, D, eps, out + r * D, mean[r], rstd[r]);
      }
    }
  });
}

void residual_layer_norm_backward(const float* s, const float* gamma, const float* mean, const float* rstd,
                                  const float* gout, const float* gs, i64 rows, i64 D, float p, std::uint64_t seed,
                                  std::uint64_t offset, float* gx, float* gy, float* ggamma, float* gbeta) {
  const double scale = dropout_scale(p);
  // Each chunk's finished rows dropped into gy in one span.
  backward_sweep(s, gamma, mean, rstd, gout, gs, rows, D, gx, ggamma, gbeta, [&](i64 r0, i64 r1, const float* gsum) {
    if (!gy) return;
    const i64 n = (r1 - r0) * D;
    if (p > 0.0f) dropout_span(gsum, gy + r0 * D, n, p, scale, seed, offset + static_cast<std::uint64_t>(r0 * D));
    else std::copy(gsum, gsum + n, gy + r0 * D);
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
