// matmul and linear: every product becomes one (batched) GEMM call. A transposed view
// (the stride pattern a permute/transpose leaves) is passed to the GEMM as Trans::T
// instead of being copied, so backward's A^T dC and dC B^T cost no extra memory traffic.
// Every GEMM runs in the thread's matmul_precision() (engine/precision.h); a backward runs
// its GEMMs in the precision its forward ran in.
#include <atomic>
#include <type_traits>

#include "engine/precision.h"
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

std::atomic<std::uint64_t> g_matmul_flops{0};

void count_flops(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) {
  g_matmul_flops.fetch_add(static_cast<std::uint64_t>(2 * m * n * k * batch), std::memory_order_relaxed);
}

// The precision of this thread's products: bf16 applies to float GEMMs only.
template <typename T>
kernels::Precision gemm_precision() {
  return std::is_same_v<T, float> ? matmul_precision() : kernels::Precision::F32;
}

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
    g.precision = gemm_precision<T>();
    need(op, table<T>(op, a).gemm, a)(g);
    count_flops(m, n, k, batch);
  });
  return out;
}

}  // namespace

std::uint64_t matmul_flops() { return g_matmul_flops.load(std::memory_order_relaxed); }

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
  return record_op(out, "matmul", {a, b}, [sa = saved(a), sb = saved(b), b_shared,
                                          precision = matmul_precision()](const Tensor& g) -> std::vector<Tensor> {
    MatmulPrecisionGuard as_forward(precision);
    // course 06 begin: the backward of a (batched) matrix product, B shared or not
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
    // course 06 end
  });
}

namespace {

void check_linear(const std::string& op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating(op, x, "x");
  check_floating(op, weight, "weight");
  check_same(op, {x, weight, bias});
  if (weight.dim() != 2) fail(op, "weight must be (out, in), got " + shape_str(weight.shape()));
  if (x.dim() < 1 || x.size(-1) != weight.size(1))
    fail(op, "input " + shape_str(x.shape()) + " does not end in in_features " + std::to_string(weight.size(1)) +
                 " of weight " + shape_str(weight.shape()));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    fail(op, "bias " + shape_str(bias.shape()) + " does not match out_features " + std::to_string(weight.size(0)));
}

// out = act(x W^T + b) as ONE GEMM whose epilogue adds the bias and applies the
// activation while each tile of the output is in cache; under GELU, `aux` receives the
// pre-activation (for backward). x2 and w are contiguous.
void linear_forward(const std::string& op, const Tensor& x2, const Tensor& w, const Tensor& bias,
                    kernels::Activation act, Tensor& out, Tensor& aux) {
  const std::int64_t in = w.size(1), outf = w.size(0);
  const std::int64_t rows = x2.numel() / std::max<std::int64_t>(in, 1);
  if (out.numel() == 0) return;
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  dispatch_float(op, x2, [&](auto tag) {
    using T = decltype(tag);
    kernels::GemmArgs<T> g;
    g.trans_a = kernels::Trans::N;
    g.trans_b = kernels::Trans::T;
    g.m = rows;
    g.n = outf;
    g.k = in;
    g.a = x2.data<T>();
    g.lda = std::max<std::int64_t>(in, 1);
    g.b = w.data<T>();
    g.ldb = std::max<std::int64_t>(in, 1);
    g.c = out.data<T>();
    g.ldc = outf;
    g.bias = b.defined() ? b.data<T>() : nullptr;
    g.act = act;
    g.aux = aux.defined() ? aux.data<T>() : nullptr;
    g.precision = gemm_precision<T>();
    need(op, table<T>(op, x2).gemm, x2)(g);
    count_flops(rows, outf, in, 1);
  });
}

// The epilogue's backward on g2 (rows, outf): gh (= g2 without an activation) and the
// bias gradient, in one pass.
std::pair<Tensor, Tensor> epilogue_backward(const std::string& op, kernels::Activation act, const Tensor& aux,
                                            const Tensor& g2, bool has_bias) {
  const std::int64_t rows = g2.size(0), outf = g2.size(1);
  Tensor gy = g2.contiguous();
  Tensor gh = act == kernels::Activation::None ? gy : Tensor::empty(gy.shape(), gy.dtype(), gy.device());
  Tensor gb = has_bias ? Tensor::empty({outf}, gy.dtype(), gy.device()) : Tensor();
  if (act != kernels::Activation::None || has_bias) {
    dispatch_float(op, gy, [&](auto tag) {
      using T = decltype(tag);
      need(op, table<T>(op, gy).bias_act_backward, gy)(
          act, aux.defined() ? aux.data<T>() : nullptr, gy.data<T>(), rows, outf,
          act == kernels::Activation::None ? nullptr : gh.data<T>(), has_bias ? gb.data<T>() : nullptr);
    });
  }
  return {gh, gb};
}

Tensor linear_act(const std::string& op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  kernels::Activation act) {
  check_linear(op, x, weight, bias);
  const std::int64_t in = weight.size(1), outf = weight.size(0);
  Tensor x2 = x.contiguous();
  Shape out_shape = x.shape();
  out_shape.back() = outf;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor aux = act == kernels::Activation::None ? Tensor() : Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor w = weight.contiguous();
  linear_forward(op, x2, w, bias, act, out, aux);
  const bool has_bias = bias.defined();
  return record_op(out, op, {x, weight, bias},
                   [op, sx = saved(x2), sw = saved(w), saux = saved(aux), act, has_bias, in, outf,
                    precision = matmul_precision()](const Tensor& g) -> std::vector<Tensor> {
                     MatmulPrecisionGuard as_forward(precision);
                     auto [gh, gb] = epilogue_backward(op, act, saux, reshape(g, {-1, outf}), has_bias);
                     Tensor x2 = reshape(sx, {-1, in});
                     Tensor gx = reshape(matmul(gh, sw), sx.shape());  // dX = dH W
                     Tensor gw = matmul(transpose(gh, 0, 1), x2);      // dW = dH^T X
                     return {gx, gw, gb};                               // db = sum_rows dH
                   });
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_act("linear", x, weight, bias, kernels::Activation::None);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_act("linear_gelu", x, weight, bias, kernels::Activation::Gelu);
}

}  // namespace wedge::ops
