// The selective scan of SheafStateLM's local dynamics (Mamba's S6) over segments that
// each start from their own, differentiable state h0. The recurrence is in
// engine/kernel_table.h (ScanArgs); the kernels recompute each segment's states in
// backward, so nothing of size L x D x N is ever stored.
#include "ops/common.h"
#include "ops/ops.h"

namespace wedge::ops {

using namespace detail;

namespace {

constexpr const char* kOp = "selective_scan";

void expect_shape(const Tensor& t, const Shape& want, const char* what) {
  if (t.shape() != want)
    fail(kOp, std::string(what) + " must be " + shape_str(want) + ", got " + shape_str(t.shape()));
}

// Points the nine fields named like the op's inputs (u, delta, A_log, B, C, Dskip,
// delta_bias, h0, z — in ScanArgs and ScanGrads alike) at pointer(i) for input i.
template <typename Fields, typename F>
void bind_inputs(Fields& f, F pointer) {
  f.u = pointer(0);
  f.delta = pointer(1);
  f.A_log = pointer(2);
  f.B = pointer(3);
  f.C = pointer(4);
  f.Dskip = pointer(5);
  f.delta_bias = pointer(6);
  f.h0 = pointer(7);
  f.z = pointer(8);
}

// Can the kernels read t (batch, L, width) in place: its channels contiguous, its tokens
// and batches at positive strides (ScanArgs)?
bool token_strided(const Tensor& t) {
  if (t.size(2) > 1 && t.strides()[2] != 1) return false;
  for (int d = 0; d < 2; ++d)
    if (t.size(d) > 1 && t.strides()[d] <= 0) return false;
  return true;
}

// The tensors of one stride group of ScanArgs (u, delta, z; or B, C) as the kernels read
// them: in place when they share one such layout (a piece of a longer sequence; B and C
// sliced from one projection), else contiguous copies.
void readable(std::vector<Tensor>& keep, std::initializer_list<int> group) {
  const Tensor& first = keep[static_cast<std::size_t>(*group.begin())];
  bool in_place = true;
  for (int i : group) {
    const Tensor& t = keep[static_cast<std::size_t>(i)];
    if (t.defined() && (!token_strided(t) || t.strides() != first.strides())) in_place = false;
  }
  if (!in_place)
    for (int i : group) {
      Tensor& t = keep[static_cast<std::size_t>(i)];
      if (t.defined()) t = t.contiguous();
    }
}

// The kernel arguments over the inputs as `readable` left them (kept alive by `keep`).
template <typename T>
kernels::ScanArgs<T> scan_args(const std::vector<Tensor>& keep, std::int64_t segment) {
  kernels::ScanArgs<T> a;
  a.batch = keep[0].size(0);
  a.L = keep[0].size(1);
  a.D = keep[0].size(2);
  a.N = keep[2].size(1);
  a.P = segment;
  bind_inputs(a, [&](int i) -> const T* { return keep[i].defined() ? keep[i].data<T>() : nullptr; });
  a.x_batch_stride = keep[0].strides()[0];
  a.x_token_stride = keep[0].strides()[1];
  a.bc_batch_stride = keep[3].strides()[0];
  a.bc_token_stride = keep[3].strides()[1];
  return a;
}

}  // namespace

Tensor selective_scan(const Tensor& u, const Tensor& delta, const Tensor& A_log, const Tensor& B, const Tensor& C,
                      const Tensor& Dskip, const Tensor& delta_bias, const Tensor& h0, std::int64_t segment,
                      const Tensor& z, Tensor* h_last, Tensor* step_sums) {
  check_floating(kOp, u, "u");
  if (u.dim() != 3) fail(kOp, "u must be (batch, L, D), got " + shape_str(u.shape()));
  if (A_log.dim() != 2) fail(kOp, "A_log must be (D, N), got " + shape_str(A_log.shape()));
  if (segment < 1) fail(kOp, "the segment length must be at least 1, got " + std::to_string(segment));
  const std::int64_t batch = u.size(0), L = u.size(1), D = u.size(2), N = A_log.size(1);
  const std::int64_t segments = (L + segment - 1) / segment;
  expect_shape(delta, u.shape(), "delta");
  expect_shape(A_log, {D, N}, "A_log");
  expect_shape(B, {batch, L, N}, "B");
  expect_shape(C, {batch, L, N}, "C");
  if (Dskip.defined()) expect_shape(Dskip, {D}, "Dskip");
  if (delta_bias.defined()) expect_shape(delta_bias, {D}, "delta_bias");
  if (h0.defined()) expect_shape(h0, {batch, segments, D, N}, "h0 (batch, segments, D, N)");
  if (z.defined()) expect_shape(z, u.shape(), "the gate z");
  const std::vector<Tensor> inputs = {u, delta, A_log, B, C, Dskip, delta_bias, h0, z};
  check_same(kOp, inputs);
  // u, delta, z and B, C are read where they lie when their layout allows; the rest are
  // small or already contiguous.
  std::vector<Tensor> keep;
  for (const Tensor& t : inputs) keep.push_back(t);
  readable(keep, {0, 1, 8});
  readable(keep, {3, 4});
  for (int i : {2, 5, 6, 7}) {
    Tensor& t = keep[static_cast<std::size_t>(i)];
    if (t.defined()) t = t.contiguous();
  }

  // The outputs: y, and the step sums and the last states when asked for (all
  // differentiable).
  std::vector<Tensor> outputs = {Tensor::empty(u.shape(), u.dtype(), u.device())};
  const int sums_at = step_sums != nullptr ? static_cast<int>(outputs.size()) : -1;
  if (step_sums != nullptr) outputs.push_back(Tensor::empty({batch, segments, D}, u.dtype(), u.device()));
  const int last_at = h_last != nullptr ? static_cast<int>(outputs.size()) : -1;
  if (h_last != nullptr) outputs.push_back(Tensor::zeros({batch, segments, D, N}, u.dtype(), u.device()));
  dispatch_float(kOp, u, [&](auto tag) {
    using T = decltype(tag);
    if (outputs[0].numel() > 0)
      need(kOp, table<T>(kOp, u).selective_scan_forward, u)(scan_args<T>(keep, segment), outputs[0].data<T>(),
                                                          last_at >= 0 ? outputs[last_at].data<T>() : nullptr,
                                                          sums_at >= 0 ? outputs[sums_at].data<T>() : nullptr);
  });
  std::vector<Tensor> saved_inputs;
  for (const Tensor& t : keep) saved_inputs.push_back(saved(t));
  const Shape y_shape = u.shape();
  outputs = record_multi_op(
      std::move(outputs), kOp, inputs,
      [keep = std::move(saved_inputs), segment, y_shape, sums_at, last_at](const std::vector<Tensor>& g_out) -> std::vector<Tensor> {
        // An output no gradient reached: gy reads as zeros, the others' gradients are absent.
        const Tensor& any = keep[0];
        const Tensor gy = g_out[0].defined() ? g_out[0].contiguous() : Tensor::zeros(y_shape, any.dtype(), any.device());
        auto optional = [&](int at) {
          return at >= 0 && at < static_cast<int>(g_out.size()) && g_out[at].defined() ? g_out[at].contiguous() : Tensor();
        };
        const Tensor g_sums = optional(sums_at), g_last = optional(last_at);
        std::vector<Tensor> grads;
        for (const Tensor& t : keep) grads.push_back(t.defined() ? Tensor::empty(t.shape(), t.dtype(), t.device()) : Tensor());
        dispatch_float(kOp, gy, [&](auto tag) {
          using T = decltype(tag);
          kernels::ScanGrads<T> g;
          bind_inputs(g, [&](int i) -> T* { return grads[i].defined() ? grads[i].data<T>() : nullptr; });
          if (gy.numel() > 0) {
            need(kOp, table<T>(kOp, gy).selective_scan_backward, gy)(
                scan_args<T>(keep, segment), gy.data<T>(), g_last.defined() ? g_last.data<T>() : nullptr,
                g_sums.defined() ? g_sums.data<T>() : nullptr, g);
          } else {
            for (Tensor& t : grads)
              if (t.defined()) t.fill_(0.0);
          }
        });
        return grads;
      });
  if (step_sums != nullptr) *step_sums = outputs[sums_at];
  if (h_last != nullptr) *h_last = outputs[last_at];
  return outputs[0];
}

}  // namespace wedge::ops
