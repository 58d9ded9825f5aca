// Element-wise kernels: fill, unary maps and their derivatives, broadcasting binary maps.
// Each output element depends on its own inputs only, so these are grid-stride loops
// (launch.h: elementwise_blocks) with nothing to synchronise and nothing that could make
// two runs differ.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace elementwise_impl {

// ---- fill / unary ----------------------------------------------------------------------

__global__ void fill_kernel(float* y, float value, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) y[i] = value;
}

// sigmoid without overflow: e^-x is only formed for x >= 0
__device__ __forceinline__ float sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

template <UnaryOp op>
__device__ __forceinline__ float apply_unary(float x, float param) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Exp: return expf(x);
    case UnaryOp::Log: return logf(x);
    case UnaryOp::Sqrt: return sqrtf(x);
    case UnaryOp::Tanh: return tanhf(x);
    case UnaryOp::Sigmoid: return sigmoid(x);
    case UnaryOp::Relu: return x > 0.0f ? x : 0.0f;
    case UnaryOp::Gelu: return gelu(x);  // common.cuh: exact erf form
    case UnaryOp::AddScalar: return x + param;
    case UnaryOp::MulScalar: return x * param;
    case UnaryOp::PowScalar: return powf(x, param);
    case UnaryOp::Abs: return fabsf(x);
    case UnaryOp::Silu: return x * sigmoid(x);
    case UnaryOp::Softplus: return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));  // no overflow
  }
  return x;
}

// f'(x), from x or from y = f(x), whichever is cheaper (same conventions as kernels/ref:
// relu'(0) = 0, |x|'(0) = 0, (x^0)' = 0 everywhere).
template <UnaryOp op>
__device__ __forceinline__ float unary_derivative(float x, float y, float param) {
  switch (op) {
    case UnaryOp::Neg: return -1.0f;
    case UnaryOp::Exp: return y;
    case UnaryOp::Log: return 1.0f / x;
    case UnaryOp::Sqrt: return 0.5f / y;
    case UnaryOp::Tanh: return 1.0f - y * y;
    case UnaryOp::Sigmoid: return y * (1.0f - y);
    case UnaryOp::Relu: return x > 0.0f ? 1.0f : 0.0f;
    case UnaryOp::Gelu: return gelu_derivative(x);
    case UnaryOp::AddScalar: return 1.0f;
    case UnaryOp::MulScalar: return param;
    case UnaryOp::PowScalar: return param == 0.0f ? 0.0f : param * powf(x, param - 1.0f);
    case UnaryOp::Abs: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case UnaryOp::Silu: {
      const float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    case UnaryOp::Softplus: return sigmoid(x);
  }
  return 0.0f;
}

template <UnaryOp op>
__global__ void unary_kernel(float param, const float* x, float* y, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) y[i] = apply_unary<op>(x[i], param);
}

// x or y may be null when the derivative does not need it (the op passes what it has).
template <UnaryOp op>
__global__ void unary_backward_kernel(float param, const float* x, const float* y, const float* gy,
                                      float* gx, i64 n, bool accumulate) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    const float xi = x != nullptr ? x[i] : 0.0f;
    const float yi = y != nullptr ? y[i] : 0.0f;
    const float g = gy[i] * unary_derivative<op>(xi, yi, param);
    gx[i] = accumulate ? gx[i] + g : g;
  }
}

template <UnaryOp op>
void launch_unary(float param, const float* x, float* y, i64 n) {
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0,
               unary_kernel<op>)(param, x, y, n);
  check_launch("unary_kernel");
}

template <UnaryOp op>
void launch_unary_backward(float param, const float* x, const float* y, const float* gy, float* gx,
                           i64 n, bool accumulate) {
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0,
               unary_backward_kernel<op>)(param, x, y, gy, gx, n, accumulate);
  check_launch("unary_backward_kernel");
}

// ---- broadcasting binary maps ---------------------------------------------------------

// NaN-propagating max/min, as kernels/ref: a NaN operand gives NaN.
template <BinaryOp op>
__device__ __forceinline__ float apply_binary(float a, float b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
    case BinaryOp::Max: return is_nan(a) || is_nan(b) ? a + b : (a > b ? a : b);
    case BinaryOp::Min: return is_nan(a) || is_nan(b) ? a + b : (a < b ? a : b);
    case BinaryOp::Pow: return powf(a, b);
  }
  return a;
}

template <BinaryOp op, typename Index>
__global__ void binary_kernel(Strided2<Index> layout, i64 n, const float* a, const float* b,
                              float* out) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    Index oa, ob;
    offsets_of(layout, static_cast<Index>(i), &oa, &ob);
    out[i] = apply_binary<op>(a[oa], b[ob]);
  }
}

template <BinaryOp op>
void launch_binary(const BroadcastLayout& original, const float* a, const float* b, float* out) {
  const BroadcastLayout l = coalesce(original);
  const i64 n = launch::layout_size(l.ndim, l.shape);
  if (n == 0) return;
  const dim3 grid = grid_1d(launch::elementwise_blocks(n));
  if (launch::fits_int32(l.ndim, l.shape, l.stride_a, l.stride_b)) {
    WEDGE_LAUNCH(grid, launch::kElementwiseThreads, 0, binary_kernel<op, std::int32_t>)(
        narrow<std::int32_t>(l.ndim, l.shape, l.stride_a, l.stride_b), n, a, b, out);
  } else {
    WEDGE_LAUNCH(grid, launch::kElementwiseThreads, 0, binary_kernel<op, i64>)(
        narrow<i64>(l.ndim, l.shape, l.stride_a, l.stride_b), n, a, b, out);
  }
  check_launch("binary_kernel");
}

}  // namespace elementwise_impl

using namespace elementwise_impl;

void fill(float* y, float value, i64 n) {
  if (n <= 0) return;
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0, fill_kernel)(y, value, n);
  check_launch("fill_kernel");
}

void unary(UnaryOp op, float param, const float* x, float* y, i64 n) {
  if (n <= 0) return;
  switch (op) {
    case UnaryOp::Neg: return launch_unary<UnaryOp::Neg>(param, x, y, n);
    case UnaryOp::Exp: return launch_unary<UnaryOp::Exp>(param, x, y, n);
    case UnaryOp::Log: return launch_unary<UnaryOp::Log>(param, x, y, n);
    case UnaryOp::Sqrt: return launch_unary<UnaryOp::Sqrt>(param, x, y, n);
    case UnaryOp::Tanh: return launch_unary<UnaryOp::Tanh>(param, x, y, n);
    case UnaryOp::Sigmoid: return launch_unary<UnaryOp::Sigmoid>(param, x, y, n);
    case UnaryOp::Relu: return launch_unary<UnaryOp::Relu>(param, x, y, n);
    case UnaryOp::Gelu: return launch_unary<UnaryOp::Gelu>(param, x, y, n);
    case UnaryOp::AddScalar: return launch_unary<UnaryOp::AddScalar>(param, x, y, n);
    case UnaryOp::MulScalar: return launch_unary<UnaryOp::MulScalar>(param, x, y, n);
    case UnaryOp::PowScalar: return launch_unary<UnaryOp::PowScalar>(param, x, y, n);
    case UnaryOp::Abs: return launch_unary<UnaryOp::Abs>(param, x, y, n);
    case UnaryOp::Silu: return launch_unary<UnaryOp::Silu>(param, x, y, n);
    case UnaryOp::Softplus: return launch_unary<UnaryOp::Softplus>(param, x, y, n);
  }
  throw std::invalid_argument("cuda unary: unknown op");
}

void unary_backward(UnaryOp op, float param, const float* x, const float* y, const float* gy,
                    float* gx, i64 n, bool accumulate) {
  if (n <= 0) return;
  switch (op) {
    case UnaryOp::Neg: return launch_unary_backward<UnaryOp::Neg>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Exp: return launch_unary_backward<UnaryOp::Exp>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Log: return launch_unary_backward<UnaryOp::Log>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Sqrt: return launch_unary_backward<UnaryOp::Sqrt>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Tanh: return launch_unary_backward<UnaryOp::Tanh>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Sigmoid: return launch_unary_backward<UnaryOp::Sigmoid>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Relu: return launch_unary_backward<UnaryOp::Relu>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Gelu: return launch_unary_backward<UnaryOp::Gelu>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::AddScalar: return launch_unary_backward<UnaryOp::AddScalar>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::MulScalar: return launch_unary_backward<UnaryOp::MulScalar>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::PowScalar: return launch_unary_backward<UnaryOp::PowScalar>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Abs: return launch_unary_backward<UnaryOp::Abs>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Silu: return launch_unary_backward<UnaryOp::Silu>(param, x, y, gy, gx, n, accumulate);
    case UnaryOp::Softplus: return launch_unary_backward<UnaryOp::Softplus>(param, x, y, gy, gx, n, accumulate);
  }
  throw std::invalid_argument("cuda unary_backward: unknown op");
}

void binary(BinaryOp op, const BroadcastLayout& layout, const float* a, const float* b, float* out) {
  switch (op) {
    case BinaryOp::Add: return launch_binary<BinaryOp::Add>(layout, a, b, out);
    case BinaryOp::Sub: return launch_binary<BinaryOp::Sub>(layout, a, b, out);
    case BinaryOp::Mul: return launch_binary<BinaryOp::Mul>(layout, a, b, out);
    case BinaryOp::Div: return launch_binary<BinaryOp::Div>(layout, a, b, out);
    case BinaryOp::Max: return launch_binary<BinaryOp::Max>(layout, a, b, out);
    case BinaryOp::Min: return launch_binary<BinaryOp::Min>(layout, a, b, out);
    case BinaryOp::Pow: return launch_binary<BinaryOp::Pow>(layout, a, b, out);
  }
  throw std::invalid_argument("cuda binary: unknown op");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
