// matmul and linear: every product becomes one (batched) GEMM call. A transposed view
// (the stride pattern a permute/transpose leaves) is passed to the GEMM as Trans::T
// instead of being copied, so backward's A^T dC and dC B^T cost no extra memory traffic.
#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

namespace {

// How a GEMM reads the last two axes of a tensor (rows x cols as seen by the op).
struct Operand {
  Tensor base;  // the tensor whose memory is read
  kernels::Trans trans = kernels::Trans::N;
  std::int64_t ld = 0;
  std::int64_t batch_stride = 0;  // 0: one matrix shared by the whole batch
};

// Views x (..., rows, cols) as `batch` matrices. Copies only when the layout cannot be
// described by (trans, ld, one batch stride).
Operand as_operand(const Tensor& x, std::int64_t batch) {
  const int n = x.dim();
  const std::int64_t rows = x.shape()[n - 2], cols = x.shape()[n - 1];
  const std::int64_t rs = x.strides()[n - 2], cs = x.strides()[n - 1];
  // One uniform stride over the (flattened) batch axes?
  std::int64_t bstride = 0;
  bool batch_ok = true;
  if (n > 2) {
    bstride = x.strides()[n - 3];
    for (int i = n - 4; i >= 0; --i)
      if (x.shape()[i + 1] != 1 && x.strides()[i] != x.strides()[i + 1] * x.shape()[i + 1]) batch_ok = false;
    if (x.shape()[n - 3] == 1 && n == 3) bstride = 0;
  }
  if (batch == 1) bstride = 0;
  if (batch_ok) {
    if (cs == 1 && rs >= std::max<std::int64_t>(cols, 1)) return {x, kernels::Trans::N, rs, bstride};
    if (rs == 1 && cs >= std::max<std::int64_t>(rows, 1)) return {x, kernels::Trans::T, cs, bstride};
    if (rows == 1 && cs == 1) return {x, kernels::Trans::N, std::max<std::int64_t>(cols, 1), bstride};
    if (cols == 1 && rs == 1) return {x, kernels::Trans::T, std::max<std::int64_t>(rows, 1), bstride};
  }
  Tensor c = x.contiguous();
  return {c, kernels::Trans::N, std::max<std::int64_t>(cols, 1), batch == 1 ? 0 : rows * cols};
}

// out (batch, m, n) = a (batch|1, m, k) @ b (batch|1, k, n), written into a fresh tensor.
Tensor gemm_forward(const std::string& op, const Tensor& a, const Tensor& b, const Shape& out_shape,
                    std::int64_t batch, bool b_shared) {
  const std::int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1], n = b.shape()[b.dim() - 1];
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {
    out.fill_(0.0);
    return out;
  }
  Operand oa = as_operand(a, batch);
  Operand ob = as_operand(b, b_shared ? 1 : batch);
  dispatch_float(op, a, [&](auto tag) {
    using T = decltype(tag);
    kernels::GemmArgs<T> g;
    g.trans_a = oa.trans;
    g.trans_b = ob.trans;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = 1;
    g.beta = 0;
    g.a = oa.base.template data<T>();
    g.lda = oa.ld;
    g.stride_a = oa.batch_stride;
    g.b = ob.base.template data<T>();
    g.ldb = ob.ld;
    g.stride_b = b_shared ? 0 : ob.batch_stride;
    g.c = out.data<T>();
    g.ldc = n;
    g.stride_c = m * n;
    g.batch = batch;
    need(op, table<T>(op, a).gemm, a)(g);
  });
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_floating("matmul", a, "a");
  check_floating("matmul", b, "b");
  check_same("matmul", {a, b});
  if (a.dim() < 2 || b.dim() < 2)
    fail("matmul", "needs at least 2-D operands, got " + shape_str(a.shape()) + " and " + shape_str(b.shape()));
  const std::int64_t m = a.size(-2), k = a.size(-1), k2 = b.size(-2), n = b.size(-1);
  if (k != k2)
    fail("matmul", "inner dimensions differ: " + shape_str(a.shape()) + " @ " + shape_str(b.shape()));
  const bool b_shared = b.dim() == 2;
  if (!b_shared) {
    if (b.dim() != a.dim())
      fail("matmul", "batched operands must have the same rank (or b 2-D): " + shape_str(a.shape()) + " @ " + shape_str(b.shape()));
    for (int i = 0; i < a.dim() - 2; ++i)
      if (a.shape()[i] != b.shape()[i])
        fail("matmul", "batch dimensions differ: " + shape_str(a.shape()) + " @ " + shape_str(b.shape()));
  }
  Shape out_shape(a.shape().begin(), a.shape().end() - 2);
  std::int64_t batch = shape_numel(out_shape);
  out_shape.push_back(m);
  out_shape.push_back(n);
  // With b shared and a batched, the batch folds into the rows of a single GEMM when a's
  // rows are evenly strided (the common case: x (B, L, d) @ W).
  Tensor out;
  if (b_shared && a.dim() > 2 && a.is_contiguous()) {
    Tensor a2 = a.as_strided({batch * m, k}, {k, 1}, a.offset());
    out = gemm_forward("matmul", a2, b, {batch * m, n}, 1, true);
    out = out.as_strided(out_shape, contiguous_strides(out_shape), 0);
  } else {
    out = gemm_forward("matmul", a, b, out_shape, batch, b_shared);
  }
  return record_op(out, "matmul", {a, b}, [sa = saved(a), sb = saved(b), b_shared](const Tensor& g) -> std::vector<Tensor> {
    // C = A B  =>  dA = dC B^T,  dB = A^T dC (summed over the batch when B was shared).
    Tensor ga = matmul(g, transpose(sb, -1, -2));
    Tensor gb;
    if (b_shared && sa.dim() > 2) {
      const std::int64_t k = sa.size(-1), n = g.size(-1);
      Tensor a2 = reshape(sa, {-1, k});
      Tensor g2 = reshape(g, {-1, n});
      gb = matmul(transpose(a2, 0, 1), g2);
    } else {
      gb = matmul(transpose(sa, -1, -2), g);
    }
    return {ga, gb};
  });
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating("linear", x, "x");
  check_floating("linear", weight, "weight");
  check_same("linear", {x, weight, bias});
  if (weight.dim() != 2) fail("linear", "weight must be (out, in), got " + shape_str(weight.shape()));
  if (x.dim() < 1 || x.size(-1) != weight.size(1))
    fail("linear", "input " + shape_str(x.shape()) + " does not end in in_features " + std::to_string(weight.size(1)) +
                       " of weight " + shape_str(weight.shape()));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    fail("linear", "bias " + shape_str(bias.shape()) + " does not match out_features " + std::to_string(weight.size(0)));
  const std::int64_t in = weight.size(1), outf = weight.size(0);
  Tensor x2 = x.contiguous();
  const std::int64_t rows = x2.numel() / std::max<std::int64_t>(in, 1);
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor w = weight.contiguous();
  if (out.numel() > 0) {
    // y = bias (broadcast over rows), then y += x W^T in the same GEMM (beta = 1).
    if (bias.defined()) {
      Tensor rows_view = out.as_strided({rows, outf}, {outf, 1}, 0);
      rows_view.copy_(bias.as_strided({rows, outf}, {0, bias.strides()[0]}, bias.offset()));
    }
    dispatch_float("linear", x, [&](auto tag) {
      using T = decltype(tag);
      kernels::GemmArgs<T> g;
      g.trans_a = kernels::Trans::N;
      g.trans_b = kernels::Trans::T;
      g.m = rows;
      g.n = outf;
      g.k = in;
      g.beta = bias.defined() ? T(1) : T(0);
      g.a = x2.data<T>();
      g.lda = std::max<std::int64_t>(in, 1);
      g.b = w.data<T>();
      g.ldb = std::max<std::int64_t>(in, 1);
      g.c = out.data<T>();
      g.ldc = outf;
      if (in == 0) {
        if (!bias.defined()) out.fill_(0.0);
        return;
      }
      need("linear", table<T>("linear", x).gemm, x)(g);
    });
  }
  const bool has_bias = bias.defined();
  return record_op(out, "linear", {x, weight, bias},
                   [sx = saved(x2), sw = saved(w), has_bias, in, outf](const Tensor& g) -> std::vector<Tensor> {
                     Tensor g2 = reshape(g, {-1, outf});
                     Tensor x2 = reshape(sx, {-1, in});
                     Tensor gx = reshape(matmul(g2, sw), sx.shape());          // dX = dY W
                     Tensor gw = matmul(transpose(g2, 0, 1), x2);              // dW = dY^T X
                     Tensor gb = has_bias ? sum(g2, {0}, false) : Tensor();    // db = sum_rows dY
                     return {gx, gw, gb};
                   });
}

}  // namespace wedge::ops
