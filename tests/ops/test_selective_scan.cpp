// selective_scan against the same recurrence built from primitive ops, token by token
// (the plain sequential loop), in float64: values and gradients of every input, with and
// without the step sums and the states after each segment read beside y. And its argument
// errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/profile.h"
#include "engine/tensor.h"
#include "op_harness.h"
#include "ops/ops.h"

namespace wedge {
namespace {

using testing::input;

struct ScanInputs {
  std::int64_t batch, L, D, N, P;
  std::vector<Tensor> x;  // u, delta, A_log, B, C, Dskip, delta_bias, h0, and the gate z when gated
};

ScanInputs make_inputs(std::int64_t batch, std::int64_t L, std::int64_t D, std::int64_t N, std::int64_t P,
                       bool gated = false) {
  const std::int64_t S = (L + P - 1) / P;
  ScanInputs in{batch, L, D, N, P,
                {input({batch, L, D}, 1), input({batch, L, D}, 2), input({D, N}, 3, false, 0.0, 0.5), input({batch, L, N}, 4),
                 input({batch, L, N}, 5), input({D}, 6), input({D}, 7), input({batch, S, D, N}, 8)}};
  if (gated) in.x.push_back(input({batch, L, D}, 9, false, 0.0, 2.0));
  return in;
}

// The recurrence one token at a time, from primitives (autograd supplies the gradients):
//   h (batch, D, N) restarts from h0[:, s] at every segment start s P. With `lasts`, also
// the state after each segment's last token, (batch, segments, D, N).
Tensor scan_from_primitives(const std::vector<Tensor>& x, std::int64_t P, Tensor* lasts = nullptr) {
  const std::int64_t L = x[0].size(1);
  const Tensor A = ops::neg(ops::exp(x[2]));                                            // (D, N)
  const Tensor dt = ops::softplus(ops::add(x[1], x[6]));                               // (batch, L, D)
  std::vector<Tensor> ys, ends;
  Tensor h;
  for (std::int64_t t = 0; t < L; ++t) {
    if (t % P == 0) h = ops::squeeze(ops::narrow(x[7], 1, t / P, 1), 1);               // (batch, D, N)
    const Tensor dt_t = ops::unsqueeze(ops::squeeze(ops::narrow(dt, 1, t, 1), 1), 2);    // (batch, D, 1)
    const Tensor u_t = ops::unsqueeze(ops::squeeze(ops::narrow(x[0], 1, t, 1), 1), 2);  // (batch, D, 1)
    const Tensor B_t = ops::narrow(x[3], 1, t, 1);                                       // (batch, 1, N)
    const Tensor C_t = ops::narrow(x[4], 1, t, 1);                                       // (batch, 1, N)
    h = ops::add(ops::mul(ops::exp(ops::mul(dt_t, A)), h), ops::mul(ops::mul(dt_t, u_t), B_t));
    const Tensor y_t = ops::add(ops::sum(ops::mul(C_t, h), {2}), ops::mul(ops::squeeze(u_t, 2), x[5]));  // (batch, D)
    ys.push_back(y_t);
    if (t % P == P - 1 || t == L - 1) ends.push_back(h);
  }
  if (lasts != nullptr) *lasts = ops::stack(ends, 1);
  const Tensor y = ops::stack(ys, 1);
  return x.size() > 8 ? ops::mul(y, ops::silu(x[8])) : y;  // Mamba's output gate
}

// Each segment's step sizes summed, from primitives: (batch, segments, D).
Tensor step_sums_from_primitives(const std::vector<Tensor>& x, std::int64_t P) {
  const std::int64_t L = x[0].size(1);
  const Tensor dt = ops::softplus(ops::add(x[1], x[6]));
  std::vector<Tensor> sums;
  for (std::int64_t t0 = 0; t0 < L; t0 += P) sums.push_back(ops::sum(ops::narrow(dt, 1, t0, std::min(P, L - t0)), {1}));
  return ops::stack(sums, 1);
}

// y and the gradient of sum(w y) with respect to every input (in the order of ScanInputs),
// all in float64, computed in `dtype` by the op (fused) or by the primitives. With sums,
// the loss adds sum(v S) of the step sums S, whose values come next; with lasts, sum(q H)
// of the states after each segment H, whose values come last.
std::vector<std::vector<double>> values_and_gradients(const ScanInputs& in, DType dtype, bool fused,
                                                      bool sums = false, bool lasts = false) {
  std::vector<Tensor> x;
  for (const Tensor& t : in.x) {
    Tensor c = t.detach().to(dtype);
    c.set_requires_grad(true);
    x.push_back(c);
  }
  Tensor S, H;
  const Tensor y = fused ? ops::selective_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], in.P,
                                               x.size() > 8 ? x[8] : Tensor(), lasts ? &H : nullptr, sums ? &S : nullptr)
                         : scan_from_primitives(x, in.P, lasts ? &H : nullptr);
  if (sums && !fused) S = step_sums_from_primitives(x, in.P);
  const Tensor w = Tensor::randn({in.batch, in.L, in.D}, 99, 0, 1, DType::F64).to(dtype);
  Tensor loss = ops::sum(ops::mul(y, w));
  if (sums) loss = ops::add(loss, ops::sum(ops::mul(S, Tensor::randn(S.shape(), 98, 0, 1, DType::F64).to(dtype))));
  if (lasts) loss = ops::add(loss, ops::sum(ops::mul(H, Tensor::randn(H.shape(), 97, 0, 1, DType::F64).to(dtype))));
  loss.backward();
  std::vector<std::vector<double>> out = {y.detach().to(DType::F64).to_vector<double>()};
  for (const Tensor& t : x) out.push_back(t.grad().to(DType::F64).to_vector<double>());
  if (sums) out.push_back(S.detach().to(DType::F64).to_vector<double>());
  if (lasts) out.push_back(H.detach().to(DType::F64).to_vector<double>());
  return out;
}

struct ScanShape {
  std::int64_t batch, L, D, N, P;
};

TEST_CASE("selective_scan equals the recurrence built from primitive ops, values and gradients") {
  for (const ScanShape s : {ScanShape{2, 7, 3, 2, 3}, ScanShape{1, 5, 2, 1, 1}, ScanShape{2, 4, 1, 3, 6},
                            ScanShape{1, 9, 4, 5, 4}})
  for (const bool gated : {false, true})
  for (const bool sums : {false, true})
  for (const bool lasts : {false, true}) {
    CAPTURE(s.L);
    CAPTURE(s.P);
    CAPTURE(s.N);
    CAPTURE(gated);
    CAPTURE(sums);
    CAPTURE(lasts);
    const ScanInputs in = make_inputs(s.batch, s.L, s.D, s.N, s.P, gated);
    const auto fused = values_and_gradients(in, DType::F64, true, sums, lasts),
               composed = values_and_gradients(in, DType::F64, false, sums, lasts);
    REQUIRE(fused.size() == composed.size());
    for (std::size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);  // 0: y, then the gradients of u, delta, A_log, B, C, Dskip, delta_bias, h0, z; the step sums; the last states
      REQUIRE(fused[i].size() == composed[i].size());
      for (std::size_t j = 0; j < fused[i].size(); ++j)
        CHECK(fused[i][j] == doctest::Approx(composed[i][j]).epsilon(1e-10).scale(1.0));
    }
  }
}

TEST_CASE("selective_scan in float32 on the CPU table matches float64, values and gradients") {
  // The float32 CPU table runs the AVX-512 kernel when the CPU has it: channel blocks of 16
  // with a tail (D 33), a state size that is no power of two, segments that do not divide L.
  for (const ScanShape s : {ScanShape{2, 37, 33, 5, 4}, ScanShape{1, 16, 16, 16, 16}, ScanShape{3, 9, 7, 1, 1},
                            ScanShape{1, 5, 20, 3, 8}})
  for (const bool gated : {false, true})
  for (const bool sums : {false, true}) {
    CAPTURE(s.D);
    CAPTURE(s.P);
    CAPTURE(gated);
    CAPTURE(sums);
    const ScanInputs in = make_inputs(s.batch, s.L, s.D, s.N, s.P, gated);
    // With the step sums, the last states too (their gradient enters the backward).
    const auto f32 = values_and_gradients(in, DType::F32, true, sums, sums),
               f64 = values_and_gradients(in, DType::F64, true, sums, sums);
    for (std::size_t i = 0; i < f32.size(); ++i) {
      CAPTURE(i);
      double scale = 1e-3;
      for (double v : f64[i]) scale = std::max(scale, std::fabs(v));
      // float32 sums of up to P N terms per token and B L terms per parameter gradient:
      // 1e-5 of the largest magnitude in the tensor.
      for (std::size_t j = 0; j < f32[i].size(); ++j) CHECK(std::fabs(f32[i][j] - f64[i][j]) <= 1e-5 * scale);
    }
  }
}

TEST_CASE("selective_scan reads strided inputs in place: the bits of contiguous copies, values and gradients") {
  // u, delta and z a piece of a longer sequence, B and C sliced from one wider projection:
  // the kernels read them where they lie (no copy), and every output and gradient must be
  // those of the same values made contiguous. Also the layouts the kernels cannot read in
  // place: z alone transposed (the group falls back to copies), B and C with different
  // strides. float64 runs the reference kernel, float32 the CPU table's (AVX-512 / AVX2).
  const std::int64_t batch = 3, L_all = 11, t0 = 4, L = 5, D = 19, N = 3, P = 2, S = (L + P - 1) / P;
  for (const DType dtype : {DType::F64, DType::F32})
  for (const bool gated : {false, true})
  for (const int layout : {0, 1, 2}) {  // 0: all in place; 1: z transposed; 2: C a separate tensor
    CAPTURE(dtype == DType::F64);
    CAPTURE(gated);
    CAPTURE(layout);
    auto leaf = [&](const Shape& shape, std::uint64_t seed, double scale = 1.0) {
      Tensor t = Tensor::randn(shape, seed, 0, scale, DType::F64).to(dtype);
      t.set_requires_grad(true);
      return t;
    };
    // u, delta and z: rows of D + 4 (tokens D + 4 apart), channels [2, 2 + D) of them.
    const Tensor U = leaf({batch, L_all, D + 4}, 1), Dl = leaf({batch, L_all, D + 4}, 2),
                 Z = leaf({batch, L_all, D + 4}, 3, 2.0);
    const Tensor Zt = leaf({batch, D, L_all}, 3, 2.0), Proj = leaf({batch, L_all, 2 * N + 3}, 4),
                 Csep = leaf({batch, L, N}, 5);
    const std::vector<Tensor> small = {leaf({D, N}, 6, 0.5), leaf({D}, 7), leaf({D}, 8), leaf({batch, S, D, N}, 9)};
    auto piece = [&](const Tensor& x) { return ops::narrow(x, 1, t0, L); };
    auto channels = [&](const Tensor& x) { return ops::narrow(piece(x), 2, 2, D); };
    const Tensor z = !gated ? Tensor() : layout == 1 ? piece(ops::transpose(Zt, 1, 2)) : channels(Z);
    const Tensor Bv = ops::narrow(piece(Proj), 2, 1, N), Cv = layout == 2 ? Csep : ops::narrow(piece(Proj), 2, 1 + N, N);
    const std::vector<Tensor> views = {channels(U), channels(Dl), Bv, Cv, z};
    std::vector<Tensor> copies;
    for (const Tensor& v : views) {
      Tensor c = v.defined() ? v.detach().contiguous() : Tensor();
      if (c.defined()) c.set_requires_grad(true);
      copies.push_back(c);
    }
    // The forward's strided copies, counted by the profiler: none where every group is read
    // in place.
    std::int64_t copies_made = -1;
    auto run = [&](const std::vector<Tensor>& x, bool count_copies) {
      Tensor last, y;
      {
        std::optional<profile::Profiler> profiler;
        if (count_copies) profiler.emplace();
        y = ops::selective_scan(x[0], x[1], small[0], x[2], x[3], small[1], small[2], small[3], P, x[4], &last);
        if (count_copies) {
          const profile::Report report = profiler->report();
          copies_made = 0;
          for (const profile::Row& row : report.kernels)
            if (row.name == "strided_copy") copies_made += row.calls;
        }
      }
      const Tensor loss = ops::add(ops::sum(ops::mul(y, Tensor::randn(y.shape(), 11, 0, 1, DType::F64).to(dtype))),
                                   ops::sum(ops::mul(last, Tensor::randn(last.shape(), 12, 0, 1, DType::F64).to(dtype))));
      loss.backward();
      return std::vector<std::vector<double>>{y.detach().to(DType::F64).to_vector<double>(),
                                              last.detach().to(DType::F64).to_vector<double>()};
    };
    auto grads_of_small = [&] {
      std::vector<std::vector<double>> g;
      for (Tensor t : small) {  // a handle: zero_grad drops the shared leaf's gradient
        g.push_back(t.grad().to(DType::F64).to_vector<double>());
        t.zero_grad();
      }
      return g;
    };
    const auto strided = run(views, true);
    // All in place, or the group that cannot be read in place copied: z transposed: u, delta
    // and z; B a slice and C a separate contiguous tensor: B (C already is contiguous).
    CHECK(copies_made == (layout == 0 ? 0 : layout == 1 ? (gated ? 3 : 0) : 1));
    const auto strided_small = grads_of_small();
    const auto contiguous = run(copies, false);
    const auto contiguous_small = grads_of_small();
    CHECK(strided == contiguous);
    CHECK(strided_small == contiguous_small);
    // The gradients of the views reach the wide tensors' windows.
    auto window = [&](const Tensor& g, int dim, std::int64_t start, std::int64_t length) {
      return ops::narrow(piece(g), dim, start, length).contiguous().to(DType::F64).to_vector<double>();
    };
    auto whole = [](const Tensor& g) { return g.to(DType::F64).to_vector<double>(); };
    CHECK(window(U.grad(), 2, 2, D) == whole(copies[0].grad()));
    CHECK(window(Dl.grad(), 2, 2, D) == whole(copies[1].grad()));
    CHECK(window(Proj.grad(), 2, 1, N) == whole(copies[2].grad()));
    if (layout == 2) CHECK(whole(Csep.grad()) == whole(copies[3].grad()));
    else CHECK(window(Proj.grad(), 2, 1 + N, N) == whole(copies[3].grad()));
    if (gated && layout == 1)
      CHECK(piece(ops::transpose(Zt.grad(), 1, 2)).contiguous().to(DType::F64).to_vector<double>() ==
            whole(copies[4].grad()));
    if (gated && layout != 1) CHECK(window(Z.grad(), 2, 2, D) == whole(copies[4].grad()));
  }
}

TEST_CASE("selective_scan: a long step size forgets the state, a tiny one keeps it") {
  // delta = 40: dt = 40, exp(-40 e^0) = 4e-18: y at the second token of a segment sees only
  // that token. delta = -40: dt ~ 4e-18: the state passes through unchanged, y = C . h0.
  const Tensor u = Tensor::full({1, 2, 1}, 1.0, DType::F64), A_log = Tensor::zeros({1, 1}, DType::F64);
  const Tensor B = Tensor::full({1, 2, 1}, 0.5, DType::F64), C = Tensor::full({1, 2, 1}, 2.0, DType::F64);
  const Tensor h0 = Tensor::full({1, 1, 1, 1}, 3.0, DType::F64);
  const auto forget = ops::selective_scan(u, Tensor::full({1, 2, 1}, 40.0, DType::F64), A_log, B, C, Tensor(), Tensor(),
                                          h0, 2).to_vector<double>();
  CHECK(forget[1] == doctest::Approx(2.0 * 40.0 * 0.5 * 1.0));  // C dt B u
  const auto keep = ops::selective_scan(u, Tensor::full({1, 2, 1}, -40.0, DType::F64), A_log, B, C, Tensor(), Tensor(),
                                        h0, 2).to_vector<double>();
  CHECK(keep[0] == doctest::Approx(6.0));  // C h0
  CHECK(keep[1] == doctest::Approx(6.0));
}

TEST_CASE("selective_scan names the op and the shapes in its errors") {
  const ScanInputs in = make_inputs(2, 5, 3, 2, 2);
  const auto& x = in.x;
  CHECK_THROWS_WITH_AS(ops::selective_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 0),
                       doctest::Contains("selective_scan: the segment length must be at least 1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::selective_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 3),
                       doctest::Contains("h0 (batch, segments, D, N) must be (2, 2, 3, 2), got (2, 3, 3, 2)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::selective_scan(x[0], x[1], x[2], x[0], x[4], x[5], x[6], x[7], 2),
                       doctest::Contains("selective_scan: B must be (2, 5, 2), got (2, 5, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::selective_scan(x[0], x[1], ops::transpose(x[2], 0, 1), x[3], x[4], x[5], x[6], x[7], 2),
                       doctest::Contains("A_log must be (3, 3), got (2, 3)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::selective_scan(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 2, x[3]),
                       doctest::Contains("selective_scan: the gate z must be (2, 5, 3), got (2, 5, 2)"), std::invalid_argument);
}

}  // namespace
}  // namespace wedge
