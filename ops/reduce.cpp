// Reductions (sum, mean, max) over axes, argmax (no gradient), and sum_to — the adjoint of
// broadcasting.
#include <algorithm>

#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

namespace {

// Sums (or maxes) one axis, keeping it as size 1. The input is viewed as a contiguous
// (outer, n, inner) block, which is the shape every reduce kernel takes.
Tensor reduce_axis(const std::string& op, kernels::ReduceOp kind, const Tensor& x_in, int dim,
                   Tensor* argmax) {
  Tensor x = x_in.contiguous();
  const Shape& s = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (int i = dim + 1; i < x.dim(); ++i) inner *= s[i];
  const std::int64_t n = s[dim];
  Shape out_shape = s;
  out_shape[dim] = 1;
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor idx;
  if (argmax != nullptr) idx = Tensor::empty(out_shape, DType::I32, x.device());
  if (n == 0 && kind == kernels::ReduceOp::Max) fail(op, "cannot take the max over an empty axis of " + x.str());
  dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    if (y.numel() == 0) return;
    need(op, table<T>(op, x).reduce, x)(kind, x.data<T>(), y.data<T>(),
                                        argmax ? idx.data<std::int32_t>() : nullptr, outer, n, inner);
  });
  if (argmax != nullptr) *argmax = idx;
  return y;
}

std::vector<int> normalise_dims(const std::string& op, const std::vector<int>& dims, int ndim) {
  std::vector<int> out;
  for (int d : dims) out.push_back(wrap_dim(op, d, ndim));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) fail(op, "an axis is listed twice");
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims_in, bool keepdim) {
  check_floating("sum", x);
  const std::vector<int> dims = normalise_dims("sum", dims_in, x.dim());
  Tensor y = x.detach();
  {
    // The axis reductions below are plain kernel calls; one Node covers the whole op.
    NoGradGuard no_grad;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it)
      y = reduce_axis("sum", kernels::ReduceOp::Sum, y, *it, nullptr);
    if (dims.empty()) y = y.contiguous().clone();
    if (!keepdim) {
      Shape s;
      for (int i = 0; i < x.dim(); ++i)
        if (!std::binary_search(dims.begin(), dims.end(), i)) s.push_back(x.shape()[i]);
      y = reshape(y, s);
    }
  }
  const Shape in_shape = x.shape();
  Shape kept = in_shape;
  for (int d : dims) kept[d] = 1;
  return record_op(y, "sum", {x}, [in_shape, kept](const Tensor& g) -> std::vector<Tensor> {
    return {contiguous(expand(reshape(g, kept), in_shape))};
  });
}

Tensor sum(const Tensor& x) {
  std::vector<int> all(x.dim());
  for (int i = 0; i < x.dim(); ++i) all[i] = i;
  return sum(x, all, false);
}

Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  std::int64_t count = 1;
  for (int d : dims) count *= x.shape()[wrap_dim("mean", d, x.dim())];
  if (count == 0) fail("mean", "mean over an empty axis of " + x.str());
  return mul_scalar(sum(x, dims, keepdim), 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& x) {
  if (x.numel() == 0) fail("mean", "mean of an empty tensor " + x.str());
  return mul_scalar(sum(x), 1.0 / static_cast<double>(x.numel()));
}

Tensor max(const Tensor& x, int dim_in, bool keepdim) {
  check_floating("max", x);
  const int dim = wrap_dim("max", dim_in, x.dim());
  Tensor idx;
  Tensor y = reduce_axis("max", kernels::ReduceOp::Max, x, dim, &idx);
  if (!keepdim) {
    Shape s = x.shape();
    s.erase(s.begin() + dim);
    NoGradGuard no_grad;
    y = reshape(y, s);
  }
  // Backward routes the gradient to the first maximum of each slice. This is a scatter
  // that no model uses in its hot path, so it is done on the host and copied back.
  return record_op(y, "max", {x}, [shape = x.shape(), dim, idx](const Tensor& g) -> std::vector<Tensor> {
    Tensor gh = g.to(Device::cpu()).contiguous().to(DType::F64);
    std::vector<double> gv = gh.to_vector<double>();
    std::vector<std::int32_t> iv = idx.to_vector<std::int32_t>();
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < dim; ++i) outer *= shape[i];
    for (std::size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
    const std::int64_t n = shape[dim];
    std::vector<double> gx(shape_numel(shape), 0.0);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i)
        gx[(o * n + iv[o * inner + i]) * inner + i] = gv[o * inner + i];
    return {Tensor::from_vector(gx, shape).to(g.dtype()).to(g.device())};
  });
}

Tensor argmax(const Tensor& x, int dim_in) {
  check_floating("argmax", x);
  const int dim = wrap_dim("argmax", dim_in, x.dim());
  // The max reduction's kernel already writes the index of each slice's first maximum
  // (a NaN counting as the largest value); the maxima themselves are dropped. Integer
  // indices have no gradient, so nothing is recorded, whatever x requires.
  NoGradGuard no_grad;
  Tensor idx;
  reduce_axis("argmax", kernels::ReduceOp::Max, x.detach(), dim, &idx);
  Shape s = x.shape();
  s.erase(s.begin() + dim);
  return idx.as_strided(s, contiguous_strides(s), 0);  // idx is fresh and packed: a view drops the axis
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int n = x.dim(), k = static_cast<int>(shape.size());
  if (k > n) fail("sum_to", "cannot sum " + x.str() + " down to the larger shape " + shape_str(shape));
  std::vector<int> dims;
  // course 03 begin: broadcasting: the result shape, the zero strides that read an operand as if expanded, and sum_to (the adjoint)
  for (int i = 0; i < n; ++i) {
    if (i < n - k) {
      dims.push_back(i);
    } else {
      const std::int64_t target = shape[i - (n - k)];
      if (target == 1 && x.shape()[i] != 1) dims.push_back(i);
      else if (target != x.shape()[i])
        fail("sum_to", "cannot sum " + x.str() + " down to " + shape_str(shape));
    }
  }
  // course 03 end
  return reshape(sum(x, dims, true), shape);
}

}  // namespace wedge::ops
