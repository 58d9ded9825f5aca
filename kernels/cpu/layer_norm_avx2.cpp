// Layer normalisation forward and backward for CPUs with AVX2 but not AVX-512, threaded
// over rows: layer_norm_avx512.cpp on 8 lanes, the same steps in the same order. Same math
// as kernels/ref/layer_norm.cpp (two-pass mean and variance, biased variance); the row
// statistics are float sums over lanes, as in the AVX-512 kernel.
//
// Backward reads x and gy once: gx is per row, and ggamma and gbeta (sums over rows per
// column) are gathered in the same sweep as double partials per fixed chunk of rows, then
// summed per column in chunk order. The chunks depend on the row count only, so results
// do not depend on the thread count (and, each column being its own sum, ggamma and gbeta
// are the AVX-512 kernel's bits).
//
// Whole vectors load and store plainly; the one partial vector at the end of a row goes
// through the lane mask, which neither reads nor writes past the row (masked stores are
// slow on some AVX2 CPUs, so they are kept to the tails).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {
namespace {

i64 row_grain(i64 D) { return D >= 2048 ? 1 : 2048 / (D < 1 ? 1 : D) + 1; }

// The lane mask of the first n of 4 doubles, and the doubles' load and store through it.
inline __m256i first_lanes4(i64 n) {
  const long long count = n <= 0 ? 0 : n >= 4 ? 4 : n;
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(count), _mm256_setr_epi64x(0, 1, 2, 3));
}
inline __m256d load_pd(const double* p, i64 n) {
  return n >= 4 ? _mm256_loadu_pd(p) : _mm256_maskload_pd(p, first_lanes4(n));
}
inline void store_pd(double* p, i64 n, __m256d v) {
  if (n >= 4) _mm256_storeu_pd(p, v);
  else _mm256_maskstore_pd(p, first_lanes4(n), v);
}

}  // namespace

void layer_norm_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D,
                        float eps, float* y, float* mean, float* rstd) {
  parallel_for(0, rows, row_grain(D), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* xr = x + r * D;
      float* yr = y + r * D;
      // Two accumulators over pairs of vectors, the tail into the first, as the AVX-512
      // kernel does with twice the width.
      __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
      i64 j = 0;
      for (; j + 16 <= D; j += 16) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(xr + j));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(xr + j + 8));
      }
      for (; j < D; j += 8) s0 = _mm256_add_ps(s0, load_first(xr + j, D - j));
      const float mu = hsum8(_mm256_add_ps(s0, s1)) / float(D);
      const __m256 vmu = _mm256_set1_ps(mu);
      __m256 q0 = _mm256_setzero_ps(), q1 = _mm256_setzero_ps();
      for (j = 0; j + 16 <= D; j += 16) {
        const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(xr + j), vmu);
        const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(xr + j + 8), vmu);
        q0 = _mm256_fmadd_ps(d0, d0, q0);
        q1 = _mm256_fmadd_ps(d1, d1, q1);
      }
      for (; j < D; j += 8) {
        // The lanes past the row read 0, and 0 - mean is not 0: mask the deviation.
        const __m256 valid = _mm256_castsi256_ps(first_lanes8(D - j));
        const __m256 d = _mm256_and_ps(valid, _mm256_sub_ps(load_first(xr + j, D - j), vmu));
        q0 = _mm256_fmadd_ps(d, d, q0);
      }
      const float var = hsum8(_mm256_add_ps(q0, q1)) / float(D);
      const float inv_std = float(1.0 / std::sqrt(double(var) + double(eps)));
      const __m256 vinv = _mm256_set1_ps(inv_std);
      for (j = 0; j < D; j += 8) {
        __m256 out = _mm256_mul_ps(_mm256_sub_ps(load_first(xr + j, D - j), vmu), vinv);
        if (gamma) out = _mm256_mul_ps(out, load_first(gamma + j, D - j));
        if (beta) out = _mm256_add_ps(out, load_first(beta + j, D - j));
        store_first(yr + j, D - j, out);
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
        const __m256 vmu = _mm256_set1_ps(mean[r]), vrstd = _mm256_set1_ps(rstd[r]);
        __m256 sum_g = _mm256_setzero_ps(), sum_gx = _mm256_setzero_ps();
        for (i64 j = 0; j < D; j += 8) {
          // xhat of the lanes past the row is -mean rstd, not 0: masked, so that a huge
          // one cannot make 0 * xhat a NaN.
          const __m256 valid = _mm256_castsi256_ps(first_lanes8(D - j));
          const __m256 xhat = _mm256_and_ps(valid, _mm256_mul_ps(_mm256_sub_ps(load_first(xr + j, D - j), vmu), vrstd));
          __m256 g = load_first(gyr + j, D - j);
          if (gamma) g = _mm256_mul_ps(g, load_first(gamma + j, D - j));
          sum_g = _mm256_add_ps(sum_g, g);
          sum_gx = _mm256_fmadd_ps(g, xhat, sum_gx);
        }
        const __m256 mean_g = _mm256_set1_ps(hsum8(sum_g) / float(D));
        const __m256 mean_gx = _mm256_set1_ps(hsum8(sum_gx) / float(D));
        const __m256d mu_d = _mm256_set1_pd(mean[r]), rs_d = _mm256_set1_pd(rstd[r]);
        for (i64 j = 0; j < D; j += 8) {
          const __m256 xv = load_first(xr + j, D - j), gyv = load_first(gyr + j, D - j);
          const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(xv, vmu), vrstd);
          const __m256 g = gamma ? _mm256_mul_ps(gyv, load_first(gamma + j, D - j)) : gyv;
          const __m256 inner = _mm256_fnmadd_ps(xhat, mean_gx, _mm256_sub_ps(g, mean_g));
          store_first(gxr + j, D - j, _mm256_mul_ps(vrstd, inner));
          if (!columns) continue;
          // This row's column terms, in double (xhat from the float statistics, as the
          // reference forms it), added into the chunk's partials 4 columns at a time.
          for (int half = 0; half < 2 && j + 4 * half < D; ++half) {
            const __m128 xh = half ? _mm256_extractf128_ps(xv, 1) : _mm256_castps256_ps128(xv);
            const __m128 gh = half ? _mm256_extractf128_ps(gyv, 1) : _mm256_castps256_ps128(gyv);
            const __m256d gd = _mm256_cvtps_pd(gh);
            const __m256d xhat_d = _mm256_mul_pd(_mm256_sub_pd(_mm256_cvtps_pd(xh), mu_d), rs_d);
            const i64 k = j + 4 * half, n = D - k;
            store_pd(part_gamma + k, n, _mm256_fmadd_pd(gd, xhat_d, load_pd(part_gamma + k, n)));
            store_pd(part_beta + k, n, _mm256_add_pd(gd, load_pd(part_beta + k, n)));
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
      __m256d gamma_lo = _mm256_setzero_pd(), gamma_hi = _mm256_setzero_pd();
      __m256d beta_lo = _mm256_setzero_pd(), beta_hi = _mm256_setzero_pd();
      for (i64 c = 0; c < chunks; ++c) {
        const double* pg = partial.data() + c * 2 * D + j;
        const double* pb = pg + D;
        gamma_lo = _mm256_add_pd(gamma_lo, load_pd(pg, D - j));
        gamma_hi = _mm256_add_pd(gamma_hi, load_pd(pg + 4, D - j - 4));
        beta_lo = _mm256_add_pd(beta_lo, load_pd(pb, D - j));
        beta_hi = _mm256_add_pd(beta_hi, load_pd(pb + 4, D - j - 4));
      }
      auto to_float = [](__m256d lo, __m256d hi) {
        return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
      };
      if (ggamma) store_first(ggamma + j, D - j, to_float(gamma_lo, gamma_hi));
      if (gbeta) store_first(gbeta + j, D - j, to_float(beta_lo, beta_hi));
    }
  });
}

}  // namespace wedge::kernels::cpu::avx2
