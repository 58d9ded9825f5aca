// AVX-512 helpers shared by the *_avx512.cpp kernels: lane masks, horizontal sums, and a
// vector exp accurate to about 2 ulp. Include only from files compiled with -mavx512f.
#pragma once

// GCC 12 warns, wrongly, that some intrinsics read an uninitialised value (their unused
// merge source is _mm512_undefined_ps()).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <initializer_list>

namespace wedge::kernels::cpu::avx512 {

using i64 = std::int64_t;

// Lanes [0, count) of a 16-lane vector (count clamped to [0, 16]).
inline __mmask16 first_lanes(i64 count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Horizontal sum in a fixed order (so identical inputs always give identical sums).
inline float hsum(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s = _mm256_add_ps(lo, hi);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

inline float hmax(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s = _mm256_max_ps(lo, hi);
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// In-register transpose of a 16x16 block: r[i] holds row i on entry, column i on exit.
inline void transpose_16x16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // interleave row pairs within each 128-bit lane
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // 4x4 transposes within each lane, per group of 4 rows
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  // u[4g + j], lane L holds rows 4g..4g+3 of column 4L + j; gather the four groups' lane L.
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

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
  transpose_16x16(r);
  for (int q = 0; q < count; ++q) _mm512_mask_storeu_ps(dst + q * dst_stride, store_mask, r[q]);
}

// e^x for 16 floats. x = n ln2 + r with n an integer and |r| <= ln2/2; e^r by its
// degree-7 Taylor polynomial (truncation error < 1e-8 relative), then scaled by 2^n with
// vscalefps, which also gives +inf above ~88.7 and 0 (through the denormals) below ~-103.
// -inf gives exactly 0 (inputs are clamped at -110, whose result underflows to 0) and NaN
// stays NaN.
inline __m512 exp_ps(__m512 x) {
  // max/min return their second operand when either is NaN: x second keeps NaN.
  x = _mm512_max_ps(_mm512_set1_ps(-110.0f), x);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 split in two so n * ln2_hi is exact for |n| < 2^8.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// GELU is the exact one, x Phi(x) = x erfc(-x / sqrt 2) / 2, with erfc from the
// Chebyshev fit in Numerical Recipes (fractional error below 1.2e-7 for every argument,
// including the far tail, where 1 - erf(x) would cancel):
//   erfc(z) = t exp(-z^2 - 1.26551223 + t (1.00002368 + t (0.37409196 + ... ))),
//   t = 1 / (1 + z / 2),   z >= 0;   erfc(-z) = 2 - erfc(z).
// erfc(z) for z >= 0.
inline __m512 erfc_nonnegative(__m512 z) {
  const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.5f), z, _mm512_set1_ps(1.0f)));
  static constexpr float c[] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f,
                                0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                                1.00002368f, -1.26551223f};
  __m512 poly = _mm512_set1_ps(c[0]);
  for (int i = 1; i < 10; ++i) poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(c[i]));
  // exponent = -z^2 + poly
  const __m512 exponent = _mm512_fnmadd_ps(z, z, poly);
  return _mm512_mul_ps(t, exp_ps(exponent));
}

// erfc for any sign.
inline __m512 erfc_ps(__m512 z) {
  const __m512 az = _mm512_abs_ps(z);
  const __m512 e = erfc_nonnegative(az);
  const __mmask16 negative = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_sub_ps(e, negative, _mm512_set1_ps(2.0f), e);
}

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// Phi(x) = erfc(-x / sqrt 2) / 2
inline __m512 normal_cdf_ps(__m512 x) {
  return _mm512_mul_ps(_mm512_set1_ps(0.5f), erfc_ps(_mm512_mul_ps(x, _mm512_set1_ps(-kInvSqrt2))));
}

// GELU, exact: x Phi(x).
inline __m512 gelu_ps(__m512 x) { return _mm512_mul_ps(x, normal_cdf_ps(x)); }

// GELU's derivative: Phi(x) + x phi(x).
inline __m512 gelu_derivative_ps(__m512 x) {
  const __m512 pdf = _mm512_mul_ps(_mm512_set1_ps(kInvSqrt2Pi),
                                   exp_ps(_mm512_mul_ps(_mm512_set1_ps(-0.5f), _mm512_mul_ps(x, x))));
  return _mm512_fmadd_ps(x, pdf, normal_cdf_ps(x));
}

// sigmoid without overflow: e = exp(-|x|); x >= 0: 1 / (1 + e), x < 0: e / (1 + e).
inline __m512 sigmoid_ps(__m512 x) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  return _mm512_mask_mul_ps(inv, negative, inv, e);
}

// SiLU, x sigmoid(x), and its derivative s (1 + x (1 - s)).
inline __m512 silu_ps(__m512 x) { return _mm512_mul_ps(x, sigmoid_ps(x)); }
inline __m512 silu_derivative_ps(__m512 x) {
  const __m512 s = sigmoid_ps(x), one = _mm512_set1_ps(1.0f);
  return _mm512_mul_ps(s, _mm512_fmadd_ps(x, _mm512_sub_ps(one, s), one));
}

// softplus(x) = max(x, 0) + log1p(u), u = e^-|x| in (0, 1]. log1p(u) = 2 atanh(t) with
// t = u / (2 + u) in (0, 1/3], formed from u directly (no 1 + u that would drop u's low
// bits): 2 (t + t^3/3 + ... + t^13/13), whose truncation error is below 1e-8 on that range.
inline __m512 softplus_ps(__m512 x) {
  const __m512 u = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  const __m512 t = _mm512_div_ps(u, _mm512_add_ps(_mm512_set1_ps(2.0f), u));
  const __m512 t2 = _mm512_mul_ps(t, t);
  __m512 series = _mm512_set1_ps(1.0f / 13);
  for (const float c : {1.0f / 11, 1.0f / 9, 1.0f / 7, 1.0f / 5, 1.0f / 3, 1.0f})
    series = _mm512_fmadd_ps(series, t2, _mm512_set1_ps(c));
  const __m512 log1p_u = _mm512_mul_ps(_mm512_add_ps(t, t), series);
  return _mm512_add_ps(_mm512_max_ps(x, _mm512_setzero_ps()), log1p_u);
}

}  // namespace wedge::kernels::cpu::avx512
