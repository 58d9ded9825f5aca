// AdamW over all parameters in one vectorised, threaded pass, for CPUs with AVX2 but not
// AVX-512: adam_avx512.cpp on 8 lanes, the same float arithmetic in the same order (so the
// same bits as the AVX-512 kernel: every operation is a correctly rounded one lane by lane).
// Same math as kernels/ref/adam.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {

namespace {

// The hyperparameters in every lane.
struct Constants {
  explicit Constants(const AdamParams& hp)
      : b1(_mm256_set1_ps(hp.beta1)), one_minus_b1(_mm256_set1_ps(1.0f - hp.beta1)), b2(_mm256_set1_ps(hp.beta2)),
        one_minus_b2(_mm256_set1_ps(1.0f - hp.beta2)), inv_bc1(_mm256_set1_ps(1.0f / hp.bc1)),
        inv_bc2(_mm256_set1_ps(1.0f / hp.bc2)), eps(_mm256_set1_ps(hp.eps)), wd(_mm256_set1_ps(hp.weight_decay)),
        lr(_mm256_set1_ps(hp.lr)), scale(_mm256_set1_ps(hp.grad_scale)), decoupled(hp.decoupled) {}
  __m256 b1, one_minus_b1, b2, one_minus_b2, inv_bc1, inv_bc2, eps, wd, lr, scale;
  bool decoupled;
};

// Elements [i, i + 8) of a segment. kWhole vectors load and store plainly; the one partial
// vector at the end of a range goes through `mask`, which neither reads nor writes the
// elements past it (a neighbouring thread's).
template <bool kWhole>
inline void adam_vector(const Constants& k, const AdamSegment<float>& seg, i64 i, __m256i mask) {
  auto load = [&](const float* p) { return kWhole ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, mask); };
  auto store = [&](float* p, __m256 v) {
    if constexpr (kWhole) _mm256_storeu_ps(p + i, v);
    else _mm256_maskstore_ps(p + i, mask, v);
  };
  const __m256 p = load(seg.param);
  __m256 g = _mm256_mul_ps(k.scale, load(seg.grad));
  if (!k.decoupled) g = _mm256_fmadd_ps(k.wd, p, g);  // weight decay as an L2 term
  const __m256 m_new = _mm256_fmadd_ps(k.b1, load(seg.m), _mm256_mul_ps(k.one_minus_b1, g));
  const __m256 v_new = _mm256_fmadd_ps(k.b2, load(seg.v), _mm256_mul_ps(k.one_minus_b2, _mm256_mul_ps(g, g)));
  const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(v_new, k.inv_bc2)), k.eps);
  __m256 step = _mm256_div_ps(_mm256_mul_ps(m_new, k.inv_bc1), denom);
  if (k.decoupled) step = _mm256_fmadd_ps(k.wd, p, step);
  store(seg.m, m_new);
  store(seg.v, v_new);
  store(seg.param, _mm256_fnmadd_ps(k.lr, step, p));
}

// Elements [i0, i1) of one parameter tensor.
void adam_range(const AdamParams& hp, const AdamSegment<float>& seg, i64 i0, i64 i1) {
  const Constants k(hp);
  i64 i = i0;
  for (; i + 8 <= i1; i += 8) adam_vector<true>(k, seg, i, _mm256_setzero_si256());
  if (i < i1) adam_vector<false>(k, seg, i, first_lanes8(i1 - i));
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

}  // namespace wedge::kernels::cpu::avx2
