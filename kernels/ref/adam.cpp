// One Adam / AdamW step per parameter (Kingma & Ba 2015; Loshchilov & Hutter 2019):
//   g = grad                       (+ wd * p first, when weight decay is an L2 term)
//   m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
//   p -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps)   (+ wd * p, when decoupled: AdamW) )
// bc1 = 1 - b1^t and bc2 = 1 - b2^t are the bias corrections, precomputed by the caller.
#include <cmath>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

template <typename T>
void adam_update(const AdamParams& hp, T* param, const T* grad, T* m, T* v, i64 n) {
  const acc_t lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  for (i64 i = 0; i < n; ++i) {
    const acc_t p = param[i];
    const acc_t g = hp.decoupled ? acc_t(grad[i]) : acc_t(grad[i]) + wd * p;
    const acc_t m_new = b1 * acc_t(m[i]) + (1.0 - b1) * g;
    const acc_t v_new = b2 * acc_t(v[i]) + (1.0 - b2) * g * g;
    acc_t step = (m_new / acc_t(hp.bc1)) / (std::sqrt(v_new / acc_t(hp.bc2)) + eps);
    if (hp.decoupled) step += wd * p;
    m[i] = T(m_new);
    v[i] = T(v_new);
    param[i] = T(p - lr * step);
  }
}

template void adam_update<float>(const AdamParams&, float*, const float*, float*, float*, i64);
template void adam_update<double>(const AdamParams&, double*, const double*, double*, double*, i64);

}  // namespace wedge::kernels::ref
