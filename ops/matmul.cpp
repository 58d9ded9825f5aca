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


// ---- the tied head and its loss, in row blocks -------------------------------------------

namespace {

// C (m, n) = alpha op(A) op(B) + beta C, A and B contiguous with their natural ld.
template <typename T>
void gemm_2d(const std::string& op, const Tensor& on, kernels::Trans ta, kernels::Trans tb, std::int64_t m,
             std::int64_t n, std::int64_t k, const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c,
             std::int64_t ldc, T beta) {
  kernels::GemmArgs<T> g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = 1;
  g.beta = beta;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  g.precision = gemm_precision<T>();
  need(op, table<T>(op, on).gemm, on)(g);
  count_flops(m, n, k, 1);
}

}  // namespace

std::int64_t linear_cross_entropy_block_rows(std::int64_t vocab, std::int64_t element_bytes) {
  // One block of logits in at most 64 MiB (512 rows of a 30,522-token vocabulary in fp32),
  // a multiple of 64 rows when it holds that many: a fixed function of the shape, so the
  // sums are the same for any thread count.
  constexpr std::int64_t kBlockBytes = std::int64_t{64} << 20;
  const std::int64_t rows = std::max<std::int64_t>(1, kBlockBytes / std::max<std::int64_t>(1, vocab * element_bytes));
  return rows >= 64 ? rows / 64 * 64 : rows;
}

Tensor linear_cross_entropy(const Tensor& x_in, const Tensor& weight_in, const Tensor& targets_in, int ignore_index,
                            std::int64_t block_rows) {
  const std::string op = "linear_cross_entropy";
  check_linear(op, x_in, weight_in, Tensor());
  if (!targets_in.defined() || targets_in.dtype() != DType::I32)
    fail(op, "targets must be int32, got " + targets_in.str());
  const std::int64_t d = weight_in.size(1), V = weight_in.size(0);
  const std::int64_t rows = d == 0 ? 0 : x_in.numel() / d;
  if (targets_in.numel() != rows)
    fail(op, "input " + shape_str(x_in.shape()) + " gives " + std::to_string(rows) + " rows but targets " +
                 shape_str(targets_in.shape()) + " has " + std::to_string(targets_in.numel()));
  if (V == 0) fail(op, "weight " + shape_str(weight_in.shape()) + " has no classes");
  if (block_rows < 0) fail(op, "block_rows must be >= 0 (0: chosen from the vocabulary), got " + std::to_string(block_rows));
  Tensor x, w;
  {
    NoGradGuard no_grad;  // views for the kernels; the graph is this op's own node
    x = reshape(x_in, {rows, d}).contiguous();
    w = weight_in.contiguous();
  }
  const Device device = x.device();
  // The targets on the host: their range is checked, and each block's share of the mean
  // is known without reading device scalars back one block at a time.
  const std::vector<std::int32_t> t_host = targets_in.to(Device::cpu()).contiguous().to_vector<std::int32_t>();
  for (std::int64_t i = 0; i < rows; ++i)
    if (t_host[i] != ignore_index && (t_host[i] < 0 || t_host[i] >= V))
      fail(op, "target " + std::to_string(t_host[i]) + " at row " + std::to_string(i) + " is outside [0, " +
                   std::to_string(V) + ")");
  const Tensor targets = targets_in.contiguous().to(device);
  const std::int64_t R = std::min(std::max<std::int64_t>(rows, 1), block_rows > 0 ? block_rows
                                                                 : linear_cross_entropy_block_rows(V, std::int64_t(dtype_size(x.dtype()))));
  const std::int64_t blocks = (rows + R - 1) / R;
  std::int64_t counted = 0;
  std::vector<std::int64_t> block_counted(static_cast<std::size_t>(blocks), 0);
  for (std::int64_t i = 0; i < rows; ++i)
    if (t_host[i] != ignore_index) ++block_counted[static_cast<std::size_t>(i / R)], ++counted;

  // With a gradient to give, the loss is the last node of the graph, so its gradient with
  // respect to each block of logits, (softmax - onehot) / count, is known now: each block
  // goes straight on into gx and gW, and the backward only scales them by the incoming
  // gradient. No (rows, V) tensor ever exists whole.
  const bool grad_x = grad_enabled() && x_in.requires_grad();
  const bool grad_w = grad_enabled() && weight_in.requires_grad();
  Tensor logits = Tensor::empty({R, V}, x.dtype(), device);
  Tensor lse = Tensor::empty({R}, x.dtype(), device);
  Tensor block_loss = Tensor::zeros({blocks}, x.dtype(), device);
  Tensor block_count = Tensor::empty({blocks}, x.dtype(), device);
  Tensor total_count = Tensor::full({}, static_cast<double>(counted), x.dtype(), device);
  Tensor one = Tensor::full({}, 1.0, x.dtype(), device);
  Tensor gx = grad_x ? Tensor::empty({rows, d}, x.dtype(), device) : Tensor();
  Tensor gw = grad_w ? Tensor::zeros({V, d}, x.dtype(), device) : Tensor();
  dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    const auto& tab = table<T>(op, x);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t r0 = b * R, n = std::min(R, rows - r0);
      const T* xb = x.data<T>() + r0 * d;
      const std::int32_t* tb = targets.data<std::int32_t>() + r0;
      T* lb = logits.data<T>();
      gemm_2d<T>(op, x, kernels::Trans::N, kernels::Trans::T, n, V, d, xb, d, w.data<T>(), d, lb, V, T(0));
      need(op, tab.cross_entropy_forward, x)(lb, tb, n, V, ignore_index, lse.data<T>(), block_loss.data<T>() + b,
                                            block_count.data<T>() + b);
      if (!grad_x && !grad_w) continue;
      // The block's logits become their gradient in place.
      need(op, tab.cross_entropy_backward, x)(lb, tb, lse.data<T>(), total_count.data<T>(), one.data<T>(), n, V,
                                             ignore_index, lb);
      if (grad_x)  // gx rows = G W
        gemm_2d<T>(op, x, kernels::Trans::N, kernels::Trans::N, n, d, V, lb, V, w.data<T>(), d, gx.data<T>() + r0 * d, d,
                   T(0));
      if (grad_w)  // gW += G^T x rows
        gemm_2d<T>(op, x, kernels::Trans::T, kernels::Trans::N, V, d, n, lb, V, xb, d, gw.data<T>(), d, T(b == 0 ? 0 : 1));
    }
  });
  // The mean over every counted row: each block's mean weighted by its share of them.
  std::vector<double> shares(static_cast<std::size_t>(blocks), 0.0);
  for (std::int64_t b = 0; b < blocks; ++b)
    shares[static_cast<std::size_t>(b)] = counted > 0 ? double(block_counted[static_cast<std::size_t>(b)]) / double(counted) : 0.0;
  Tensor loss;
  {
    NoGradGuard no_grad;
    loss = sum(mul(block_loss, Tensor::from_vector(shares, {blocks}).to(x.dtype()).to(device)));
  }
  return record_op(loss, op, {x_in, weight_in},
                   [sgx = saved(gx), sgw = saved(gw), shape = x_in.shape()](const Tensor& g) -> std::vector<Tensor> {
                     const Tensor scale = g.contiguous();
                     return {sgx.defined() ? reshape(mul(sgx, scale), shape) : Tensor(),
                             sgw.defined() ? mul(sgw, scale) : Tensor()};
                   });
}

}  // namespace wedge::ops
