// The vector helpers the AVX2 kernels share: e^x, erfc, GELU, sigmoid, SiLU and softplus on
// 8 floats (evaluated as in simd_avx512.h), masks for the tails of rows, an 8 x 8 transpose,
// horizontal reductions.
// Include only from *_avx2.cpp files (compiled with -mavx2 -mfma).
#pragma once

#include <immintrin.h>

namespace wedge::kernels::cpu::avx2 {

// e^x for 8 floats, the same evaluation as avx512::exp_ps (simd_avx512.h): x = n ln2 + r
// with n an integer and |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (truncation
// error < 1e-8 relative). AVX2 has no vscalefps, so 2^n is applied as 2^(n/2) 2^(n - n/2),
// two factors that are normal floats for every n the clamp allows: +inf above ~88.7,
// 0 (through the denormals) below ~-103, exactly 0 for -inf (clamped at -110); NaN stays NaN.
inline __m256 exp8(__m256 x) {
  // max/min return their second operand when either is NaN: x second keeps NaN.
  x = _mm256_max_ps(_mm256_set1_ps(-110.0f), x);
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln 2 split in two so n * ln2_hi is exact for |n| < 2^8.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [-159, 128]: halves in [-80, 64], each 2^half a normal float built from its bits.
  const __m256i whole = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(whole, 1);
  const __m256i rest = _mm256_sub_epi32(whole, half);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 scale1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 scale2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, scale1), scale2);
}

// The lane mask of the first n of 8 lanes (all for n >= 8, none for n <= 0), for maskload
// and maskstore, which neither read nor write the other lanes' memory.
inline __m256i first_lanes8(long long n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int count = n <= 0 ? 0 : n >= 8 ? 8 : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
}
// The first n floats at p, zeros in the other lanes; and the store of those lanes only.
// A whole vector (n >= 8) takes the plain load and store: masked moves are slow on some CPUs.
inline __m256 load_first(const float* p, long long n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_lanes8(n));
}
inline void store_first(float* p, long long n, __m256 v) {
  if (n >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, first_lanes8(n), v);
}

inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

// r[j] = (x[0][j], ..., x[7][j]): an 8 x 8 transpose in registers.
inline void transpose8x8(__m256 x[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    x[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// erfc, GELU and GELU's derivative: the same evaluation as simd_avx512.h (exact GELU
// x Phi(x), erfc from the Numerical Recipes Chebyshev fit, fractional error below 1.2e-7).
inline __m256 erfc_nonnegative8(__m256 z) {
  const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, _mm256_set1_ps(1.0f)));
  static constexpr float c[] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};
  __m256 poly = _mm256_set1_ps(c[0]);
  for (int i = 1; i < 10; ++i) poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(c[i]));
  return _mm256_mul_ps(t, exp8(_mm256_fnmadd_ps(z, z, poly)));  // t exp(-z^2 + poly)
}
inline __m256 erfc8(__m256 z) {
  const __m256 az = abs8(z);
  const __m256 e = erfc_nonnegative8(az);
  const __m256 negative = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(e, _mm256_sub_ps(_mm256_set1_ps(2.0f), e), negative);
}
// Phi(x) = erfc(-x / sqrt 2) / 2
inline __m256 normal_cdf8(__m256 x) {
  return _mm256_mul_ps(_mm256_set1_ps(0.5f), erfc8(_mm256_mul_ps(x, _mm256_set1_ps(-0.70710678118654752440f))));
}
inline __m256 gelu8(__m256 x) { return _mm256_mul_ps(x, normal_cdf8(x)); }
// Phi(x) + x phi(x)
inline __m256 gelu_derivative8(__m256 x) {
  const __m256 pdf = _mm256_mul_ps(_mm256_set1_ps(0.39894228040143267794f),
                                   exp8(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(x, x))));
  return _mm256_fmadd_ps(x, pdf, normal_cdf8(x));
}

// sigmoid without overflow: e = exp(-|x|); x >= 0: 1 / (1 + e), x < 0: e / (1 + e).
inline __m256 sigmoid8(__m256 x) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), abs8(x)));
  const __m256 inv = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  return _mm256_blendv_ps(inv, _mm256_mul_ps(inv, e), negative);
}

// SiLU, x sigmoid(x), and its derivative s (1 + x (1 - s)).
inline __m256 silu8(__m256 x) { return _mm256_mul_ps(x, sigmoid8(x)); }
inline __m256 silu_derivative8(__m256 x) {
  const __m256 s = sigmoid8(x), one = _mm256_set1_ps(1.0f);
  return _mm256_mul_ps(s, _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one));
}

// softplus(x) = max(x, 0) + log1p(u), u = e^-|x| in (0, 1]; log1p(u) = 2 atanh(t) with
// t = u / (2 + u), formed from u directly (no 1 + u that would drop u's low bits), by the
// series 2 (t + t^3/3 + ... + t^13/13), as softplus_ps.
inline __m256 softplus8(__m256 x) {
  const __m256 u = exp8(_mm256_sub_ps(_mm256_setzero_ps(), abs8(x)));
  const __m256 t = _mm256_div_ps(u, _mm256_add_ps(_mm256_set1_ps(2.0f), u));
  const __m256 t2 = _mm256_mul_ps(t, t);
  __m256 series = _mm256_set1_ps(1.0f / 13);
  for (const float c : {1.0f / 11, 1.0f / 9, 1.0f / 7, 1.0f / 5, 1.0f / 3, 1.0f})
    series = _mm256_fmadd_ps(series, t2, _mm256_set1_ps(c));
  const __m256 log1p_u = _mm256_mul_ps(_mm256_add_ps(t, t), series);
  return _mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), log1p_u);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

}  // namespace wedge::kernels::cpu::avx2
