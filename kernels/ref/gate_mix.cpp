// The gated fusion of two inputs by a learned gate: out = s x + (1 - s) y, s = sigmoid(a),
// and its backward. Computed in double (acc_t) and rounded once to T.
#include "kernels/ref/ref.h"
#include "kernels/ref/scalar_math.h"

namespace wedge::kernels::ref {

// sigmoid(a) and 1 - sigmoid(a) = sigmoid(-a), each to full relative precision (1 - s
// formed by subtraction would lose it once s is within 1e-16 of 1).
static void sigmoid_pair(acc_t a, acc_t& s, acc_t& one_minus_s) {
  s = sigmoid(a);
  one_minus_s = sigmoid(-a);
}

// Gated fusion: s = sigmoid(a), out = s x + (1 - s) y.
template <typename T>
void gate_mix_forward(const T* a, const T* x, const T* y, T* out, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    acc_t s, rest;
    sigmoid_pair(acc_t(a[i]), s, rest);
    out[i] = T(s * acc_t(x[i]) + rest * acc_t(y[i]));
  }
}

// d out / d a = (x - y) s (1 - s),  d out / d x = s,  d out / d y = 1 - s.
template <typename T>
void gate_mix_backward(const T* a, const T* x, const T* y, const T* gout, T* ga, T* gx, T* gy, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    acc_t s, rest;
    sigmoid_pair(acc_t(a[i]), s, rest);
    const acc_t g = acc_t(gout[i]);
    ga[i] = T(g * (acc_t(x[i]) - acc_t(y[i])) * s * rest);
    gx[i] = T(g * s);
    gy[i] = T(g * rest);
  }
}

#define WEDGE_REF_INSTANTIATE(T)                                                     \
  template void gate_mix_forward<T>(const T*, const T*, const T*, T*, i64);          \
  template void gate_mix_backward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, i64);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
