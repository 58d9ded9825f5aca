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
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu {
namespace {

using avx512::first_lanes;
using avx512::transpose_block;

constexpr int kMr = kTileRows;
constexpr int kNr = kTileCols;
constexpr int kSlotsPerBlock = 16;  // slots per 16 x 16 transpose: 32 values of k

__m512bh as_bf16_pairs(__m512 v) { return reinterpret_cast<__m512bh>(v); }

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
    const __m512bh b0 = as_bf16_pairs(_mm512_load_ps(bp));
    const __m512bh b1 = as_bf16_pairs(_mm512_load_ps(bp + 16));
#pragma GCC unroll 14
    for (int i = 0; i < kMr; ++i) {
      // The pair (A[i][2s], A[i][2s + 1]) in every lane: a bit-exact float broadcast.
      const __m512bh a = as_bf16_pairs(_mm512_set1_ps(ap[i]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], a, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], a, b1);
    }
    ap += kMr;
    bp += kNr;
  }
  store_tile(acc, c, ldc, m_valid, n_valid, alpha, beta);
}

// 16 slots from two fp32 vectors along k: slot j = (bf16(even[j]), bf16(odd[j])).
__m512 pair_up(__m512 even, __m512 odd) {
  // cvtne2ps gives the words even[0..15], odd[0..15]; interleave them word by word.
  const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                         6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_castsi512_ps(_mm512_permutexvar_epi16(order, words));
}

// 16 slots from 32 consecutive values of k (count <= 32 of them present, zeros after).
__m512 pairs_of_run(const float* src, int count) {
  const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(count), src);
  const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(count - 16), src + 16);
  return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Lines contiguous in k (rows of A, or columns of B^T): `lines` (<= 32) lines starting at
// src, line i at src + i * stride, k from 0 to kc. Writes a panel of `width` (14 or 32)
// slots per step of depth: panel[s * width + line]. Each 32-value run of each line becomes
// 16 slots in a small row-major block, which a 16 x 16 transpose turns k-major.
void pack_lines_contiguous(const float* src, i64 stride, int lines, i64 kc, int width, float* panel) {
  alignas(64) float block[32 * kSlotsPerBlock];
  for (i64 p = 0; p < kc; p += 2 * kSlotsPerBlock) {
    const int count = static_cast<int>(kc - p < 2 * kSlotsPerBlock ? kc - p : 2 * kSlotsPerBlock);
    const int slots = (count + 1) / 2;
    for (int i = 0; i < lines; ++i)
      _mm512_store_ps(block + i * kSlotsPerBlock, pairs_of_run(src + i * stride + p, count));
    float* out = panel + (p / 2) * width;
    for (int half = 0; half * 16 < width; ++half) {
      const int half_lines = lines - 16 * half;
      const __mmask16 store = first_lanes(width - 16 * half);
      transpose_block(block + half * 16 * kSlotsPerBlock, kSlotsPerBlock, half_lines < 0 ? 0 : half_lines, slots,
                      out + 16 * half, width, store);
    }
  }
}

// Lines across k (A^T's rows hold one k for every row of op(A); B's rows one k for every
// column): element (k = p, line j) at src[p * stride + j], `lines` lines present. Writes
// width-slot rows of the panel at depth s from the source rows 2s and 2s + 1.
void pack_lines_across(const float* src, i64 stride, i64 lines, i64 kc, int width, float* panel) {
  const i64 depth = (kc + 1) / 2;
  for (i64 s = 0; s < depth; ++s) {
    const float* even = src + 2 * s * stride;
    const bool has_odd = 2 * s + 1 < kc;
    float* out = panel + s * width;
    for (int half = 0; half * 16 < width; ++half) {
      const __mmask16 load = first_lanes(lines - 16 * half);
      const __m512 e = _mm512_maskz_loadu_ps(load, even + 16 * half);
      const __m512 o = has_odd ? _mm512_maskz_loadu_ps(load, even + stride + 16 * half) : _mm512_setzero_ps();
      _mm512_mask_storeu_ps(out + 16 * half, first_lanes(width - 16 * half), pair_up(e, o));
    }
  }
}

void pack_a_bf16(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 /*next_kc*/, float* out) {
  const i64 depth = (kc + 1) / 2;
  for (i64 q = 0; q * kMr < rows; ++q) {
    const i64 lines = rows - q * kMr < kMr ? rows - q * kMr : kMr;
    float* panel = out + q * kMr * depth;
    if (col_stride == 1)
      pack_lines_contiguous(a + q * kMr * row_stride, row_stride, static_cast<int>(lines), kc, kMr, panel);
    else
      pack_lines_across(a + q * kMr, col_stride, lines, kc, kMr, panel);
  }
}

void pack_b_bf16(const float* b, i64 row_stride, i64 col_stride, i64 kc, i64 /*next_kc*/, i64 cols, float* out) {
  const i64 depth = (kc + 1) / 2;
  for (i64 q = 0; q * kNr < cols; ++q) {
    const i64 lines = cols - q * kNr < kNr ? cols - q * kNr : kNr;
    float* panel = out + q * kNr * depth;
    if (row_stride == 1)
      pack_lines_contiguous(b + q * kNr * col_stride, col_stride, static_cast<int>(lines), kc, kNr, panel);
    else
      pack_lines_across(b + q * kNr, row_stride, lines, kc, kNr, panel);
  }
}

}  // namespace

const SgemmMicroKernel& bf16_avx512_microkernel() {
  static const SgemmMicroKernel kernel{"avx512-bf16 14x32", kMr,         kNr,        2,
                                       bf16_kernel_14x32,   pack_a_bf16, pack_b_bf16,
                                       sgemm_avx512_microkernel().epilogue};
  return kernel;
}

}  // namespace wedge::kernels::cpu
