// Scaled dot-product attention per head, causal mask optional. The kernel keeps one
// log-sum-exp per query row so backward can rebuild the probabilities without storing
// the L x L matrix (the reference kernel is plain; the fast ones are flash-style).
//
// attention_decode is its inference-only sibling for generating with a key/value cache: the
// newest queries of a stream against every key so far, read in place from the cache.
#include <cmath>
#include <optional>

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

namespace {

// The distance between consecutive heads of k or v (B, H, L, dh), when the view is a cache
// the decode kernel can read in place: rows of dh contiguous values, dh apart, and every head
// the same distance from the next (dims 0 and 1 walked by one stride), far enough that heads
// do not overlap. Strides of dims of size 1 never matter.
std::optional<std::int64_t> head_stride(const Tensor& t) {
  const std::int64_t B = t.size(0), H = t.size(1), L = t.size(2), dh = t.size(3);
  const Shape& st = t.strides();
  if ((dh > 1 && st[3] != 1) || (L > 1 && st[2] != dh)) return std::nullopt;
  std::int64_t stride = L * dh;  // a single head: any distance serves
  if (H > 1) stride = st[1];
  else if (B > 1) stride = st[0];
  if (B > 1 && H > 1 && st[0] != H * st[1]) return std::nullopt;
  if (stride < L * dh) return std::nullopt;  // overlapping or broadcast heads (stride 0): copied
  return stride;
}

}  // namespace

Tensor attention_decode(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
  const char* op = "attention_decode";
  check_floating(op, q_in, "q");
  check_same(op, {q_in, k_in, v_in});
  const auto shapes = [&] {
    return "q " + shape_str(q_in.shape()) + ", k " + shape_str(k_in.shape()) + ", v " + shape_str(v_in.shape());
  };
  if (q_in.dim() != 4 || k_in.dim() != 4 || v_in.shape() != k_in.shape() || q_in.size(0) != k_in.size(0) ||
      q_in.size(1) != k_in.size(1) || q_in.size(3) != k_in.size(3))
    fail(op, "q must be (B, H, n, dh) and k, v (B, H, L, dh); got " + shapes());
  if (q_in.size(2) < 1 || q_in.size(2) > k_in.size(2))
    fail(op, "needs 1 <= n <= L (the n newest of L positions); got " + shapes());
  if (needs_grad({q_in, k_in, v_in}))
    fail(op, "is forward-only, for inference (no backward): call it under NoGradGuard or on tensors that do not "
             "require grad; got " + shapes());
  const std::int64_t B = q_in.size(0), H = q_in.size(1), n = q_in.size(2), L = k_in.size(2), dh = q_in.size(3);
  Tensor q = q_in.contiguous(), k = k_in, v = v_in;
  // A cache view is read in place; anything else (or k and v with different head strides)
  // is packed first.
  std::optional<std::int64_t> kv_stride = head_stride(k);
  if (!kv_stride || head_stride(v) != kv_stride) {
    k = k.contiguous();
    v = v.contiguous();
    kv_stride = L * dh;
  }
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  const double scale = dh > 0 ? 1.0 / std::sqrt(static_cast<double>(dh)) : 1.0;
  dispatch_float(op, q, [&](auto tag) {
    using T = decltype(tag);
    if (out.numel() > 0)
      need(op, table<T>(op, q).attention_decode_forward, q)(q.data<T>(), k.data<T>(), v.data<T>(), B * H, n, L,
                                                            *kv_stride, dh, static_cast<T>(scale), out.data<T>());
  });
  return out;
}

}  // namespace wedge::ops
