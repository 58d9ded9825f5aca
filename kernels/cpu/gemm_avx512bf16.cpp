// The bf16 GEMM micro-kernel for AVX-512-BF16 (vdpbf16ps) and its packers, for
// Precision::BF16 (engine/kernel_table.h): compiled with -mavx512bf16 on top of the AVX-512
// flags, called only after a run-time CPU check.
//
// The operands arrive as fp32. The packers round them to bf16 (vcvtne2ps2bf16: nearest
// even, denormals flushed, exactly kernels/ref/bf16.h) while they copy them into panels,
// so rounding costs one pass over data the fp32 GEMM copies anyway, and pair them along k:
// slot s of a panel row holds the values at k = 2s (low half) and 2s + 1 (high half).
// vdpbf16ps multiplies 16 such pairs by 16 pairs and adds both products to 16 fp32
// accumulators: 32 multiply-adds per instruction, twice an fp32 FMA's, at the same
// instruction rate on cores that run it on both FMA ports.
//
// The register tile is the fp32 kernel's, 14 rows x 32 columns (gemm_tile_avx512.h): per
// slot, two B vectors (32 columns x 2 k) and, per row, one broadcast A pair into two
// vdpbf16ps. Products of bf16 values are exact in fp32, so the only rounding besides the
// operands' is that of the fp32 additions.
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_tile_avx512.h"
#include "kernels/cpu/pack_bf16_avx512.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu {
namespace {

constexpr int kMr = kTileRows;
constexpr int kNr = kTileCols;

void bf16_kernel_14x32(i64 depth, const float* __restrict ap, const float* __restrict bp, float* c, i64 ldc,
                       int m_valid, int n_valid, float alpha, float beta) {
  __m512 acc[kMr][kTileVectors];
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
    acc[i][0] = _mm512_setzero_ps();
    acc[i][1] = _mm512_setzero_ps();
  }
#pragma GCC unroll 14
  for (int i = 0; i < kMr; ++i) {
    if (i < m_valid) {
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + kNr - 1), _MM_HINT_T0);
    }
  }
  for (i64 s = 0; s < depth; ++s) {
    const __m512bh b0 = bf16::as_pairs(_mm512_load_ps(bp));
    const __m512bh b1 = bf16::as_pairs(_mm512_load_ps(bp + 16));
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      // The pair (A[i][2s], A[i][2s + 1]) in every lane: a bit-exact float broadcast.
      const __m512bh a = bf16::as_pairs(_mm512_set1_ps(ap[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
    }
    ap += kMr;
    bp += kNr;
  }
  store_tile(acc, c, ldc, m_valid, n_valid, alpha, beta);
}

void pack_a_bf16(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 /*next_kc*/, float* out) {
  bf16::pack_k_major(a, row_stride, col_stride, rows, kc, kMr, (kc + 1) / 2, out, /*rows_once=*/true);
}

void pack_b_bf16(const float* b, i64 row_stride, i64 col_stride, i64 kc, i64 /*next_kc*/, i64 cols, float* out) {
  bf16::pack_k_major(b, col_stride, row_stride, cols, kc, kNr, (kc + 1) / 2, out);
}

}  // namespace

const SgemmMicroKernel& bf16_avx512_microkernel() {
  static const SgemmMicroKernel kernel{"avx512-bf16 14x32", kMr,         kNr,         2, 1,
                                       bf16_kernel_14x32,   pack_a_bf16, pack_b_bf16, sgemm_avx512_microkernel().epilogue};
  return kernel;
}

}  // namespace wedge::kernels::cpu
