// AdamW over all parameters in one vectorised, threaded pass; one source for both widths
// (simd.h). Every operation is a correctly rounded one lane by lane, so both widths give
// the same bits. Same math as kernels/ref/adam.cpp.
#include "kernels/cpu/simd.h"

#include <algorithm>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

namespace {

// Elements [i0, i1) of one parameter tensor. The partial vector at the end of a range
// neither reads nor writes the elements past it (a neighbouring thread's).
void adam_range(const AdamParams& hp, const AdamSegment<float>& seg, i64 i0, i64 i1) {
  const vf b1 = set1(hp.beta1), one_minus_b1 = set1(1.0f - hp.beta1);
  const vf b2 = set1(hp.beta2), one_minus_b2 = set1(1.0f - hp.beta2);
  const vf inv_bc1 = set1(1.0f / hp.bc1), inv_bc2 = set1(1.0f / hp.bc2);
  const vf eps = set1(hp.eps), wd = set1(hp.weight_decay);
  const vf lr = set1(hp.lr), scale = set1(hp.grad_scale);
  const bool decoupled = hp.decoupled;
  float* param = seg.param;
  float* m = seg.m;
  float* v = seg.v;
  for (i64 i = i0; i < i1; i += kLanes) {
    const i64 n = i1 - i;
    const vf p = load_first(param + i, n);
    vf g = mul(scale, load_first(seg.grad + i, n));
    if (!decoupled) g = fmadd(wd, p, g);  // weight decay as an L2 term
    const vf m_new = fmadd(b1, load_first(m + i, n), mul(one_minus_b1, g));
    const vf v_new = fmadd(b2, load_first(v + i, n), mul(one_minus_b2, mul(g, g)));
    const vf denom = add(sqrt(mul(v_new, inv_bc2)), eps);
    vf step = div(mul(m_new, inv_bc1), denom);
    if (decoupled) step = fmadd(wd, p, step);
    store_first(m + i, n, m_new);
    store_first(v + i, n, v_new);
    store_first(param + i, n, fnmadd(lr, step, p));
  }
}

thread_local std::vector<i64> t_starts;  // first element of each segment in the joint range

}  // namespace

// All tensors as one index range [0, total): the threads take equal shares of it, and a
// share that spans several tensors walks them in turn (so a model's many small biases are
// not each a separate round of thread hand-offs).
void adam_update(const AdamParams& hp, const AdamSegment<float>* segments, i64 count) {
  std::vector<i64>& starts = t_starts;
  starts.assign(static_cast<std::size_t>(count) + 1, 0);
  for (i64 s = 0; s < count; ++s) starts[s + 1] = starts[s] + segments[s].n;
  parallel_for(0, starts[count], 1 << 14, [&](i64 i0, i64 i1) {
    // The segment holding i0: the last start <= i0.
    i64 s = std::upper_bound(starts.begin(), starts.end(), i0) - starts.begin() - 1;
    for (i64 i = i0; i < i1; ++s) {
      const i64 end = std::min(i1, starts[s + 1]);
      if (end > i) adam_range(hp, segments[s], i - starts[s], end - starts[s]);
      i = end;
    }
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
