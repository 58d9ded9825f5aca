// The 14 x 32 register tile shared by the AVX-512 GEMM micro-kernels (fp32 FMA and bf16
// vdpbf16ps): its size, and how a finished tile of accumulators reaches C. Include only
// from files compiled with -mavx512f.
#pragma once

#include "kernels/cpu/simd_avx512.h"
#include "kernels/tables.h"

namespace wedge::kernels::cpu {

constexpr int kTileRows = 14;
constexpr int kTileVectors = 2;  // zmm vectors per row of the tile
constexpr int kTileCols = 16 * kTileVectors;

// C = alpha * acc + beta * C on the valid m_valid x n_valid corner of the tile (C is not
// read when beta == 0: it may hold NaNs). alpha * acc is rounded before C is added, in every
// row: left to itself, GCC fuses the multiply into the add (beta == 1, every k slice after
// the first) in some rows of the unrolled loop and not in others, so a row's bits depended
// on its place in the tile, and differed from the AVX2 kernel's and the small-m kernel's
// (gemv_impl.h), which round it too. The empty asm keeps the product as it is.
[[gnu::always_inline]] inline void store_tile(const __m512 (&acc)[kTileRows][kTileVectors], float* c, i64 ldc,
                                              int m_valid, int n_valid, float alpha, float beta) {
  const __mmask16 mask0 = avx512::first_lanes(n_valid);
  const __mmask16 mask1 = avx512::first_lanes(n_valid - 16);
  const __m512 valpha = _mm512_set1_ps(alpha);
  const __m512 vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 14
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= m_valid) break;
    float* row = c + i * ldc;
    __m512 r0 = _mm512_mul_ps(acc[i][0], valpha);
    __m512 r1 = _mm512_mul_ps(acc[i][1], valpha);
    asm("" : "+v"(r0), "+v"(r1));
    if (beta == 1.0f) {
      r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(mask0, row));
      r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(mask1, row + 16));
    } else if (beta != 0.0f) {
      r0 = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mask0, row), r0);
      r1 = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mask1, row + 16), r1);
    }
    _mm512_mask_storeu_ps(row, mask0, r0);
    _mm512_mask_storeu_ps(row + 16, mask1, r1);
  }
}

}  // namespace wedge::kernels::cpu
