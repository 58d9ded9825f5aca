// Neural-network ops with their own kernels: embedding, softmax / log_softmax,
// cross-entropy, layer norm and dropout. Each forward saves exactly what its backward
// kernel needs (cross-entropy keeps one log-sum-exp per row, never a probability tensor;
// dropout keeps nothing but its (seed, offset)). And mse_loss, composed of other ops.
#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

// ---- embedding -------------------------------------------------------------------------------

Tensor embedding(const Tensor& table_in, const Tensor& ids_in) {
  check_floating("embedding", table_in, "table");
  if (!ids_in.defined() || ids_in.dtype() != DType::I32)
    fail("embedding", "ids must be int32, got " + ids_in.str());
  if (table_in.dim() != 2) fail("embedding", "table must be (V, D), got " + shape_str(table_in.shape()));
  if (ids_in.device() != table_in.device())
    fail("embedding", "ids " + ids_in.str() + " and table " + table_in.str() + " are on different devices");
  const std::int64_t V = table_in.size(0), D = table_in.size(1), n = ids_in.numel();
  Tensor ids = ids_in.contiguous();
  Tensor tab = table_in.contiguous();
  if (ids.device().is_cpu()) {
    // Out-of-range ids are a user error worth naming; on other devices the check would
    // cost a synchronisation, so the data loaders guarantee the range there.
    const std::int32_t* p = ids.data<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i)
      if (p[i] < 0 || p[i] >= V)
        fail("embedding", "id " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                              " is outside the table of " + std::to_string(V) + " rows");
  }
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor out = Tensor::empty(out_shape, tab.dtype(), tab.device());
  dispatch_float("embedding", tab, [&](auto tag) {
    using T = decltype(tag);
    if (out.numel() > 0)
      need("embedding", table<T>("embedding", tab).embedding_forward, tab)(tab.data<T>(), ids.data<std::int32_t>(), n, V, D,
                                                                           out.data<T>());
  });
  return record_op(out, "embedding", {table_in}, [sids = saved(ids), V, D, dt = tab.dtype()](const Tensor& g_in) -> std::vector<Tensor> {
    Tensor g = g_in.contiguous();
    Tensor gt = Tensor::empty({V, D}, dt, g.device());
    dispatch_float("embedding", g, [&](auto tag) {
      using T = decltype(tag);
      need("embedding", table<T>("embedding", g).embedding_backward, g)(sids.data<std::int32_t>(), g.data<T>(), sids.numel(),
                                                                         V, D, gt.data<T>());
    });
    return {gt};
  });
}

// ---- softmax / log_softmax -------------------------------------------------------------------

namespace {

// The kernels work on the last axis; another axis is moved there and back.
Tensor softmax_impl(const std::string& op, const Tensor& x_in, int dim_in, bool log) {
  check_floating(op, x_in);
  const int dim = wrap_dim(op, dim_in, x_in.dim());
  const int last = x_in.dim() - 1;
  if (dim != last) {
    // transpose is differentiable, so the graph goes through the moves.
    return transpose(softmax_impl(op, transpose(x_in, dim, last), last, log), dim, last);
  }
  Tensor x = x_in.contiguous();
  const std::int64_t n = x.size(-1), rows = n == 0 ? 0 : x.numel() / n;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0) need(op, table<T>(op, x).softmax_forward, x)(x.data<T>(), y.data<T>(), rows, n, log);
  });
  return record_op(y, op, {x_in}, [op, sy = saved(y), rows, n, log](const Tensor& g_in) -> std::vector<Tensor> {
    Tensor g = g_in.contiguous();
    Tensor gx = Tensor::empty(sy.shape(), sy.dtype(), sy.device());
    dispatch_float(op, sy, [&](auto tag) {
      using T = decltype(tag);
      if (rows > 0)
        need(op, table<T>(op, sy).softmax_backward, sy)(sy.data<T>(), g.data<T>(), gx.data<T>(), rows, n, log);
    });
    return {gx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_impl("softmax", x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_impl("log_softmax", x, dim, true); }

// ---- cross-entropy -----------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, int ignore_index) {
  check_floating("cross_entropy", logits_in, "logits");
  if (!targets_in.defined() || targets_in.dtype() != DType::I32)
    fail("cross_entropy", "targets must be int32, got " + targets_in.str());
  if (logits_in.dim() < 1) fail("cross_entropy", "logits must have a class axis, got " + logits_in.str());
  const std::int64_t V = logits_in.size(-1);
  const std::int64_t rows = V == 0 ? 0 : logits_in.numel() / V;
  if (targets_in.numel() != rows)
    fail("cross_entropy", "logits " + shape_str(logits_in.shape()) + " give " + std::to_string(rows) +
                              " rows but targets " + shape_str(targets_in.shape()) + " has " +
                              std::to_string(targets_in.numel()));
  if (targets_in.device() != logits_in.device())
    fail("cross_entropy", "targets " + targets_in.str() + " and logits " + logits_in.str() + " are on different devices");
  Tensor logits = logits_in.contiguous();
  Tensor targets = targets_in.contiguous();
  if (targets.device().is_cpu()) {
    const std::int32_t* t = targets.data<std::int32_t>();
    for (std::int64_t i = 0; i < rows; ++i)
      if (t[i] != ignore_index && (t[i] < 0 || t[i] >= V))
        fail("cross_entropy", "target " + std::to_string(t[i]) + " at row " + std::to_string(i) +
                                  " is outside [0, " + std::to_string(V) + ")");
  }
  Tensor lse = Tensor::empty({rows}, logits.dtype(), logits.device());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  Tensor count = Tensor::empty({}, logits.dtype(), logits.device());
  dispatch_float("cross_entropy", logits, [&](auto tag) {
    using T = decltype(tag);
    need("cross_entropy", table<T>("cross_entropy", logits).cross_entropy_forward, logits)(
        logits.data<T>(), targets.data<std::int32_t>(), rows, V, ignore_index, lse.data<T>(), loss.data<T>(), count.data<T>());
  });
  return record_op(loss, "cross_entropy", {logits_in},
                   [sl = saved(logits), st = saved(targets), lse, count, rows, V, ignore_index](const Tensor& g) -> std::vector<Tensor> {
                     Tensor gl = Tensor::empty(sl.shape(), sl.dtype(), sl.device());
                     Tensor gs = g.contiguous();
                     dispatch_float("cross_entropy", sl, [&](auto tag) {
                       using T = decltype(tag);
                       need("cross_entropy", table<T>("cross_entropy", sl).cross_entropy_backward, sl)(
                           sl.data<T>(), st.data<std::int32_t>(), lse.data<T>(), count.data<T>(), gs.data<T>(), rows, V,
                           ignore_index, gl.data<T>());
                     });
                     return {gl};
                   });
}

// ---- mean squared error -------------------------------------------------------------------------

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  check_floating("mse_loss", pred, "pred");
  check_floating("mse_loss", target, "target");
  // Equal shapes, not broadcasting: a (N, 1) prediction against (N) targets would
  // broadcast to (N, N) and quietly average the wrong differences.
  if (pred.shape() != target.shape())
    fail("mse_loss", "pred " + shape_str(pred.shape()) + " and target " + shape_str(target.shape()) +
                         " must have the same shape");
  check_same("mse_loss", {pred, target});
  if (pred.numel() == 0) fail("mse_loss", "pred and target " + shape_str(pred.shape()) + " hold no elements");
  // Composed of differentiable ops, so autograd gives d/dpred = 2 (pred - target) / n and
  // its negative to target (when it requires a gradient) without a kernel of its own.
  const Tensor d = sub(pred, target);
  return mean(mul(d, d));
}

// ---- layer norm --------------------------------------------------------------------------------

namespace {

// x and gamma/beta as layer_norm checks them; returns D.
std::int64_t check_layer_norm_operands(const char* op, const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  check_floating(op, x);
  check_same(op, {x, gamma, beta});
  if (x.dim() < 1) fail(op, "needs at least one axis, got " + x.str());
  const std::int64_t D = x.size(-1);
  for (const Tensor* p : {&gamma, &beta})
    if (p->defined() && (p->dim() != 1 || p->size(0) != D))
      fail(op, "affine parameter " + shape_str(p->shape()) + " does not match the normalised axis of " +
                   shape_str(x.shape()));
  return D;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, double eps) {
  const std::int64_t D = check_layer_norm_operands("layer_norm", x_in, gamma, beta);
  Tensor x = x_in.contiguous();
  Tensor g = gamma.defined() ? gamma.contiguous() : Tensor();
  Tensor b = beta.defined() ? beta.contiguous() : Tensor();
  const std::int64_t rows = D == 0 ? 0 : x.numel() / D;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, x.dtype(), x.device());
  dispatch_float("layer_norm", x, [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0)
      need("layer_norm", table<T>("layer_norm", x).layer_norm_forward, x)(
          x.data<T>(), g.defined() ? g.data<T>() : nullptr, b.defined() ? b.data<T>() : nullptr, rows, D,
          static_cast<T>(eps), y.data<T>(), mean.data<T>(), rstd.data<T>());
  });
  return record_op(y, "layer_norm", {x_in, gamma, beta},
                   [sx = saved(x), sg = saved(g), has_beta = b.defined(), mean, rstd, rows, D](const Tensor& gy_in) -> std::vector<Tensor> {
                     Tensor gy = gy_in.contiguous();
                     Tensor gx = Tensor::empty(sx.shape(), sx.dtype(), sx.device());
                     Tensor gg = sg.defined() ? Tensor::empty({D}, sx.dtype(), sx.device()) : Tensor();
                     Tensor gb = has_beta ? Tensor::empty({D}, sx.dtype(), sx.device()) : Tensor();
                     dispatch_float("layer_norm", sx, [&](auto tag) {
                       using T = decltype(tag);
                       if (rows == 0) return;
                       need("layer_norm", table<T>("layer_norm", sx).layer_norm_backward, sx)(
                           sx.data<T>(), sg.defined() ? sg.data<T>() : nullptr, mean.data<T>(), rstd.data<T>(), gy.data<T>(),
                           rows, D, gx.data<T>(), gg.defined() ? gg.data<T>() : nullptr, gb.defined() ? gb.data<T>() : nullptr);
                     });
                     return {gx, gg, gb};
                   });
}

// ---- dropout -------------------------------------------------------------------------------------

Tensor dropout(const Tensor& x_in, double p, bool training, std::uint64_t seed, std::uint64_t offset) {
  check_floating("dropout", x_in);
  if (!(p >= 0.0 && p <= 1.0)) fail("dropout", "probability must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0.0) return x_in;
  Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const std::int64_t n = x.numel();
  dispatch_float("dropout", x, [&](auto tag) {
    using T = decltype(tag);
    if (n > 0)
      need("dropout", table<T>("dropout", x).dropout_forward, x)(x.data<T>(), y.data<T>(), n, static_cast<float>(p), seed, offset);
  });
  return record_op(y, "dropout", {x_in}, [p, seed, offset, n](const Tensor& g_in) -> std::vector<Tensor> {
    Tensor g = g_in.contiguous();
    Tensor gx = Tensor::empty(g.shape(), g.dtype(), g.device());
    dispatch_float("dropout", g, [&](auto tag) {
      using T = decltype(tag);
      if (n > 0)
        need("dropout", table<T>("dropout", g).dropout_backward, g)(g.data<T>(), gx.data<T>(), n, static_cast<float>(p), seed,
                                                                    offset);
    });
    return {gx};
  });
}

// ---- residual + dropout + layer norm --------------------------------------------------------

ResidualNorm residual_layer_norm(const Tensor& x_in, const Tensor& y_in, const Tensor& gamma, const Tensor& beta,
                                 double p, std::uint64_t seed, std::uint64_t offset, double eps) {
  const std::int64_t D = check_layer_norm_operands("residual_layer_norm", x_in, gamma, beta);
  check_same("residual_layer_norm", {x_in, y_in});
  if (x_in.shape() != y_in.shape())
    fail("residual_layer_norm", "x " + shape_str(x_in.shape()) + " and y " + shape_str(y_in.shape()) +
                                    " must have the same shape");
  if (!(p >= 0.0 && p <= 1.0))
    fail("residual_layer_norm", "dropout probability must be in [0, 1], got " + std::to_string(p));
  Tensor x = x_in.contiguous(), y = y_in.contiguous();
  Tensor g = gamma.defined() ? gamma.contiguous() : Tensor();
  Tensor b = beta.defined() ? beta.contiguous() : Tensor();
  const std::int64_t rows = D == 0 ? 0 : x.numel() / D;
  Tensor sum = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mean = Tensor::empty({rows}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, x.dtype(), x.device());
  const auto pf = static_cast<float>(p);
  dispatch_float("residual_layer_norm", x, [&](auto tag) {
    using T = decltype(tag);
    if (rows > 0)
      need("residual_layer_norm", table<T>("residual_layer_norm", x).residual_layer_norm_forward, x)(
          x.data<T>(), y.data<T>(), g.defined() ? g.data<T>() : nullptr, b.defined() ? b.data<T>() : nullptr, rows, D,
          pf, seed, offset, static_cast<T>(eps), sum.data<T>(), out.data<T>(), mean.data<T>(), rstd.data<T>());
  });
  std::vector<Tensor> outputs = record_multi_op(
      {sum, out}, "residual_layer_norm", {x_in, y_in, gamma, beta},
      [ss = saved(sum), sg = saved(g), has_beta = b.defined(), mean, rstd, rows, D, pf, seed,
       offset](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
        // An output no gradient reached reads as zeros: gs is simply absent; gout zeros.
        Tensor gs = grads[0].defined() ? grads[0].contiguous() : Tensor();
        Tensor gout = grads[1].defined() ? grads[1].contiguous() : Tensor::zeros(ss.shape(), ss.dtype(), ss.device());
        Tensor gx = Tensor::empty(ss.shape(), ss.dtype(), ss.device());
        Tensor gy = Tensor::empty(ss.shape(), ss.dtype(), ss.device());
        Tensor gg = sg.defined() ? Tensor::empty({D}, ss.dtype(), ss.device()) : Tensor();
        Tensor gb = has_beta ? Tensor::empty({D}, ss.dtype(), ss.device()) : Tensor();
        dispatch_float("residual_layer_norm", ss, [&](auto tag) {
          using T = decltype(tag);
          if (rows == 0) return;
          need("residual_layer_norm", table<T>("residual_layer_norm", ss).residual_layer_norm_backward, ss)(
              ss.data<T>(), sg.defined() ? sg.data<T>() : nullptr, mean.data<T>(), rstd.data<T>(), gout.data<T>(),
              gs.defined() ? gs.data<T>() : nullptr, rows, D, pf, seed, offset, gx.data<T>(), gy.data<T>(),
              gg.defined() ? gg.data<T>() : nullptr, gb.defined() ? gb.data<T>() : nullptr);
        });
        return {gx, gy, gg, gb};
      });
  return {outputs[0], outputs[1]};
}

// ---- gated fusion --------------------------------------------------------------------------------

Tensor gate_mix(const Tensor& a_in, const Tensor& x_in, const Tensor& y_in) {
  check_floating("gate_mix", a_in, "a");
  check_same("gate_mix", {a_in, x_in, y_in});
  if (a_in.shape() != x_in.shape() || a_in.shape() != y_in.shape())
    fail("gate_mix", "a, x and y must have one shape, got " + shape_str(a_in.shape()) + ", " +
                         shape_str(x_in.shape()) + " and " + shape_str(y_in.shape()));
  Tensor a = a_in.contiguous(), x = x_in.contiguous(), y = y_in.contiguous();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const std::int64_t n = a.numel();
  dispatch_float("gate_mix", a, [&](auto tag) {
    using T = decltype(tag);
    if (n > 0)
      need("gate_mix", table<T>("gate_mix", a).gate_mix_forward, a)(a.data<T>(), x.data<T>(), y.data<T>(),
                                                                    out.data<T>(), n);
  });
  return record_op(out, "gate_mix", {a_in, x_in, y_in},
                   [sa = saved(a), sx = saved(x), sy = saved(y), n](const Tensor& g_in) -> std::vector<Tensor> {
                     Tensor g = g_in.contiguous();
                     Tensor ga = Tensor::empty(g.shape(), g.dtype(), g.device());
                     Tensor gx = Tensor::empty(g.shape(), g.dtype(), g.device());
                     Tensor gy = Tensor::empty(g.shape(), g.dtype(), g.device());
                     dispatch_float("gate_mix", g, [&](auto tag) {
                       using T = decltype(tag);
                       if (n > 0)
                         need("gate_mix", table<T>("gate_mix", g).gate_mix_backward, g)(
                             sa.data<T>(), sx.data<T>(), sy.data<T>(), g.data<T>(), ga.data<T>(), gx.data<T>(),
                             gy.data<T>(), n);
                     });
                     return {ga, gx, gy};
                   });
}

}  // namespace wedge::ops
