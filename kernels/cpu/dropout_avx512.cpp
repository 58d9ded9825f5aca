// AVX-512 dropout (declared in elementwise.h), threaded, and equal to the reference
// kernel bit for bit: it draws the same Philox-4x32-10 numbers as engine/philox.h, 16
// counters (64 elements) at a time, and scales in double as the reference does.
#include "engine/thread_pool.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

// ---- dropout: Philox-4x32-10 on 16 counters ---------------------------------------------------

// (hi, lo) 32-bit halves of the 64-bit products a * m, lane by lane.
inline void mulhilo(__m512i a, std::uint32_t m, __m512i& hi, __m512i& lo) {
  const __m512i vm = _mm512_set1_epi32(static_cast<int>(m));
  lo = _mm512_mullo_epi32(a, vm);
  const __m512i even = _mm512_mul_epu32(a, vm);                        // lanes 0, 2, ...
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), vm);  // lanes 1, 3, ...
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// philox_uniform(seed, 4 * first + e) for the 64 elements e of 16 consecutive counters
// first .. first + 15, in element order: u[q] holds elements 16 q .. 16 q + 15.
inline void philox_uniform64(std::uint64_t seed, std::uint64_t first, __m512 u[4]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i base_lo = _mm512_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(first)));
  __m512i c0 = _mm512_add_epi32(base_lo, lane);
  // The low word wraps past 2^32 within the 16 lanes: carry into the high word there.
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base_lo);
  __m512i c1 =
      _mm512_mask_add_epi32(_mm512_set1_epi32(static_cast<int>(first >> 32)), carry,
                            _mm512_set1_epi32(static_cast<int>(first >> 32)), _mm512_set1_epi32(1));
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mulhilo(c0, 0xD2511F53u, hi0, lo0);
    mulhilo(c2, 0xCD9E8D57u, hi1, lo1);
    const __m512i n0 =
        _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(k0)));
    const __m512i n2 =
        _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(k1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // c_w[j] is word w of counter first + j; element 4 j + w wants it. Within each 128-bit
  // lane, interleave the words of its four counters, then gather lane q of every vector.
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
  const __m512i v0 = _mm512_shuffle_i32x4(u0, u1, 0x44), v1 = _mm512_shuffle_i32x4(u0, u1, 0xEE);
  const __m512i v2 = _mm512_shuffle_i32x4(u2, u3, 0x44), v3 = _mm512_shuffle_i32x4(u2, u3, 0xEE);
  const __m512i words[4] = {_mm512_shuffle_i32x4(v0, v2, 0x88), _mm512_shuffle_i32x4(v0, v2, 0xDD),
                            _mm512_shuffle_i32x4(v1, v3, 0x88), _mm512_shuffle_i32x4(v1, v3, 0xDD)};
  for (int q = 0; q < 4; ++q) {
    const __m512 bits24 = _mm512_cvtepi32_ps(_mm512_srli_epi32(words[q], 8));
    u[q] = _mm512_mul_ps(bits24, _mm512_set1_ps(1.0f / 16777216.0f));
  }
}

// Lanes whose local index start + lane lies in [i0, i1).
inline __mmask16 lanes_within(i64 start, i64 i0, i64 i1) {
  return static_cast<__mmask16>(first_lanes(i1 - start) & ~first_lanes(i0 - start));
}

}  // namespace

void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed,
                     std::uint64_t offset) {
  // 1 / (1 - p) in double, as the reference; p == 1 keeps nothing (scale unused).
  const double scale = p < 1.0f ? 1.0 / (1.0 - double(p)) : 0.0;
  const __m512d vscale = _mm512_set1_pd(scale);
  const __m512 vp = _mm512_set1_ps(p);
  // Blocks of 64 elements that start on a multiple of 4 of the global index offset + i,
  // so each block is 16 whole Philox counters; lanes outside [i0, i1) are masked off (a
  // masked-off lane is neither loaded nor stored).
  parallel_for(0, n, 1 << 13, [&](i64 i0, i64 i1) {
    const std::uint64_t g0 = (offset + static_cast<std::uint64_t>(i0)) & ~std::uint64_t{3};
    for (std::uint64_t g = g0; g < offset + static_cast<std::uint64_t>(i1); g += 64) {
      __m512 u[4];
      philox_uniform64(seed, g >> 2, u);
      for (int q = 0; q < 4; ++q) {
        const i64 start = static_cast<i64>(g - offset) + 16 * q;  // local index of lane 0
        const __mmask16 mask = lanes_within(start, i0, i1);
        if (mask == 0) continue;
        const __mmask16 keep = _mm512_cmp_ps_mask(u[q], vp, _CMP_GE_OQ) & mask;
        const __m512 xv = _mm512_maskz_loadu_ps(mask, x + start);
        const __m256 lo =
            _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(xv)), vscale));
        const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xv), 1))),
            vscale));
        const __m512 scaled = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
        _mm512_mask_storeu_ps(y + start, mask, _mm512_maskz_mov_ps(keep, scaled));
      }
    }
  });
}

void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed,
                      std::uint64_t offset) {
  // Linear in its input with the same mask: the same map applied to gy.
  dropout_forward(gy, gx, n, p, seed, offset);
}

}  // namespace wedge::kernels::cpu::avx512
