// The AVX2 + FMA single-precision GEMM micro-kernel and packers, for x86-64 CPUs without
// AVX-512 (compiled with -mavx2 -mfma; only called after a run-time CPU check).
//
// Register tile: 6 rows x 16 columns of C = 12 ymm accumulators, 2 registers for the B
// row and 1 for the broadcast A element: 15 of the 16 ymm registers. 12 FMAs per 8 loads
// per step of k.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 16;

using avx2::first_lanes_i;

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
  const __m256i mask0 = first_lanes_i(n_valid);
  const __m256i mask1 = first_lanes_i(n_valid - 8);
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

// A panels: rows [0, rows) of op(A), 6 per panel, k-major (panel[p * 6 + r]). Rows
// contiguous in k: 8 values of k of the panel's rows are loaded per row and transposed in
// registers, then written as 8 consecutive 6-float slots (each full store spills 2 floats
// into the next slot, which the next store overwrites; the last store is masked). Rows
// across k (A transposed): source row p holds k = p of every panel, 6 consecutive floats
// each; it is read once, front to back, for all the panels, with the row kRowsAhead on
// prefetched (gemm.h).
void pack_a_6(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 /*next_kc*/,
              float* out) {
  const i64 panels = (rows + kMr - 1) / kMr;
  if (col_stride == 1) {
    const __m256i six = first_lanes_i(kMr);
    for (i64 q = 0; q < panels; ++q) {
      float* panel = out + q * kMr * kc;
      const i64 lines = rows - q * kMr < kMr ? rows - q * kMr : kMr;
      const float* src = a + q * kMr * row_stride;
      i64 p = 0;
      for (; p + 8 <= kc; p += 8) {
        __m256 x[8];
        for (int r = 0; r < 8; ++r) x[r] = r < lines ? _mm256_loadu_ps(src + r * row_stride + p) : _mm256_setzero_ps();
        avx2::transpose_square(x);
        float* slot = panel + p * kMr;
        for (int j = 0; j < 7; ++j) _mm256_storeu_ps(slot + j * kMr, x[j]);
        _mm256_maskstore_ps(slot + 7 * kMr, six, x[7]);
      }
      for (; p < kc; ++p)
        for (int r = 0; r < kMr; ++r) panel[p * kMr + r] = r < lines ? src[r * row_stride + p] : 0.0f;
    }
  } else {
    // op(A) = A^T: row p of the source holds one k of every panel; read it once, front to
    // back (masked loads read zeros past the last row).
    const __m256i six = first_lanes_i(kMr);
    for (i64 p = 0; p < kc; ++p) {
      const float* src = a + p * col_stride;
      const float* ahead = rows_ahead(src, col_stride, rows, p, kc);
      for (i64 q = 0; q < panels; ++q) {
        if (ahead != nullptr) prefetch_piece(ahead, q * kMr, kMr, rows, q + 1 == panels);
        _mm256_maskstore_ps(out + q * kMr * kc + p * kMr, six,
                            _mm256_maskload_ps(src + q * kMr, first_lanes_i(std::min<i64>(kMr, rows - q * kMr))));
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

// The GEMM epilogue on one finished tile (gemm.h): bias, and under GELU the pre-activation
// kept in aux; the same evaluation of GELU as the AVX-512 epilogue. The two halves of a row
// are written out one after the other rather than as a loop over an array of two bias
// vectors: that loop is the shape GCC 12 miscompiles under both sanitizers (kernels/README.md,
// "Compiler notes").
void epilogue_6x16(float* c, i64 ldc, int m_valid, int n_valid, const float* bias, Activation act, float* aux) {
  const __m256i mask0 = first_lanes_i(n_valid), mask1 = first_lanes_i(n_valid - 8);
  const __m256 b0 = bias == nullptr ? _mm256_setzero_ps() : _mm256_maskload_ps(bias, mask0);
  const __m256 b1 = bias == nullptr ? _mm256_setzero_ps() : _mm256_maskload_ps(bias + 8, mask1);
  const bool gelu = act == Activation::Gelu;
  auto half = [&](float* at, float* keep, __m256i mask, __m256 b) {
    __m256 h = _mm256_add_ps(_mm256_maskload_ps(at, mask), b);
    if (gelu) {
      _mm256_maskstore_ps(keep, mask, h);
      h = avx2::gelu(h);
    }
    _mm256_maskstore_ps(at, mask, h);
  };
  for (int i = 0; i < m_valid; ++i) {
    float* row = c + i * ldc;
    float* keep = gelu ? aux + i * ldc : nullptr;
    half(row, keep, mask0, b0);
    if (n_valid > 8) half(row + 8, gelu ? keep + 8 : nullptr, mask1, b1);
  }
}

}  // namespace

const SgemmMicroKernel& sgemm_avx2_microkernel() {
  static const SgemmMicroKernel kernel{"avx2 6x16",       kMr,      kNr,      1,        1,
                                       sgemm_kernel_6x16, pack_a_6, pack_b_16,
                                       epilogue_6x16};
  return kernel;
}

}  // namespace wedge::kernels::cpu
