// AdamW over all parameters in one vectorised, threaded pass. Same math as
// kernels/ref/adam.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {

namespace {

// Elements [i0, i1) of one parameter tensor.
void adam_range(const AdamParams& hp, const AdamSegment<float>& seg, i64 i0, i64 i1) {
  const __m512 b1 = _mm512_set1_ps(hp.beta1), one_minus_b1 = _mm512_set1_ps(1.0f - hp.beta1);
  const __m512 b2 = _mm512_set1_ps(hp.beta2), one_minus_b2 = _mm512_set1_ps(1.0f - hp.beta2);
  const __m512 inv_bc1 = _mm512_set1_ps(1.0f / hp.bc1), inv_bc2 = _mm512_set1_ps(1.0f / hp.bc2);
  const __m512 eps = _mm512_set1_ps(hp.eps), wd = _mm512_set1_ps(hp.weight_decay);
  const __m512 lr = _mm512_set1_ps(hp.lr), scale = _mm512_set1_ps(hp.grad_scale);
  const bool decoupled = hp.decoupled;
  float* param = seg.param;
  float* m = seg.m;
  float* v = seg.v;
  for (i64 i = i0; i < i1; i += 16) {
    const __mmask16 mask = first_lanes(i1 - i);
    const __m512 p = _mm512_maskz_loadu_ps(mask, param + i);
    __m512 g = _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(mask, seg.grad + i));
    if (!decoupled) g = _mm512_fmadd_ps(wd, p, g);  // weight decay as an L2 term
    const __m512 m_new =
        _mm512_fmadd_ps(b1, _mm512_maskz_loadu_ps(mask, m + i), _mm512_mul_ps(one_minus_b1, g));
    const __m512 v_new = _mm512_fmadd_ps(b2, _mm512_maskz_loadu_ps(mask, v + i),
                                         _mm512_mul_ps(one_minus_b2, _mm512_mul_ps(g, g)));
    const __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(_mm512_mul_ps(v_new, inv_bc2)), eps);
    __m512 step = _mm512_div_ps(_mm512_mul_ps(m_new, inv_bc1), denom);
    if (decoupled) step = _mm512_fmadd_ps(wd, p, step);
    _mm512_mask_storeu_ps(m + i, mask, m_new);
    _mm512_mask_storeu_ps(v + i, mask, v_new);
    _mm512_mask_storeu_ps(param + i, mask, _mm512_fnmadd_ps(lr, step, p));
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

}  // namespace wedge::kernels::cpu::avx512
