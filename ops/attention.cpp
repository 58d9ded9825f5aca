// Scaled dot-product attention per head, causal mask optional. The kernel keeps one
// log-sum-exp per query row so backward can rebuild the probabilities without storing
// the L x L matrix (the reference kernel is plain; the fast ones are flash-style).
#include <cmath>

#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

Tensor attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  check_floating("attention", q_in, "q");
  check_same("attention", {q_in, k_in, v_in});
  if (q_in.dim() != 4 || k_in.shape() != q_in.shape() || v_in.shape() != q_in.shape())
    fail("attention", "q, k, v must all be (B, H, L, dh); got q " + shape_str(q_in.shape()) + ", k " +
                          shape_str(k_in.shape()) + ", v " + shape_str(v_in.shape()));
  const std::int64_t B = q_in.size(0), H = q_in.size(1), L = q_in.size(2), dh = q_in.size(3);
  const std::int64_t BH = B * H;
  Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty({B, H, L}, q.dtype(), q.device());
  const double scale = dh > 0 ? 1.0 / std::sqrt(static_cast<double>(dh)) : 1.0;
  dispatch_float("attention", q, [&](auto tag) {
    using T = decltype(tag);
    if (out.numel() > 0)
      need("attention", table<T>("attention", q).attention_forward, q)(q.data<T>(), k.data<T>(), v.data<T>(), BH, L, dh,
                                                                         static_cast<T>(scale), causal, out.data<T>(),
                                                                         lse.data<T>());
  });
  return record_op(out, "attention", {q_in, k_in, v_in},
                   [sq = saved(q), sk = saved(k), sv = saved(v), so = saved(out), lse, BH, L, dh, scale,
                    causal](const Tensor& g_in) -> std::vector<Tensor> {
                     Tensor g = g_in.contiguous();
                     Tensor gq = Tensor::empty(sq.shape(), sq.dtype(), sq.device());
                     Tensor gk = Tensor::empty(sq.shape(), sq.dtype(), sq.device());
                     Tensor gv = Tensor::empty(sq.shape(), sq.dtype(), sq.device());
                     dispatch_float("attention", sq, [&](auto tag) {
                       using T = decltype(tag);
                       if (sq.numel() > 0)
                         need("attention", table<T>("attention", sq).attention_backward, sq)(
                             sq.data<T>(), sk.data<T>(), sv.data<T>(), so.data<T>(), lse.data<T>(), g.data<T>(), BH, L, dh,
                             static_cast<T>(scale), causal, gq.data<T>(), gk.data<T>(), gv.data<T>());
                     });
                     return {gq, gk, gv};
                   });
}

}  // namespace wedge::ops
