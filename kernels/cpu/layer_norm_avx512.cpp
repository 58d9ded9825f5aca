// Layer normalisation forward and backward, AVX-512, threaded over rows. Same math as
// kernels/ref/layer_norm.cpp (two-pass mean and variance, biased variance).
//
// Backward reads x and gy once: gx is per row, and ggamma and gbeta (sums over rows per
// column) are gathered in the same sweep as double partials per fixed chunk of rows, then
// summed per column in chunk order. The chunks depend on the row count only, so results
// do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

i64 row_grain(i64 D) { return D >= 2048 ? 1 : 2048 / (D < 1 ? 1 : D) + 1; }

__m512 load(const float* p, i64 j, i64 n) {
  return _mm512_maskz_loadu_ps(first_lanes(n - j), p + j);
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D,
                        float eps, float* y, float* mean, float* rstd) {
  parallel_for(0, rows, row_grain(D), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* xr = x + r * D;
      float* yr = y + r * D;
      __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
      i64 j = 0;
      for (; j + 32 <= D; j += 32) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(xr + j));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(xr + j + 16));
      }
      for (; j < D; j += 16) s0 = _mm512_add_ps(s0, load(xr, j, D));
      const float mu = hsum(_mm512_add_ps(s0, s1)) / float(D);
      const __m512 vmu = _mm512_set1_ps(mu);
      __m512 q0 = _mm512_setzero_ps(), q1 = _mm512_setzero_ps();
      for (j = 0; j + 32 <= D; j += 32) {
        const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(xr + j), vmu);
        const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(xr + j + 16), vmu);
        q0 = _mm512_fmadd_ps(d0, d0, q0);
        q1 = _mm512_fmadd_ps(d1, d1, q1);
      }
      for (; j < D; j += 16) {
        const __m512 d = _mm512_maskz_sub_ps(first_lanes(D - j), load(xr, j, D), vmu);
        q0 = _mm512_fmadd_ps(d, d, q0);
      }
      const float var = hsum(_mm512_add_ps(q0, q1)) / float(D);
      const float inv_std = float(1.0 / std::sqrt(double(var) + double(eps)));
      const __m512 vinv = _mm512_set1_ps(inv_std);
      for (j = 0; j < D; j += 16) {
        const __mmask16 mask = first_lanes(D - j);
        __m512 out = _mm512_mul_ps(_mm512_sub_ps(load(xr, j, D), vmu), vinv);
        if (gamma) out = _mm512_mul_ps(out, load(gamma, j, D));
        if (beta) out = _mm512_add_ps(out, load(beta, j, D));
        _mm512_mask_storeu_ps(yr + j, mask, out);
      }
      mean[r] = mu;
      rstd[r] = inv_std;
    }
  });
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* gy, i64 rows, i64 D, float* gx, float* ggamma, float* gbeta) {
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
    for (i64 c = c0; c < c1; ++c) {
      double* part_gamma = columns ? partial.data() + c * 2 * D : nullptr;
      double* part_beta = columns ? part_gamma + D : nullptr;
      if (columns) std::fill(part_gamma, part_gamma + 2 * D, 0.0);
      for (i64 r = c * kChunkRows; r < std::min(rows, (c + 1) * kChunkRows); ++r) {
        const float* xr = x + r * D;
        const float* gyr = gy + r * D;
        float* gxr = gx + r * D;
        const __m512 vmu = _mm512_set1_ps(mean[r]), vrstd = _mm512_set1_ps(rstd[r]);
        __m512 sum_g = _mm512_setzero_ps(), sum_gx = _mm512_setzero_ps();
        for (i64 j = 0; j < D; j += 16) {
          const __mmask16 mask = first_lanes(D - j);
          const __m512 xhat = _mm512_maskz_mul_ps(mask, _mm512_sub_ps(load(xr, j, D), vmu), vrstd);
          __m512 g = load(gyr, j, D);
          if (gamma) g = _mm512_mul_ps(g, load(gamma, j, D));
          sum_g = _mm512_add_ps(sum_g, g);
          sum_gx = _mm512_fmadd_ps(g, xhat, sum_gx);
        }
        const __m512 mean_g = _mm512_set1_ps(hsum(sum_g) / float(D));
        const __m512 mean_gx = _mm512_set1_ps(hsum(sum_gx) / float(D));
        const __m512d mu_d = _mm512_set1_pd(mean[r]), rs_d = _mm512_set1_pd(rstd[r]);
        for (i64 j = 0; j < D; j += 16) {
          const __mmask16 mask = first_lanes(D - j);
          const __m512 xv = load(xr, j, D), gyv = load(gyr, j, D);
          const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(xv, vmu), vrstd);
          const __m512 g = gamma ? _mm512_mul_ps(gyv, load(gamma, j, D)) : gyv;
          const __m512 inner = _mm512_fnmadd_ps(xhat, mean_gx, _mm512_sub_ps(g, mean_g));
          _mm512_mask_storeu_ps(gxr + j, mask, _mm512_mul_ps(vrstd, inner));
          if (!columns) continue;
          // This row's column terms, in double (xhat from the float statistics, as the
          // reference forms it), added into the chunk's partials 8 columns at a time.
          for (int half = 0; half < 2 && j + 8 * half < D; ++half) {
            const __mmask8 lanes = static_cast<__mmask8>(mask >> (8 * half));
            const __m256 xh = half ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xv), 1))
                                   : _mm512_castps512_ps256(xv);
            const __m256 gh = half ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(gyv), 1))
                                   : _mm512_castps512_ps256(gyv);
            const __m512d gd = _mm512_cvtps_pd(gh);
            const __m512d xhat_d = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(xh), mu_d), rs_d);
            double* pg = part_gamma + j + 8 * half;
            double* pb = part_beta + j + 8 * half;
            _mm512_mask_storeu_pd(pg, lanes, _mm512_fmadd_pd(gd, xhat_d, _mm512_maskz_loadu_pd(lanes, pg)));
            _mm512_mask_storeu_pd(pb, lanes, _mm512_add_pd(gd, _mm512_maskz_loadu_pd(lanes, pb)));
          }
        }
      }
    }
  });
  if (!columns) return;
  // The chunks' partials, per column in chunk order.
  parallel_for(0, (D + 7) / 8, 8, [&](i64 q0, i64 q1) {
    for (i64 q = q0; q < q1; ++q) {
      const i64 j = q * 8;
      const __mmask8 lanes = static_cast<__mmask8>(first_lanes(D - j) & 0xFF);
      __m512d sum_gamma = _mm512_setzero_pd(), sum_beta = _mm512_setzero_pd();
      for (i64 c = 0; c < chunks; ++c) {
        sum_gamma = _mm512_add_pd(sum_gamma, _mm512_maskz_loadu_pd(lanes, partial.data() + c * 2 * D + j));
        sum_beta = _mm512_add_pd(sum_beta, _mm512_maskz_loadu_pd(lanes, partial.data() + c * 2 * D + D + j));
      }
      if (ggamma) _mm256_mask_storeu_ps(ggamma + j, lanes, _mm512_cvtpd_ps(sum_gamma));
      if (gbeta) _mm256_mask_storeu_ps(gbeta + j, lanes, _mm512_cvtpd_ps(sum_beta));
    }
  });
}

}  // namespace wedge::kernels::cpu::avx512
