// Element-wise ops: broadcasting binary arithmetic and the unary maps, each with its
// backward right below its forward.
#include <algorithm>

#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;
using kernels::BinaryOp;
using kernels::UnaryOp;

// ---- broadcasting binary ops -----------------------------------------------------------

namespace {

Shape broadcast_shapes(const std::string& op, const Shape& a, const Shape& b) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  // course 03 begin: broadcasting: the result shape, the zero strides that read an operand as if expanded, and sum_to (the adjoint)
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, "cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  // course 03 end
  return out;
}

// Strides that read `t` as if expanded to `out` (0 along broadcast axes).
void broadcast_strides(const Tensor& t, const Shape& out, std::int64_t* strides) {
  const std::size_t n = out.size(), k = t.shape().size();
  // course 03 begin: broadcasting: the result shape, the zero strides that read an operand as if expanded, and sum_to (the adjoint)
  for (std::size_t i = 0; i < n; ++i) {
    if (i < n - k) {
      strides[i] = 0;
    } else {
      const std::size_t j = i - (n - k);
      strides[i] = t.shape()[j] == 1 ? 0 : t.strides()[j];
    }
  }
  // course 03 end
}

Tensor binary_forward(const std::string& op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  check_floating(op, a, "a");
  check_floating(op, b, "b");
  check_same(op, {a, b});
  const Shape out_shape = broadcast_shapes(op, a.shape(), b.shape());
  if (out_shape.size() > static_cast<std::size_t>(kernels::kMaxDims))
    fail(op, "more than " + std::to_string(kernels::kMaxDims) + " dims: " + shape_str(out_shape));
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  kernels::BroadcastLayout l;
  if (out_shape.empty()) {
    l.ndim = 1;
    l.shape[0] = 1;
    l.stride_a[0] = l.stride_b[0] = 0;
  } else {
    l.ndim = static_cast<int>(out_shape.size());
    std::copy(out_shape.begin(), out_shape.end(), l.shape);
    broadcast_strides(a, out_shape, l.stride_a);
    broadcast_strides(b, out_shape, l.stride_b);
  }
  l = kernels::coalesce(l);
  dispatch_float(op, a, [&](auto tag) {
    using T = decltype(tag);
    need(op, table<T>(op, a).binary, a)(kind, l, a.data<T>(), b.data<T>(), out.data<T>());
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("add", BinaryOp::Add, a, b);
  const Shape sa = a.shape(), sb = b.shape();
  return record_op(out, "add", {a, b}, [sa, sb](const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, sa), sum_to(g, sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("sub", BinaryOp::Sub, a, b);
  const Shape sa = a.shape(), sb = b.shape();
  return record_op(out, "sub", {a, b}, [sa, sb](const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, sa), sum_to(neg(g), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("mul", BinaryOp::Mul, a, b);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return record_op(out, "mul", {a, b}, [sa = saved(a), sb = saved(b), ga, gb](const Tensor& g) -> std::vector<Tensor> {
    // course 05 begin: the backward of a broadcasting element-wise product
    return {ga ? sum_to(mul(g, sb), sa.shape()) : Tensor(), gb ? sum_to(mul(g, sa), sb.shape()) : Tensor()};
    // course 05 end
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward("div", BinaryOp::Div, a, b);
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  return record_op(out, "div", {a, b}, [sa = saved(a), sb = saved(b), ga, gb](const Tensor& g) -> std::vector<Tensor> {
    // d(a/b)/da = 1/b;  d(a/b)/db = -a/b^2
    Tensor gb_full = gb ? neg(div(mul(g, sa), mul(sb, sb))) : Tensor();
    return {ga ? sum_to(div(g, sb), sa.shape()) : Tensor(), gb ? sum_to(gb_full, sb.shape()) : Tensor()};
  });
}

// ---- unary maps -----------------------------------------------------------------------------

namespace {

Tensor unary_op(const std::string& op, UnaryOp kind, const Tensor& x_in, double param) {
  check_floating(op, x_in);
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() > 0)
      need(op, table<T>(op, x).unary, x)(kind, static_cast<T>(param), x.data<T>(), y.data<T>(), x.numel());
  });
  return record_op(y, op, {x_in}, [op, kind, param, sx = saved(x), sy = saved(y)](const Tensor& g_in) -> std::vector<Tensor> {
    Tensor g = g_in.contiguous();
    Tensor gx = Tensor::empty(sx.shape(), sx.dtype(), sx.device());
    dispatch_float(op, sx, [&](auto tag) {
      using T = decltype(tag);
      if (sx.numel() > 0)
        need(op, table<T>(op, sx).unary_backward, sx)(kind, static_cast<T>(param), sx.data<T>(), sy.data<T>(),
                                                      g.data<T>(), gx.data<T>(), sx.numel(), false);
    });
    return {gx};
  });
}

}  // namespace

Tensor add_scalar(const Tensor& x, double c) { return unary_op("add_scalar", UnaryOp::AddScalar, x, c); }
Tensor mul_scalar(const Tensor& x, double c) { return unary_op("mul_scalar", UnaryOp::MulScalar, x, c); }
Tensor pow_scalar(const Tensor& x, double c) { return unary_op("pow_scalar", UnaryOp::PowScalar, x, c); }
Tensor neg(const Tensor& x) { return unary_op("neg", UnaryOp::Neg, x, 0); }
Tensor abs(const Tensor& x) { return unary_op("abs", UnaryOp::Abs, x, 0); }
Tensor exp(const Tensor& x) { return unary_op("exp", UnaryOp::Exp, x, 0); }
Tensor log(const Tensor& x) { return unary_op("log", UnaryOp::Log, x, 0); }
Tensor sqrt(const Tensor& x) { return unary_op("sqrt", UnaryOp::Sqrt, x, 0); }
Tensor tanh(const Tensor& x) { return unary_op("tanh", UnaryOp::Tanh, x, 0); }
Tensor sigmoid(const Tensor& x) { return unary_op("sigmoid", UnaryOp::Sigmoid, x, 0); }
Tensor relu(const Tensor& x) { return unary_op("relu", UnaryOp::Relu, x, 0); }
Tensor gelu(const Tensor& x) { return unary_op("gelu", UnaryOp::Gelu, x, 0); }
Tensor silu(const Tensor& x) { return unary_op("silu", UnaryOp::Silu, x, 0); }
Tensor softplus(const Tensor& x) { return unary_op("softplus", UnaryOp::Softplus, x, 0); }

}  // namespace wedge::ops
