// The vector layer simd.h at 16 lanes (AVX-512), for the kernels written for that one
// instruction set (the GEMM's packers and micro-kernels, attention, GEMV), plus the block
// transposes of the packers. Include only from files compiled with -mavx512f.
#pragma once

#ifndef WEDGE_SIMD_LANES
#define WEDGE_SIMD_LANES 16
#endif
#if WEDGE_SIMD_LANES != 16
#error "kernels/cpu/simd_avx512.h in a file compiled for another vector width"
#endif
#include "kernels/cpu/simd.h"

namespace wedge::kernels::cpu::avx512 {

// 4 floats of line `line` (zero when the block has fewer lines).
template <int kLines>
[[gnu::always_inline]] inline __m128 quad_of_line(const float* src, i64 stride, int line, int c) {
  return line < kLines ? _mm_loadu_ps(src + line * stride + 4 * c) : _mm_setzero_ps();
}

// Transposes a full-width block: 16 contiguous floats from each of kLines (<= 16) lines
// (line i at src + i * stride; missing lines read as zero), storing output row q as
// dst + q * dst_stride under store_mask. The first stage of the textbook 16x16 transpose
// is done by the loads themselves: 128-bit pieces of four lines are inserted straight
// into the four lanes of a vector, which costs load-port and port-0 slots instead of
// shuffle-port slots. Then a 4x4 transpose within each lane finishes the job:
//   t[4c + g], lane L = line g + 4L, columns 4c..4c+3
//   after the in-lane 4x4 transpose of t[4c + 0..3], vector 4c + j holds column 4c + j
//   of lines 0..15 in order.
template <int kLines>
[[gnu::always_inline]] inline void transpose_block_full(const float* src, i64 stride, float* dst,
                                                        i64 dst_stride, __mmask16 store_mask) {
  __m512 t[16];
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      __m512 v = _mm512_castps128_ps512(quad_of_line<kLines>(src, stride, g, c));
      v = _mm512_insertf32x4(v, quad_of_line<kLines>(src, stride, g + 4, c), 1);
      v = _mm512_insertf32x4(v, quad_of_line<kLines>(src, stride, g + 8, c), 2);
      v = _mm512_insertf32x4(v, quad_of_line<kLines>(src, stride, g + 12, c), 3);
      t[4 * c + g] = v;
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 a0 = _mm512_unpacklo_ps(t[4 * c], t[4 * c + 1]);      // l0c0 l1c0 l0c1 l1c1
    const __m512 a1 = _mm512_unpackhi_ps(t[4 * c], t[4 * c + 1]);      // l0c2 l1c2 l0c3 l1c3
    const __m512 a2 = _mm512_unpacklo_ps(t[4 * c + 2], t[4 * c + 3]);  // l2c0 l3c0 l2c1 l3c1
    const __m512 a3 = _mm512_unpackhi_ps(t[4 * c + 2], t[4 * c + 3]);
    _mm512_mask_storeu_ps(dst + (4 * c + 0) * dst_stride, store_mask,
                          _mm512_shuffle_ps(a0, a2, 0x44));
    _mm512_mask_storeu_ps(dst + (4 * c + 1) * dst_stride, store_mask,
                          _mm512_shuffle_ps(a0, a2, 0xEE));
    _mm512_mask_storeu_ps(dst + (4 * c + 2) * dst_stride, store_mask,
                          _mm512_shuffle_ps(a1, a3, 0x44));
    _mm512_mask_storeu_ps(dst + (4 * c + 3) * dst_stride, store_mask,
                          _mm512_shuffle_ps(a1, a3, 0xEE));
  }
}

// Loads up to 16 lines of up to 16 contiguous floats (line i at src + i * stride), zero
// beyond `lines` x `count`, transposes, and stores output row q (q < count) as 16 floats
// under store_mask at dst + q * dst_stride.
inline void transpose_block(const float* src, i64 stride, int lines, int count, float* dst,
                            i64 dst_stride, __mmask16 store_mask) {
  if (count == 16) {
    // The common full blocks, with the line count known at compile time so the whole
    // transpose unrolls into registers.
    if (lines == 16) return transpose_block_full<16>(src, stride, dst, dst_stride, store_mask);
    if (lines == 14) return transpose_block_full<14>(src, stride, dst, dst_stride, store_mask);
  }
  __m512 r[16];
  const __mmask16 load_mask = first_lanes(count);
  for (int i = 0; i < 16; ++i) {
    r[i] = i < lines ? _mm512_maskz_loadu_ps(load_mask, src + i * stride) : _mm512_setzero_ps();
  }
  transpose_square(r);
  for (int q = 0; q < count; ++q) _mm512_mask_storeu_ps(dst + q * dst_stride, store_mask, r[q]);
}

}  // namespace wedge::kernels::cpu::avx512
