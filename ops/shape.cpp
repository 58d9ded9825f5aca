// Layout ops: reshape, permute, narrow, expand (views: no data moves), contiguous, cat and
// stack (copies). Each backward is the adjoint layout change.
#include <numeric>

#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

Tensor reshape(const Tensor& x, const Shape& shape_in) {
  Shape shape = shape_in;
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("reshape", "only one -1 allowed in " + shape_str(shape_in));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      fail("reshape", "invalid target shape " + shape_str(shape_in));
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      fail("reshape", "target shape " + shape_str(shape_in) + " has more elements than fit in 64 bits");
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      fail("reshape", "cannot infer -1 reshaping " + shape_str(x.shape()) + " to " + shape_str(shape_in));
    shape[infer] = x.numel() / known;
  }
  if (shape_numel(shape) != x.numel())
    fail("reshape", "cannot reshape " + shape_str(x.shape()) + " (" + std::to_string(x.numel()) +
                        " elements) to " + shape_str(shape_in));
  Tensor base = x.contiguous();  // a view when x is already packed, else one copy
  Tensor y = base.as_strided(shape, contiguous_strides(shape), base.offset());
  return record_op(y, "reshape", {x}, [in = x.shape()](const Tensor& g) -> std::vector<Tensor> {
    return {reshape(g, in)};
  });
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  const int n = x.dim();
  if (static_cast<int>(order.size()) != n)
    fail("permute", "order has " + std::to_string(order.size()) + " axes for shape " + shape_str(x.shape()));
  std::vector<int> inverse(n, -1);
  Shape shape(n), strides(n);
  // course 02 begin: a permuted view: the same memory read through permuted strides, and the inverse order for its backward
  for (int i = 0; i < n; ++i) {
    const int d = wrap_dim("permute", order[i], n);
    if (inverse[d] >= 0) fail("permute", "axis " + std::to_string(d) + " appears twice in the order");
    inverse[d] = i;
    shape[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  // course 02 end
  Tensor y = x.as_strided(shape, strides, x.offset());
  return record_op(y, "permute", {x}, [inverse](const Tensor& g) -> std::vector<Tensor> {
    return {permute(g, inverse)};
  });
}

Tensor transpose(const Tensor& x, int d0, int d1) {
  std::vector<int> order(x.dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[wrap_dim("transpose", d0, x.dim())], order[wrap_dim("transpose", d1, x.dim())]);
  return permute(x, order);
}

Tensor narrow(const Tensor& x, int dim_in, std::int64_t start, std::int64_t length) {
  const int dim = wrap_dim("narrow", dim_in, x.dim());
  if (start < 0 || length < 0 || start + length > x.shape()[dim])
    fail("narrow", "range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                       ") out of bounds for axis " + std::to_string(dim) + " of " + shape_str(x.shape()));
  Shape shape = x.shape();
  shape[dim] = length;
  Tensor y = x.as_strided(shape, x.strides(), x.offset() + start * x.strides()[dim]);
  return record_op(y, "narrow", {x}, [in = x.shape(), dim, start, length](const Tensor& g) -> std::vector<Tensor> {
    Tensor gx = Tensor::zeros(in, g.dtype(), g.device());
    Tensor window = gx.as_strided(g.shape(), gx.strides(), start * gx.strides()[dim]);
    window.copy_(g);
    return {gx};
  });
}

std::vector<Tensor> unbind(const Tensor& x, int dim_in) {
  const int dim = wrap_dim("unbind", dim_in, x.dim());
  const std::int64_t n = x.shape()[dim], stride = x.strides()[dim];
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  std::vector<Tensor> slices;
  slices.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) slices.push_back(x.as_strided(shape, strides, x.offset() + i * stride));
  // One node for all slices: the input's gradient is assembled once, whatever the number
  // of slices (n narrows would each return one of the input's full size).
  return record_multi_op(std::move(slices), "unbind", {x},
                         [in = x.shape(), dim](const std::vector<Tensor>& g) -> std::vector<Tensor> {
                           Tensor gx;
                           for (std::size_t i = 0; i < g.size(); ++i) {
                             if (!g[i].defined()) continue;
                             if (!gx.defined()) gx = Tensor::zeros(in, g[i].dtype(), g[i].device());
                             Shape window_strides = gx.strides();
                             window_strides.erase(window_strides.begin() + dim);
                             gx.as_strided(g[i].shape(), window_strides, std::int64_t(i) * gx.strides()[dim]).copy_(g[i]);
                           }
                           return {gx};
                         });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  const int n = static_cast<int>(shape.size()), k = x.dim();
  if (n < k) fail("expand", "cannot expand " + shape_str(x.shape()) + " to fewer dims " + shape_str(shape));
  Shape out(n), strides(n);
  for (int i = 0; i < n; ++i) {
    if (i < n - k) {
      if (shape[i] < 0) fail("expand", "-1 is not allowed for a new leading axis in " + shape_str(shape));
      out[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    const int j = i - (n - k);
    const std::int64_t have = x.shape()[j];
    const std::int64_t want = shape[i] == -1 ? have : shape[i];
    if (want != have && have != 1)
      fail("expand", "cannot expand " + shape_str(x.shape()) + " to " + shape_str(shape) + " (axis " +
                         std::to_string(i) + " is " + std::to_string(have) + ", not 1)");
    out[i] = want;
    strides[i] = (have == 1 && want != 1) ? 0 : x.strides()[j];
  }
  Tensor y = x.as_strided(out, strides, x.offset());
  return record_op(y, "expand", {x}, [in = x.shape()](const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, in)};
  });
}

Tensor unsqueeze(const Tensor& x, int dim) {
  const int d = wrap_dim("unsqueeze", dim, x.dim() + 1);
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}

Tensor squeeze(const Tensor& x, int dim) {
  const int d = wrap_dim("squeeze", dim, x.dim());
  if (x.shape()[d] != 1) fail("squeeze", "axis " + std::to_string(dim) + " of " + shape_str(x.shape()) + " is not 1");
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return reshape(x, s);
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor y = x.clone();
  return record_op(y, "contiguous", {x}, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
}

Tensor cat(const std::vector<Tensor>& xs, int dim_in) {
  if (xs.empty()) fail("cat", "needs at least one tensor");
  check_same("cat", xs);
  const int dim = wrap_dim("cat", dim_in, xs[0].dim());
  Shape out_shape = xs[0].shape();
  out_shape[dim] = 0;
  for (const Tensor& t : xs) {
    if (t.dim() != xs[0].dim()) fail("cat", "tensors of different rank: " + shape_str(xs[0].shape()) + " and " + shape_str(t.shape()));
    for (int i = 0; i < t.dim(); ++i)
      if (i != dim && t.shape()[i] != xs[0].shape()[i])
        fail("cat", "shapes " + shape_str(xs[0].shape()) + " and " + shape_str(t.shape()) +
                        " differ outside axis " + std::to_string(dim));
    out_shape[dim] += t.shape()[dim];
  }
  Tensor out = Tensor::empty(out_shape, xs[0].dtype(), xs[0].device());
  std::vector<std::int64_t> starts;
  std::int64_t at = 0;
  for (const Tensor& t : xs) {
    starts.push_back(at);
    Tensor window = out.as_strided(t.shape(), out.strides(), at * out.strides()[dim]);
    window.copy_(t);
    at += t.shape()[dim];
  }
  std::vector<std::int64_t> lengths;
  for (const Tensor& t : xs) lengths.push_back(t.shape()[dim]);
  return record_op(out, "cat", xs, [dim, starts, lengths](const Tensor& g) -> std::vector<Tensor> {
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < starts.size(); ++i) grads.push_back(narrow(g, dim, starts[i], lengths[i]).contiguous());
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& xs, int dim) {
  if (xs.empty()) fail("stack", "needs at least one tensor");
  const int d = wrap_dim("stack", dim, xs[0].dim() + 1);
  std::vector<Tensor> expanded;
  for (const Tensor& t : xs) {
    if (t.shape() != xs[0].shape())
      fail("stack", "all tensors must have one shape, got " + shape_str(xs[0].shape()) + " and " + shape_str(t.shape()));
    expanded.push_back(unsqueeze(t, d));
  }
  return cat(expanded, d);
}

}  // namespace wedge::ops
