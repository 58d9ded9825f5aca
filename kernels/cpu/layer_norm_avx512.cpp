// Layer normalisation forward and backward, AVX-512, threaded over rows. Same math as
// kernels/ref/layer_norm.cpp (two-pass mean and variance, biased variance).
//
// Backward has two parts with different parallel shapes: gx is per row (threads split the
// rows), while ggamma and gbeta are sums over rows per column (threads split the columns,
// and each column is summed over rows in row order, in double). No thread ever combines
// partial sums, so results do not depend on the thread count.
#include <cmath>

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
  // gx_d = rstd (g_d - mean(g) - xhat_d mean(g xhat)),  g = gy * gamma.
  parallel_for(0, rows, row_grain(D), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
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
      for (i64 j = 0; j < D; j += 16) {
        const __mmask16 mask = first_lanes(D - j);
        const __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(load(xr, j, D), vmu), vrstd);
        __m512 g = load(gyr, j, D);
        if (gamma) g = _mm512_mul_ps(g, load(gamma, j, D));
        const __m512 inner = _mm512_fnmadd_ps(xhat, mean_gx, _mm512_sub_ps(g, mean_g));
        _mm512_mask_storeu_ps(gxr + j, mask, _mm512_mul_ps(vrstd, inner));
      }
    }
  });
  if (!ggamma && !gbeta) return;

  // Column sums: each thread owns whole 16-column groups and walks all rows in order.
  constexpr i64 kGroups = 4;  // 64 columns per sweep over the rows: 16 double accumulators
  const i64 groups = (D + 15) / 16;
  parallel_for(0, groups, kGroups, [&](i64 g0, i64 g1) {
    for (i64 g = g0; g < g1; g += kGroups) {
      const i64 count = g1 - g < kGroups ? g1 - g : kGroups;
      __m512d acc_gx[kGroups][2], acc_g[kGroups][2];
      for (i64 c = 0; c < kGroups; ++c) {
        acc_gx[c][0] = acc_gx[c][1] = acc_g[c][0] = acc_g[c][1] = _mm512_setzero_pd();
      }
      for (i64 r = 0; r < rows; ++r) {
        const __m512d mu = _mm512_set1_pd(mean[r]), rs = _mm512_set1_pd(rstd[r]);
        for (i64 c = 0; c < count; ++c) {
          const i64 j = (g + c) * 16;
          const __m512 xv = load(x + r * D, j, D), gv = load(gy + r * D, j, D);
          for (int half = 0; half < 2; ++half) {
            const __m256 xh =
                half ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xv), 1))
                     : _mm512_castps512_ps256(xv);
            const __m256 gh =
                half ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(gv), 1))
                     : _mm512_castps512_ps256(gv);
            const __m512d gd = _mm512_cvtps_pd(gh);
            const __m512d xhat = _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtps_pd(xh), mu), rs);
            acc_gx[c][half] = _mm512_fmadd_pd(gd, xhat, acc_gx[c][half]);
            acc_g[c][half] = _mm512_add_pd(acc_g[c][half], gd);
          }
        }
      }
      for (i64 c = 0; c < count; ++c) {
        const i64 j = (g + c) * 16;
        const __mmask16 mask = first_lanes(D - j);
        const __m512 sgx = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(acc_gx[c][0])),
                                              _mm512_cvtpd_ps(acc_gx[c][1]), 1);
        const __m512 sg = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(acc_g[c][0])),
                                             _mm512_cvtpd_ps(acc_g[c][1]), 1);
        if (ggamma) _mm512_mask_storeu_ps(ggamma + j, mask, sgx);
        if (gbeta) _mm512_mask_storeu_ps(gbeta + j, mask, sg);
      }
    }
  });
}

}  // namespace wedge::kernels::cpu::avx512
