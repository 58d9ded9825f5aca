// Fill, element-wise maps and their derivatives, and broadcasting binary maps.
// Each value is computed in double and rounded once to T, so the float table gives the
// correctly rounded result of the formula (up to libm), the best an oracle can offer.
#include <cmath>
#include <limits>

#include "kernels/ref/nd_index.h"
#include "kernels/ref/ref.h"
#include "kernels/ref/scalar_math.h"

namespace wedge::kernels::ref {

namespace {

acc_t apply_unary(UnaryOp op, acc_t param, acc_t x) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sigmoid: return sigmoid(x);
    case UnaryOp::Relu: return x > 0 ? x : 0.0;
    case UnaryOp::Gelu: return x * normal_cdf(x);  // exact GELU, not the tanh approximation
    case UnaryOp::AddScalar: return x + param;
    case UnaryOp::MulScalar: return x * param;
    case UnaryOp::PowScalar: return std::pow(x, param);
    case UnaryOp::Abs: return std::fabs(x);
    case UnaryOp::Silu: return silu(x);
    case UnaryOp::Softplus: return softplus(x);
  }
  return std::numeric_limits<acc_t>::quiet_NaN();
}

// f'(x), using y = f(x) where the derivative is naturally written in terms of y.
acc_t unary_derivative(UnaryOp op, acc_t param, acc_t x, acc_t y) {
  switch (op) {
    case UnaryOp::Neg: return -1.0;
    case UnaryOp::Exp: return y;  // (e^x)' = e^x
    case UnaryOp::Log: return 1.0 / x;
    case UnaryOp::Sqrt: return 0.5 / y;  // (sqrt x)' = 1 / (2 sqrt x)
    case UnaryOp::Tanh: return 1.0 - y * y;
    case UnaryOp::Sigmoid: return y * (1.0 - y);
    case UnaryOp::Relu: return x > 0 ? 1.0 : 0.0;  // 0 at the kink, as everyone does
    case UnaryOp::Gelu: return normal_cdf(x) + x * normal_pdf(x);  // (x Phi(x))'
    case UnaryOp::AddScalar: return 1.0;
    case UnaryOp::MulScalar: return param;
    case UnaryOp::PowScalar:
      // (x^c)' = c x^(c-1); for c == 0 the map is constant, and writing 0 directly avoids
      // 0 * inf = NaN at x == 0.
      return param == 0 ? 0.0 : param * std::pow(x, param - 1.0);
    case UnaryOp::Abs: return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);  // sign(x), 0 at 0
    case UnaryOp::Silu: return silu_derivative(x);
    case UnaryOp::Softplus: return sigmoid(x);  // (log(1 + e^x))' = e^x / (1 + e^x)
  }
  return std::numeric_limits<acc_t>::quiet_NaN();
}

// max/min propagate NaN (like PyTorch's maximum/minimum) so a NaN is never hidden.
acc_t apply_binary(BinaryOp op, acc_t a, acc_t b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Max: return std::isnan(a) || std::isnan(b) ? a + b : (a > b ? a : b);
    case BinaryOp::Min: return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? a : b);
    case BinaryOp::Pow: return std::pow(a, b);
  }
  return std::numeric_limits<acc_t>::quiet_NaN();
}

}  // namespace

// y[i] = value
template <typename T>
void fill(T* y, T value, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = value;
}

// y[i] = f(x[i]; param)
template <typename T>
void unary(UnaryOp op, T param, const T* x, T* y, i64 n) {
  for (i64 i = 0; i < n; ++i) y[i] = T(apply_unary(op, param, x[i]));
}

// gx[i] (+)= gy[i] * f'(x[i])
template <typename T>
void unary_backward(UnaryOp op, T param, const T* x, const T* y, const T* gy, T* gx, i64 n,
                    bool accumulate) {
  for (i64 i = 0; i < n; ++i) {
    acc_t g = acc_t(gy[i]) * unary_derivative(op, param, x[i], y[i]);
    gx[i] = accumulate ? T(acc_t(gx[i]) + g) : T(g);
  }
}

// out[idx] = a[idx . stride_a] (op) b[idx . stride_b] for every idx of the shape, with
// out contiguous. A stride of 0 on a dimension repeats (broadcasts) that operand along it.
template <typename T>
void binary(BinaryOp op, const BroadcastLayout& layout, const T* a, const T* b, T* out) {
  const i64 size = index_space_size(layout.ndim, layout.shape);
  StridedPairWalker walk(layout.ndim, layout.shape, layout.stride_a, layout.stride_b);
  for (i64 i = 0; i < size; ++i, walk.next()) {
    out[i] = T(apply_binary(op, a[walk.first()], b[walk.second()]));
  }
}

#define WEDGE_REF_INSTANTIATE(T)                                                            \
  template void fill<T>(T*, T, i64);                                                        \
  template void unary<T>(UnaryOp, T, const T*, T*, i64);                                    \
  template void unary_backward<T>(UnaryOp, T, const T*, const T*, const T*, T*, i64, bool); \
  template void binary<T>(BinaryOp, const BroadcastLayout&, const T*, const T*, T*);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
