// The gated fusion out = s x + (1 - s) y, s = sigmoid(a), and its backward, for CPUs with
// AVX2 but not AVX-512: gate_mix_avx512.cpp on 8 lanes, the same steps in the same order,
// threaded over the elements, tails through masked loads and stores. s is evaluated as
// simd_avx512.h's sigmoid_ps.
#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {
namespace {

constexpr i64 kGrain = 1 << 14;


}  // namespace

// Gated fusion out = s x + (1 - s) y, s = sigmoid(a), written as y + s (x - y).
void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 8) {
      const i64 m = i1 - i;
      const __m256 s = sigmoid8(load_first(a + i, m));
      const __m256 vx = load_first(x + i, m), vy = load_first(y + i, m);
      store_first(out + i, m, _mm256_fmadd_ps(s, _mm256_sub_ps(vx, vy), vy));
    }
  });
}

// 1 - s is formed as sigmoid(-a), never by subtraction: once s rounds near 1, 1 - s in
// float would keep no relative accuracy (and be 0 where the true value is ~1e-14).
void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga, float* gx,
                       float* gy, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 8) {
      const i64 m = i1 - i;
      const __m256 va = load_first(a + i, m);
      const __m256 s = sigmoid8(va), rest = sigmoid8(_mm256_sub_ps(_mm256_setzero_ps(), va));  // s, 1 - s
      const __m256 g = load_first(gout + i, m);
      const __m256 diff = _mm256_sub_ps(load_first(x + i, m), load_first(y + i, m));
      const __m256 gs = _mm256_mul_ps(g, s), g_rest = _mm256_mul_ps(g, rest);  // g s, g (1 - s)
      store_first(ga + i, m, _mm256_mul_ps(_mm256_mul_ps(gs, diff), rest));
      store_first(gx + i, m, gs);
      store_first(gy + i, m, g_rest);
    }
  });
}

}  // namespace wedge::kernels::cpu::avx2
