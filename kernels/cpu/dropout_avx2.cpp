// AVX2 dropout (declared in isa.h), for CPUs with AVX2 but not AVX-512. It mirrors
// dropout_avx512.cpp and, like it, equals the reference kernel bit for bit: it draws the same
// Philox-4x32-10 numbers as engine/philox.h, 8 counters (32 elements) at a time, and scales
// in double as the reference does.
#include <cstdint>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {
namespace {

// ---- Philox-4x32-10 on 8 counters ---------------------------------------------------------------

// (hi, lo) 32-bit halves of the 64-bit products a * m, lane by lane. vpmuludq multiplies the
// even lanes only, so the odd lanes are shifted down for a second product.
inline void mulhilo(__m256i a, std::uint32_t m, __m256i& hi, __m256i& lo) {
  const __m256i vm = _mm256_set1_epi32(static_cast<int>(m));
  lo = _mm256_mullo_epi32(a, vm);
  const __m256i even = _mm256_mul_epu32(a, vm);                        // lanes 0, 2, ...
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), vm);  // lanes 1, 3, ...
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// philox_uniform(seed, 4 * first + e) for the 32 elements e of 8 consecutive counters
// first .. first + 7, in element order: u[q] holds elements 8 q .. 8 q + 7.
inline void philox_uniform32(std::uint64_t seed, std::uint64_t first, __m256 u[4]) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i base_lo = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(first)));
  __m256i c0 = _mm256_add_epi32(base_lo, lane);
  // The low word wraps past 2^32 within the 8 lanes: carry into the high word there. AVX2
  // compares signed only; flipping the sign bits of both sides makes it an unsigned c0 < base.
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(base_lo, sign), _mm256_xor_si256(c0, sign));
  // carry is -1 where it wraps: subtracting it adds the 1.
  __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(first >> 32)), carry);
  __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(c0, 0xD2511F53u, hi0, lo0);
    mulhilo(c2, 0xCD9E8D57u, hi1, lo1);
    const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(k0)));
    const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // c_w[j] is word w of counter first + j; element 4 j + w wants it. Within each 128-bit
  // lane (counters 4 h .. 4 h + 3), gather the four words of each counter (u_r: counter
  // 4 h + r), then put counters 2 q and 2 q + 1 side by side in vector q.
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i words[4] = {_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u2, u3, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31), _mm256_permute2x128_si256(u2, u3, 0x31)};
  for (int q = 0; q < 4; ++q) {
    // 24 bits convert to float exactly, and the power-of-two scale is exact: the reference's value.
    const __m256 bits24 = _mm256_cvtepi32_ps(_mm256_srli_epi32(words[q], 8));
    u[q] = _mm256_mul_ps(bits24, _mm256_set1_ps(1.0f / 16777216.0f));
  }
}

// float(double(x) * scale) lane by lane: the reference's rounding, once, from the exact product.
inline __m256 scale_in_double(__m256 x, __m256d scale) {
  const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), scale));
  const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), scale));
  return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

}  // namespace

void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  // 1 / (1 - p) in double, as the reference; p == 1 keeps nothing (scale unused).
  const double scale = p < 1.0f ? 1.0 / (1.0 - double(p)) : 0.0;
  const __m256d vscale = _mm256_set1_pd(scale);
  const __m256 vp = _mm256_set1_ps(p);
  // Blocks of 32 elements that start on a multiple of 4 of the global index offset + i, so
  // each block is 8 whole Philox counters. Vectors wholly inside [i0, i1) load and store
  // plainly; the few at the ends of a chunk go through lane masks (a masked-off lane is
  // neither loaded nor stored), so neighbouring chunks never touch each other's elements.
  parallel_for(0, n, 1 << 13, [&](i64 i0, i64 i1) {
    const std::uint64_t g0 = (offset + static_cast<std::uint64_t>(i0)) & ~std::uint64_t{3};
    for (std::uint64_t g = g0; g < offset + static_cast<std::uint64_t>(i1); g += 32) {
      __m256 u[4];
      philox_uniform32(seed, g >> 2, u);
      for (int q = 0; q < 4; ++q) {
        const i64 start = static_cast<i64>(g - offset) + 8 * q;  // local index of lane 0
        const __m256 keep = _mm256_cmp_ps(u[q], vp, _CMP_GE_OQ);
        if (start >= i0 && start + 8 <= i1) {
          // and with the keep mask: dropped lanes become +0, as the reference's T(0).
          _mm256_storeu_ps(y + start, _mm256_and_ps(keep, scale_in_double(_mm256_loadu_ps(x + start), vscale)));
          continue;
        }
        const __m256i mask = _mm256_andnot_si256(first_lanes8(i0 - start), first_lanes8(i1 - start));
        if (_mm256_testz_si256(mask, mask)) continue;
        const __m256 xv = _mm256_maskload_ps(x + start, mask);
        _mm256_maskstore_ps(y + start, mask, _mm256_and_ps(keep, scale_in_double(xv, vscale)));
      }
    }
  });
}

void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  // Linear in its input with the same mask: the same map applied to gy.
  dropout_forward(gy, gx, n, p, seed, offset);
}

}  // namespace wedge::kernels::cpu::avx2
