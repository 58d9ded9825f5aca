// The AVX2 + FMA single-precision GEMM micro-kernel and packers, for x86-64 CPUs without
// AVX-512 (compiled with -mavx2 -mfma; only called after a run-time CPU check).
//
// Register tile: 6 rows x 16 columns of C = 12 ymm accumulators, 2 registers for the B
// row and 1 for the broadcast A element: 15 of the 16 ymm registers. 12 FMAs per 8 loads
// per step of k.
#include <immintrin.h>

#include "kernels/cpu/gemm.h"

namespace wedge::kernels::cpu {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 16;

// Lane masks for AVX2 masked loads/stores: lanes [0, count) enabled.
inline __m256i first_lanes(int count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
}

void sgemm_kernel_6x16(i64 kc, const float* __restrict ap, const float* __restrict bp, float* c,
                       i64 ldc, int m_valid, int n_valid, float alpha, float beta) {
  __m256 acc[kMr][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  // course 14 begin: the GEMM micro-kernel: a register tile of C, one broadcast FMA per row and vector per step of k (AVX-512 14 x 32; AVX2 6 x 16 on CPUs without AVX-512)
  for (i64 p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_load_ps(bp);
    const __m256 b1 = _mm256_load_ps(bp + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m256 a = _mm256_broadcast_ss(ap + i);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
    }
    ap += kMr;
    bp += kNr;
  }
  // course 14 end
  const __m256i mask0 = first_lanes(n_valid);
  const __m256i mask1 = first_lanes(n_valid - 8);
  const __m256 valpha = _mm256_set1_ps(alpha);
  const __m256 vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    if (i >= m_valid) break;
    float* row = c + i * ldc;
    __m256 r0 = _mm256_mul_ps(acc[i][0], valpha);
    __m256 r1 = _mm256_mul_ps(acc[i][1], valpha);
    if (beta != 0.0f) {  // beta == 0: C may hold NaNs and is never read
      r0 = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(row, mask0), r0);
      r1 = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(row + 8, mask1), r1);
    }
    _mm256_maskstore_ps(row, mask0, r0);
    _mm256_maskstore_ps(row + 8, mask1, r1);
  }
}

// Packing is plain loops: on AVX2 machines it is a small share of the time. Each loop
// walks the source along its contiguous direction.
void pack_a_6(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 /*next_kc*/,
              float* out) {
  const i64 panels = (rows + kMr - 1) / kMr;
  if (col_stride == 1) {
    for (i64 q = 0; q < panels; ++q) {
      float* panel = out + q * kMr * kc;
      for (int r = 0; r < kMr; ++r) {
        const i64 row = q * kMr + r;
        for (i64 p = 0; p < kc; ++p)
          panel[p * kMr + r] = row < rows ? a[row * row_stride + p] : 0.0f;
      }
    }
  } else {
    for (i64 p = 0; p < kc; ++p) {
      for (i64 row = 0; row < panels * kMr; ++row) {
        out[(row / kMr) * kMr * kc + p * kMr + row % kMr] =
            row < rows ? a[row + p * col_stride] : 0.0f;
      }
    }
  }
}

void pack_b_16(const float* b, i64 row_stride, i64 col_stride, i64 kc, i64 /*next_kc*/, i64 cols,
               float* out) {
  const i64 panels = (cols + kNr - 1) / kNr;
  for (i64 q = 0; q < panels; ++q) {
    float* panel = out + q * kNr * kc;
    const i64 c0 = q * kNr;
    if (col_stride == 1 && c0 + kNr <= cols) {
      for (i64 p = 0; p < kc; ++p) {
        const float* src = b + p * row_stride + c0;
        _mm256_store_ps(panel + p * kNr, _mm256_loadu_ps(src));
        _mm256_store_ps(panel + p * kNr + 8, _mm256_loadu_ps(src + 8));
      }
      continue;
    }
    for (i64 p = 0; p < kc; ++p) {
      for (int c = 0; c < kNr; ++c) {
        panel[p * kNr + c] = c0 + c < cols ? b[p * row_stride + (c0 + c) * col_stride] : 0.0f;
      }
    }
  }
}

}  // namespace

const SgemmMicroKernel& sgemm_avx2_microkernel() {
  static const SgemmMicroKernel kernel{"avx2 6x16",       kMr,      kNr,      1,        1,
                                       sgemm_kernel_6x16, pack_a_6, pack_b_16,
                                       tile_epilogue_scalar};
  return kernel;
}

}  // namespace wedge::kernels::cpu
