// One Adam / AdamW step of every parameter (Kingma & Ba 2015; Loshchilov & Hutter 2019):
//   g = grad_scale * grad          (+ wd * p, when weight decay is an L2 term)
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//   p -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps)   (+ wd * p, when decoupled: AdamW) )
// bc1 = 1 - b1^t and bc2 = 1 - b2^t are the bias corrections, precomputed by the caller.
#include <cmath>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

namespace {

template <typename T>
void adam_segment(const AdamParams& hp, T* param, const T* grad, T* m, T* v, i64 n) {
  // course 12 begin: one AdamW step: the moments, their bias correction and the decoupled weight decay
  const acc_t lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  const acc_t scale = hp.grad_scale;
  for (i64 i = 0; i < n; ++i) {
    const acc_t p = param[i];
    const acc_t scaled = scale * acc_t(grad[i]);
    const acc_t g = hp.decoupled ? scaled : scaled + wd * p;
    const acc_t m_new = b1 * acc_t(m[i]) + (1.0 - b1) * g;
    const acc_t v_new = b2 * acc_t(v[i]) + (1.0 - b2) * g * g;
    acc_t step = (m_new / acc_t(hp.bc1)) / (std::sqrt(v_new / acc_t(hp.bc2)) + eps);
    if (hp.decoupled) step += wd * p;
    m[i] = T(m_new);
    v[i] = T(v_new);
    param[i] = T(p - lr * step);
  }
  // course 12 end
}

}  // namespace

template <typename T>
void adam_update(const AdamParams& hp, const AdamSegment<T>* segments, i64 count) {
  for (i64 s = 0; s < count; ++s) {
    const AdamSegment<T>& seg = segments[s];
    adam_segment(hp, seg.param, seg.grad, seg.m, seg.v, seg.n);
  }
}

template void adam_update<float>(const AdamParams&, const AdamSegment<float>*, i64);
template void adam_update<double>(const AdamParams&, const AdamSegment<double>*, i64);

}  // namespace wedge::kernels::ref
