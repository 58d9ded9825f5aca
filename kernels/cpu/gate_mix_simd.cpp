// The gated fusion out = s x + (1 - s) y, s = sigmoid(a), and its backward, threaded over
// the elements, tails through masked loads and stores; one source for both widths
// (simd.h). s is simd.h's sigmoid, as in the unary sigmoid.
#include "kernels/cpu/simd.h"
#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {
constexpr i64 kGrain = 1 << 14;
}  // namespace

// Gated fusion out = s x + (1 - s) y, s = sigmoid(a), written as y + s (x - y).
void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += kLanes) {
      const i64 m = i1 - i;
      const vf s = sigmoid(load_first(a + i, m));
      const vf vx = load_first(x + i, m), vy = load_first(y + i, m);
      store_first(out + i, m, fmadd(s, sub(vx, vy), vy));
    }
  });
}

// 1 - s is formed as sigmoid(-a), never by subtraction: once s rounds near 1, 1 - s in
// float would keep no relative accuracy (and be 0 where the true value is ~1e-14).
void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga, float* gx,
                       float* gy, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += kLanes) {
      const i64 m = i1 - i;
      const vf va = load_first(a + i, m);
      const vf s = sigmoid(va), rest = sigmoid(sub(zero(), va));  // s, 1 - s
      const vf g = load_first(gout + i, m);
      const vf diff = sub(load_first(x + i, m), load_first(y + i, m));
      const vf gs = mul(g, s), g_rest = mul(g, rest);  // g s, g (1 - s)
      store_first(ga + i, m, mul(mul(gs, diff), rest));
      store_first(gx + i, m, gs);
      store_first(gy + i, m, g_rest);
    }
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
