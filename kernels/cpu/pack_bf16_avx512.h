// Packing fp32 operands into bf16 panels for the bf16 GEMM micro-kernels (AVX-512-BF16 and
// AMX): rounding to bf16 (vcvtne2ps2bf16: nearest even, subnormals flushed, exactly
// kernels/ref/bf16.h) while copying, and pairing along k: slot s of a line holds the values
// at k = 2s (low half) and 2s + 1 (high half), the VNNI pair layout. Include only from files
// compiled with -mavx512bf16 on top of the AVX-512 flags.
#pragma once

#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/tables.h"

namespace wedge::kernels::cpu::bf16 {

using avx512::first_lanes;
using avx512::transpose_block;

constexpr int kSlotsPerBlock = 16;  // slots per 16 x 16 transpose: 32 values of k

inline __m512bh as_pairs(__m512 v) { return reinterpret_cast<__m512bh>(v); }

// 16 slots from two fp32 vectors along k: slot j = (bf16(even[j]), bf16(odd[j])).
inline __m512 pair_up(__m512 even, __m512 odd) {
  // cvtne2ps gives the words even[0..15], odd[0..15]; interleave them word by word.
  const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(odd, even));
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                         6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_castsi512_ps(_mm512_permutexvar_epi16(order, words));
}

// 16 slots from 32 consecutive values of k (count <= 32 of them present, zeros after).
inline __m512 pairs_of_run(const float* src, int count) {
  const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(count), src);
  const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(count - 16), src + 16);
  return reinterpret_cast<__m512>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Lines contiguous in k (rows of A, or columns of B^T): `lines` (<= 32) lines starting at
// src, line i at src + i * stride, k from 0 to kc. Writes a panel of `width` (14 or 32)
// slots per step of depth: panel[s * width + line]. Each 32-value run of each line becomes
// 16 slots in a small row-major block, which a 16 x 16 transpose turns k-major.
inline void pack_lines_contiguous(const float* src, i64 stride, int lines, i64 kc, int width, float* panel) {
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
// column): element (k = p, line j) at src[p * stride + j], `lines` lines present, dealt to
// ceil(lines / width) panels `depth` slots apart. Row pair (2s, 2s + 1) of the source gives
// slot s of every panel, so each source row is read once, front to back. With `prefetch`
// the rows kRowsAhead further on are asked for piece by piece (gemm.h): for a block of
// A^T, whose rows are often a power of two apart, where read panel by panel its kc short
// pieces collide in the caches' sets.
inline void pack_lines_across(const float* src, i64 stride, i64 lines, i64 kc, int width, i64 depth, float* out,
                              bool prefetch) {
  const i64 slots = (kc + 1) / 2, panels = (lines + width - 1) / width;
  for (i64 s = 0; s < slots; ++s) {
    const float* even = src + 2 * s * stride;
    const bool has_odd = 2 * s + 1 < kc;
    const float* ahead = prefetch ? rows_ahead(even, stride, lines, 2 * s + 1, kc) : nullptr;
    for (i64 q = 0; q < panels; ++q) {
      if (ahead != nullptr) {
        prefetch_piece(ahead, q * width, width, lines, q + 1 == panels);
        prefetch_piece(ahead + stride, q * width, width, lines, q + 1 == panels);
      }
      float* row = out + q * width * depth + s * width;
      for (int half = 0; half * 16 < width; ++half) {
        const i64 at = q * width + 16 * half;
        const __mmask16 load = first_lanes(lines - at) & first_lanes(width - 16 * half);
        const __m512 e = _mm512_maskz_loadu_ps(load, even + at);
        const __m512 o = has_odd ? _mm512_maskz_loadu_ps(load, even + stride + at) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(row + 16 * half, first_lanes(width - 16 * half), pair_up(e, o));
      }
    }
  }
}

// Zero slots [from, depth) of a k-major panel `width` slots wide (a panel deeper than its
// data: the AMX kernel multiplies whole tiles of 16 slots).
inline void zero_tail(float* panel, int width, i64 from, i64 depth) {
  if (depth > from)
    std::memset(panel + from * width, 0, static_cast<std::size_t>((depth - from) * width) * sizeof(float));
}

// Lines [0, lines) of an operand into panels of `width` lines, k-major (panel[s * width +
// line]), `depth` slots deep (>= ceil(kc / 2); slots past the data are zero). Element
// (line, p) is src[line * line_stride + p * k_stride]; one stride is 1. For op(A) the lines
// are its rows (line_stride = row_stride, k_stride = col_stride), for op(B) its columns.
// rows_once (A blocks): lines across k are packed all panels at once, prefetching.
inline void pack_k_major(const float* src, i64 line_stride, i64 k_stride, i64 lines, i64 kc, int width, i64 depth,
                         float* out, bool rows_once = false) {
  if (rows_once && k_stride != 1) pack_lines_across(src, k_stride, lines, kc, width, depth, out, true);
  for (i64 q = 0; q * width < lines; ++q) {
    const i64 here = lines - q * width < width ? lines - q * width : width;
    float* panel = out + q * width * depth;
    if (k_stride == 1)
      pack_lines_contiguous(src + q * width * line_stride, line_stride, static_cast<int>(here), kc, width, panel);
    else if (!rows_once)
      pack_lines_across(src + q * width * line_stride, k_stride, here, kc, width, depth, panel, false);
    zero_tail(panel, width, (kc + 1) / 2, depth);
  }
}

}  // namespace wedge::kernels::cpu::bf16
