// The gated fusion out = s x + (1 - s) y, s = sigmoid(a), and its backward, AVX-512,
// threaded over the elements. s is sigmoid_ps of simd_avx512.h, as in the unary sigmoid.
#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {
constexpr i64 kGrain = 1 << 14;
}  // namespace

// Gated fusion out = s x + (1 - s) y, s = sigmoid(a), written as y + s (x - y).
void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) {
      const __mmask16 m = first_lanes(i1 - i);
      const __m512 s = sigmoid_ps(_mm512_maskz_loadu_ps(m, a + i));
      const __m512 vx = _mm512_maskz_loadu_ps(m, x + i), vy = _mm512_maskz_loadu_ps(m, y + i);
      _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(s, _mm512_sub_ps(vx, vy), vy));
    }
  });
}

// 1 - s is formed as sigmoid(-a), never by subtraction: once s rounds near 1, 1 - s in
// float would keep no relative accuracy (and be 0 where the true value is ~1e-14).
void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga, float* gx,
                       float* gy, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) {
      const __mmask16 m = first_lanes(i1 - i);
      const __m512 va = _mm512_maskz_loadu_ps(m, a + i);
      const __m512 s = sigmoid_ps(va), rest = sigmoid_ps(_mm512_sub_ps(_mm512_setzero_ps(), va));  // s, 1 - s
      const __m512 g = _mm512_maskz_loadu_ps(m, gout + i);
      const __m512 diff = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
      const __m512 gs = _mm512_mul_ps(g, s), g_rest = _mm512_mul_ps(g, rest);  // g s, g (1 - s)
      _mm512_mask_storeu_ps(ga + i, m, _mm512_mul_ps(_mm512_mul_ps(gs, diff), rest));
      _mm512_mask_storeu_ps(gx + i, m, gs);
      _mm512_mask_storeu_ps(gy + i, m, g_rest);
    }
  });
}

}  // namespace wedge::kernels::cpu::avx512
