// The width-generic vector layer of the CPU kernels: one kernel source per family
// (kernels/cpu/FAMILY_simd.cpp) is written once against the names below and compiled
// twice by CMakeLists.txt, for 16 lanes (AVX-512, namespace cpu::avx512) and for 8 lanes
// (AVX2 + FMA, namespace cpu::avx2); WEDGE_SIMD_LANES says which. Only the primitives
// differ between the widths (loads and stores with masked tails, arithmetic, compares,
// horizontal sums, widening to double, 32-bit integer lanes); the math built on them (e^x,
// erfc, GELU, sigmoid, SiLU, softplus) is written once, at the end of this file.
//
//   vf   kLanes floats            vd   kLanes / 2 doubles      vi   kLanes 32-bit integers
//   vmask  a set of lanes (a compare's result, or the first n lanes of a tail)
//
// Include only from a FAMILY_simd.cpp file, inside no namespace; write the kernels in
// namespace wedge::kernels::cpu::WEDGE_SIMD_ISA.
#pragma once

#if !defined(WEDGE_SIMD_LANES)
#error "kernels/cpu/simd.h: compile FAMILY_simd.cpp through CMakeLists.txt, which sets WEDGE_SIMD_LANES"
#endif

// GCC 12 warns, wrongly, that some intrinsics read an uninitialised value (their unused
// merge source is _mm512_undefined_ps()).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <initializer_list>

#if WEDGE_SIMD_LANES == 16
#define WEDGE_SIMD_ISA avx512
#elif WEDGE_SIMD_LANES == 8
#define WEDGE_SIMD_ISA avx2
#else
#error "WEDGE_SIMD_LANES must be 16 (AVX-512) or 8 (AVX2)"
#endif

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

using i64 = std::int64_t;
constexpr int kLanes = WEDGE_SIMD_LANES;
constexpr int kDoubleLanes = kLanes / 2;

#if WEDGE_SIMD_LANES == 16

using vf = __m512;
using vd = __m512d;
using vi = __m512i;
using vmask = __mmask16;

// ---- lanes and memory
// Lanes [0, count) (count clamped to [0, 16]).
inline vmask first_lanes(i64 count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<vmask>((1u << count) - 1u);
}
inline vmask mask_and_not(vmask a, vmask b) { return static_cast<vmask>(a & ~b); }  // a and not b
inline bool any(vmask m) { return m != 0; }

inline vf zero() { return _mm512_setzero_ps(); }
inline vf set1(float x) { return _mm512_set1_ps(x); }
inline vf load(const float* p) { return _mm512_loadu_ps(p); }
inline vf load_aligned(const float* p) { return _mm512_load_ps(p); }
inline void store(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline void store_aligned(float* p, vf v) { _mm512_store_ps(p, v); }
// The first n floats at p, zeros in the other lanes (whose memory is not read); the store
// of the first n lanes only (the others' memory is not written).
inline vf load_first(const float* p, i64 n) { return _mm512_maskz_loadu_ps(first_lanes(n), p); }
inline void store_first(float* p, i64 n, vf v) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
inline vf load_masked(const float* p, vmask m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store_masked(float* p, vmask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
// A store that bypasses the caches (p aligned to the vector); order it with stream_fence().
inline void store_stream(float* p, vf v) { _mm512_stream_ps(p, v); }

// ---- arithmetic (fmadd a b + c, fnmadd c - a b, fmsub a b - c)
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
inline vf fmsub(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
// max/min return their second operand when either is NaN.
inline vf max(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf abs(vf a) { return _mm512_abs_ps(a); }
inline vf sqrt(vf a) { return _mm512_sqrt_ps(a); }
inline vf round_nearest(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// p 2^n for integral n in [-159, 128] (e^x's scaling): one rounding, as a single product.
inline vf scale_pow2(vf p, vf n) { return _mm512_scalef_ps(p, n); }

// ---- compares (ordered: false where either is NaN) and selection
inline vmask less(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline vmask greater_equal(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ); }
inline vmask greater(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline vmask unordered(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }  // either is NaN
// m's lanes from if_true, the others from if_false.
inline vf select(vmask m, vf if_true, vf if_false) { return _mm512_mask_blend_ps(m, if_false, if_true); }
inline vf keep(vmask m, vf a) { return _mm512_maskz_mov_ps(m, a); }  // a in m's lanes, 0 elsewhere

// ---- horizontal reductions, in a fixed order (the same inputs always give the same result)
inline float hsum(vf v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s = _mm256_add_ps(lo, hi);
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
inline float hmax(vf v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s = _mm256_max_ps(lo, hi);
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// ---- doubles: a vf's lower and upper halves widened, and two halves narrowed back
inline vd zero_d() { return _mm512_setzero_pd(); }
inline vd set1(double x) { return _mm512_set1_pd(x); }
inline vd widen_lo(vf v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
inline vd widen_hi(vf v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
inline vf narrow(vd lo, vd hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}
inline vd add(vd a, vd b) { return _mm512_add_pd(a, b); }
inline vd sub(vd a, vd b) { return _mm512_sub_pd(a, b); }
inline vd mul(vd a, vd b) { return _mm512_mul_pd(a, b); }
inline vd fmadd(vd a, vd b, vd c) { return _mm512_fmadd_pd(a, b, c); }
// The first n doubles at p (zeros beyond), and the store of the first n lanes.
inline vd load_first(const double* p, i64 n) { return _mm512_maskz_loadu_pd(static_cast<__mmask8>(first_lanes(n)), p); }
inline void store_first(double* p, i64 n, vd v) { _mm512_mask_storeu_pd(p, static_cast<__mmask8>(first_lanes(n)), v); }
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as _mm512_reduce_add_pd.
inline double hsum(vd v) { return _mm512_reduce_add_pd(v); }

// ---- 32-bit integer lanes
inline vi set1_u32(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
inline vi zero_u32() { return _mm512_setzero_si512(); }
inline vi lane_indices() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
inline vi add_u32(vi a, vi b) { return _mm512_add_epi32(a, b); }
inline vi xor_u32(vi a, vi b) { return _mm512_xor_si512(a, b); }
inline vmask less_u32(vi a, vi b) { return _mm512_cmplt_epu32_mask(a, b); }
inline vi select_u32(vmask m, vi if_true, vi if_false) { return _mm512_mask_blend_epi32(m, if_false, if_true); }
// (hi, lo) 32-bit halves of the 64-bit products a * m, lane by lane.
inline void mulhilo_u32(vi a, std::uint32_t m, vi& hi, vi& lo) {
  const vi vm = set1_u32(m);
  lo = _mm512_mullo_epi32(a, vm);
  const vi even = _mm512_mul_epu32(a, vm);                        // lanes 0, 2, ...
  const vi odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), vm);  // lanes 1, 3, ...
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}
// The top 24 bits of each lane as a float in [0, 1): (x >> 8) / 2^24.
inline vf unit_float_u32(vi x) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(x, 8)), _mm512_set1_ps(1.0f / 16777216.0f));
}
// The square transpose in registers: r[q] holds row q of a kLanes x kLanes block on entry
// and column q on exit.
inline void transpose_square(vf r[16]) {
  vf t[16], u[16];
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
    const vf v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    const vf v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const vf v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const vf v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

// Four vectors of word w of counters j = 0..15 (c[w] lane j) to the same words in counter
// order: out[q] lane l = c[(16 q + l) % 4][(16 q + l) / 4].
inline void interleave_words(const vi c[4], vi out[4]) {
  const vi t0 = _mm512_unpacklo_epi32(c[0], c[1]), t1 = _mm512_unpackhi_epi32(c[0], c[1]);
  const vi t2 = _mm512_unpacklo_epi32(c[2], c[3]), t3 = _mm512_unpackhi_epi32(c[2], c[3]);
  const vi u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const vi u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  const vi v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u0, u1, 0xEE);
  const vi v2 = _mm512_shuffle_i32x4(u2, u3, 0x44), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  out[0] = _mm512_shuffle_i32x4(v0, v2, 0x88);
  out[1] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
  out[2] = _mm512_shuffle_i32x4(v1, v3, 0x88);
  out[3] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
}

#else  // WEDGE_SIMD_LANES == 8

using vf = __m256;
using vd = __m256d;
using vi = __m256i;
using vmask = __m256;  // all ones in a selected lane, all zeros elsewhere

// ---- lanes and memory
inline __m256i first_lanes_i(i64 count) {
  const int n = count <= 0 ? 0 : count >= 8 ? 8 : static_cast<int>(count);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline vmask first_lanes(i64 count) { return _mm256_castsi256_ps(first_lanes_i(count)); }
inline vmask mask_and_not(vmask a, vmask b) { return _mm256_andnot_ps(b, a); }
inline bool any(vmask m) { return _mm256_movemask_ps(m) != 0; }

inline vf zero() { return _mm256_setzero_ps(); }
inline vf set1(float x) { return _mm256_set1_ps(x); }
inline vf load(const float* p) { return _mm256_loadu_ps(p); }
inline vf load_aligned(const float* p) { return _mm256_load_ps(p); }
inline void store(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline void store_aligned(float* p, vf v) { _mm256_store_ps(p, v); }
// A whole vector (n >= 8) takes the plain load and store: masked moves are slow on some CPUs.
inline vf load_first(const float* p, i64 n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_lanes_i(n));
}
inline void store_first(float* p, i64 n, vf v) {
  if (n >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, first_lanes_i(n), v);
}
inline vf load_masked(const float* p, vmask m) { return _mm256_maskload_ps(p, _mm256_castps_si256(m)); }
inline void store_masked(float* p, vmask m, vf v) { _mm256_maskstore_ps(p, _mm256_castps_si256(m), v); }
inline void store_stream(float* p, vf v) { _mm256_stream_ps(p, v); }

// ---- arithmetic
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
inline vf fmsub(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
inline vf max(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf min(vf a, vf b) { return _mm256_min_ps(a, b); }
inline vf abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline vf sqrt(vf a) { return _mm256_sqrt_ps(a); }
inline vf round_nearest(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// AVX2 has no vscalefps: 2^n is applied as 2^(n/2) 2^(n - n/2), two factors that are
// normal floats for every n in [-159, 128]; the first product is exact, so p 2^n is
// rounded once, as vscalefps rounds it.
inline vf scale_pow2(vf p, vf n) {
  const __m256i whole = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(whole, 1);
  const __m256i rest = _mm256_sub_epi32(whole, half);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 scale1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 scale2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, scale1), scale2);
}

// ---- compares and selection
inline vmask less(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
inline vmask greater_equal(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GE_OQ); }
inline vmask greater(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
inline vmask unordered(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
inline vf select(vmask m, vf if_true, vf if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
inline vf keep(vmask m, vf a) { return _mm256_and_ps(m, a); }

// ---- horizontal reductions, in a fixed order
inline float hsum(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(vf v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// ---- doubles
inline vd zero_d() { return _mm256_setzero_pd(); }
inline vd set1(double x) { return _mm256_set1_pd(x); }
inline vd widen_lo(vf v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
inline vd widen_hi(vf v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
inline vf narrow(vd lo, vd hi) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}
inline vd add(vd a, vd b) { return _mm256_add_pd(a, b); }
inline vd sub(vd a, vd b) { return _mm256_sub_pd(a, b); }
inline vd mul(vd a, vd b) { return _mm256_mul_pd(a, b); }
inline vd fmadd(vd a, vd b, vd c) { return _mm256_fmadd_pd(a, b, c); }
inline __m256i first_lanes_d(i64 count) {
  const long long n = count <= 0 ? 0 : count >= 4 ? 4 : count;
  return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n), _mm256_setr_epi64x(0, 1, 2, 3));
}
// As for floats, a whole vector (n >= 4) takes the plain load and store.
inline vd load_first(const double* p, i64 n) {
  return n >= 4 ? _mm256_loadu_pd(p) : _mm256_maskload_pd(p, first_lanes_d(n));
}
inline void store_first(double* p, i64 n, vd v) {
  if (n >= 4) _mm256_storeu_pd(p, v);
  else _mm256_maskstore_pd(p, first_lanes_d(n), v);
}
// (a0 + a2) + (a1 + a3).
inline double hsum(vd v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

// ---- 32-bit integer lanes
inline vi set1_u32(std::uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
inline vi zero_u32() { return _mm256_setzero_si256(); }
inline vi lane_indices() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
inline vi add_u32(vi a, vi b) { return _mm256_add_epi32(a, b); }
inline vi xor_u32(vi a, vi b) { return _mm256_xor_si256(a, b); }
// AVX2 compares signed integers only: flip the sign bits for the unsigned order.
inline vmask less_u32(vi a, vi b) {
  const vi flip = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_xor_si256(b, flip), _mm256_xor_si256(a, flip)));
}
inline vi select_u32(vmask m, vi if_true, vi if_false) {
  return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(if_false), _mm256_castsi256_ps(if_true), m));
}
inline void mulhilo_u32(vi a, std::uint32_t m, vi& hi, vi& lo) {
  const vi vm = set1_u32(m);
  lo = _mm256_mullo_epi32(a, vm);
  const vi even = _mm256_mul_epu32(a, vm);
  const vi odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), vm);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}
inline vf unit_float_u32(vi x) {
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 8)), _mm256_set1_ps(1.0f / 16777216.0f));
}
// The square transpose (as the 16-lane version).
inline void transpose_square(vf r[8]) {
  vf t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// As the 16-lane version, for counters j = 0..7: out[q] lane l = c[(8 q + l) % 4][(8 q + l) / 4].
inline void interleave_words(const vi c[4], vi out[4]) {
  const vi t0 = _mm256_unpacklo_epi32(c[0], c[1]), t1 = _mm256_unpackhi_epi32(c[0], c[1]);
  const vi t2 = _mm256_unpacklo_epi32(c[2], c[3]), t3 = _mm256_unpackhi_epi32(c[2], c[3]);
  const vi u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const vi u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  out[0] = _mm256_permute2x128_si256(u0, u1, 0x20);
  out[1] = _mm256_permute2x128_si256(u2, u3, 0x20);
  out[2] = _mm256_permute2x128_si256(u0, u1, 0x31);
  out[3] = _mm256_permute2x128_si256(u2, u3, 0x31);
}

#endif

// A fence after store_stream's stores, before other threads read them.
inline void stream_fence() { _mm_sfence(); }

// ---- math, written once for both widths ------------------------------------------------------

// e^x. x = n ln2 + r with n an integer and |r| <= ln2/2; e^r by its degree-7 Taylor
// polynomial (truncation error < 1e-8 relative), then scaled by 2^n, which also gives +inf
// above ~88.7 and 0 (through the denormals) below ~-103. -inf gives exactly 0 (inputs are
// clamped at -110, whose result underflows to 0) and NaN stays NaN.
inline vf exp(vf x) {
  // max/min return their second operand when either is NaN: x second keeps NaN.
  x = max(set1(-110.0f), x);
  x = min(set1(89.0f), x);
  const vf n = round_nearest(mul(x, set1(1.44269504088896341f)));
  // ln 2 split in two so n * ln2_hi is exact for |n| < 2^8.
  vf r = fnmadd(n, set1(0.693145751953125f), x);
  r = fnmadd(n, set1(1.42860682030941723212e-6f), r);
  vf p = set1(1.0f / 5040);
  p = fmadd(p, r, set1(1.0f / 720));
  p = fmadd(p, r, set1(1.0f / 120));
  p = fmadd(p, r, set1(1.0f / 24));
  p = fmadd(p, r, set1(1.0f / 6));
  p = fmadd(p, r, set1(0.5f));
  p = fmadd(p, r, set1(1.0f));
  p = fmadd(p, r, set1(1.0f));
  return scale_pow2(p, n);
}

// GELU is the exact one, x Phi(x) = x erfc(-x / sqrt 2) / 2, with erfc from the
// Chebyshev fit in Numerical Recipes (fractional error below 1.2e-7 for every argument,
// including the far tail, where 1 - erf(x) would cancel):
//   erfc(z) = t exp(-z^2 - 1.26551223 + t (1.00002368 + t (0.37409196 + ... ))),
//   t = 1 / (1 + z / 2),   z >= 0;   erfc(-z) = 2 - erfc(z).
// erfc(z) for z >= 0.
inline vf erfc_nonnegative(vf z) {
  const vf t = div(set1(1.0f), fmadd(set1(0.5f), z, set1(1.0f)));
  static constexpr float c[] = {0.17087277f, -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                                -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};
  vf poly = set1(c[0]);
  for (int i = 1; i < 10; ++i) poly = fmadd(poly, t, set1(c[i]));
  return mul(t, exp(fnmadd(z, z, poly)));  // t exp(-z^2 + poly)
}

// erfc for any sign.
inline vf erfc(vf z) {
  const vf e = erfc_nonnegative(abs(z));
  return select(less(z, zero()), sub(set1(2.0f), e), e);
}

// Phi(x) = erfc(-x / sqrt 2) / 2
inline vf normal_cdf(vf x) { return mul(set1(0.5f), erfc(mul(x, set1(-0.70710678118654752440f)))); }

// GELU, exact: x Phi(x).
inline vf gelu(vf x) { return mul(x, normal_cdf(x)); }

// GELU's derivative: Phi(x) + x phi(x).
inline vf gelu_derivative(vf x) {
  const vf pdf = mul(set1(0.39894228040143267794f), exp(mul(set1(-0.5f), mul(x, x))));
  return fmadd(x, pdf, normal_cdf(x));
}

// sigmoid without overflow: e = exp(-|x|); x >= 0: 1 / (1 + e), x < 0: e / (1 + e).
inline vf sigmoid(vf x) {
  const vf e = exp(sub(zero(), abs(x)));
  const vf inv = div(set1(1.0f), add(set1(1.0f), e));
  return select(less(x, zero()), mul(inv, e), inv);
}

// SiLU, x sigmoid(x), and its derivative s (1 + x (1 - s)).
inline vf silu(vf x) { return mul(x, sigmoid(x)); }
inline vf silu_derivative(vf x) {
  const vf s = sigmoid(x), one = set1(1.0f);
  return mul(s, fmadd(x, sub(one, s), one));
}

// softplus(x) = max(x, 0) + log1p(u), u = e^-|x| in (0, 1]. log1p(u) = 2 atanh(t) with
// t = u / (2 + u) in (0, 1/3], formed from u directly (no 1 + u that would drop u's low
// bits): 2 (t + t^3/3 + ... + t^13/13), whose truncation error is below 1e-8 on that range.
inline vf softplus(vf x) {
  const vf u = exp(sub(zero(), abs(x)));
  const vf t = div(u, add(set1(2.0f), u));
  const vf t2 = mul(t, t);
  vf series = set1(1.0f / 13);
  for (const float c : {1.0f / 11, 1.0f / 9, 1.0f / 7, 1.0f / 5, 1.0f / 3, 1.0f}) series = fmadd(series, t2, set1(c));
  const vf log1p_u = mul(add(t, t), series);
  return add(max(x, zero()), log1p_u);
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
