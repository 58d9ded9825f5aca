// The float table against the double table on the same (float-representable) inputs:
// the float instantiations are separate code, and everything in ops/ that trains runs
// on them. Tolerances are a few float ulps of the values involved.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/tables.h"
#include "test_ref_helpers.h"

namespace wedge::kernels {
namespace {

using std::int32_t;
using testing::check_all_close;

// Random values already rounded to float, so both precisions see identical inputs.
std::vector<double> inputs(std::size_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v = testing::random_vector(n, seed, lo, hi);
  for (double& x : v) x = double(float(x));
  return v;
}

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename Out>
void append(std::vector<double>& all, const Out& values) {
  all.insert(all.end(), values.begin(), values.end());
}

// Runs `run(table, T{})` with T = float and T = double and compares what each returns.
template <typename Run>
void compare_precisions(Run run, double tol, const char* what) {
  const std::vector<double> f32 = run(ref_table_f32(), float{});
  const std::vector<double> f64 = run(ref_table_f64(), double{});
  check_all_close(f32, f64, tol, tol, what);
}

TEST_CASE("ref float table == double table: element-wise, binary, reduce") {
  const auto x = inputs(33, 1, 0.1, 3), gy = inputs(33, 2);
  for (UnaryOp op : kUnaryOps) {
    CAPTURE(int(op));
    compare_precisions(
        [&](const auto& k, auto zero) {
          using T = decltype(zero);
          auto xt = as<T>(x), gyt = as<T>(gy);
          std::vector<T> y(33), gx(33);
          k.unary(op, T(1.5), xt.data(), y.data(), 33);
          k.unary_backward(op, T(1.5), xt.data(), y.data(), gyt.data(), gx.data(), 33, false);
          std::vector<double> all;
          append(all, y);
          append(all, gx);
          return all;
        },
        1e-6, "unary");
  }
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max,
                      BinaryOp::Min, BinaryOp::Pow}) {
    CAPTURE(int(op));
    compare_precisions(
        [&](const auto& k, auto zero) {
          using T = decltype(zero);
          auto a = as<T>(inputs(3 * 7, 3, 0.2, 2)), b = as<T>(inputs(7, 4, 0.2, 2));
          BroadcastLayout layout;
          layout.ndim = 2;
          layout.shape[0] = 3, layout.shape[1] = 7;
          layout.stride_a[0] = 7, layout.stride_a[1] = 1;
          layout.stride_b[0] = 0, layout.stride_b[1] = 1;
          std::vector<T> out(21);
          k.binary(op, layout, a.data(), b.data(), out.data());
          return std::vector<double>(out.begin(), out.end());
        },
        1e-6, "binary");
  }
  compare_precisions(
      [&](const auto& k, auto zero) {
        using T = decltype(zero);
        auto xt = as<T>(inputs(2 * 7 * 3, 5));
        std::vector<T> sum(6), max(6), sq(1);
        std::vector<int32_t> idx(6);
        k.reduce(ReduceOp::Sum, xt.data(), sum.data(), nullptr, 2, 7, 3);
        k.reduce(ReduceOp::Max, xt.data(), max.data(), idx.data(), 2, 7, 3);
        k.sum_squares(xt.data(), i64(xt.size()), sq.data(), false);
        std::vector<double> all;
        append(all, sum);
        append(all, max);
        append(all, idx);
        append(all, sq);
        return all;
      },
      1e-6, "reduce, sum_squares");
}

TEST_CASE("ref float table == double table: softmax, cross-entropy, layer norm") {
  compare_precisions(
      [&](const auto& k, auto zero) {
        using T = decltype(zero);
        auto x = as<T>(inputs(3 * 7, 10, -3, 3)), gy = as<T>(inputs(3 * 7, 11));
        std::vector<double> all;
        for (bool log : {false, true}) {
          std::vector<T> y(21), gx(21);
          k.softmax_forward(x.data(), y.data(), 3, 7, log);
          k.softmax_backward(y.data(), gy.data(), gx.data(), 3, 7, log);
          append(all, y);
          append(all, gx);
        }
        const std::vector<int32_t> targets = {6, -100, 0};
        std::vector<T> lse(3), g(21);
        T loss = 0, count = 0, gloss = T(0.75);
        k.cross_entropy_forward(x.data(), targets.data(), 3, 7, -100, lse.data(), &loss, &count);
        k.cross_entropy_backward(x.data(), targets.data(), lse.data(), &count, &gloss, 3, 7, -100,
                                 g.data());
        append(all, lse);
        append(all, g);
        all.push_back(loss);
        all.push_back(count);
        return all;
      },
      2e-6, "softmax, cross-entropy");

  compare_precisions(
      [&](const auto& k, auto zero) {
        using T = decltype(zero);
        auto x = as<T>(inputs(5 * 9, 20, -2, 2)), gamma = as<T>(inputs(9, 21)),
             beta = as<T>(inputs(9, 22)), gy = as<T>(inputs(5 * 9, 23));
        std::vector<T> y(45), mean(5), rstd(5), gx(45), ggamma(9), gbeta(9);
        k.layer_norm_forward(x.data(), gamma.data(), beta.data(), 5, 9, T(1e-5), y.data(),
                             mean.data(), rstd.data());
        k.layer_norm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), gy.data(), 5, 9,
                              gx.data(), ggamma.data(), gbeta.data());
        std::vector<double> all;
        for (const auto* v : {&y, &mean, &rstd, &gx, &ggamma, &gbeta}) append(all, *v);
        return all;
      },
      5e-6, "layer norm");
}

TEST_CASE("ref float table == double table: embedding, dropout, attention, Plücker, Adam") {
  compare_precisions(
      [&](const auto& k, auto zero) {
        using T = decltype(zero);
        auto table = as<T>(inputs(4 * 3, 30)), gout = as<T>(inputs(5 * 3, 31)),
             x = as<T>(inputs(50, 32));
        const std::vector<int32_t> ids = {3, 0, 3, 3, 1};
        std::vector<T> out(15), gtable(12), y(50), gx(50);
        k.embedding_forward(table.data(), ids.data(), 5, 4, 3, out.data());
        k.embedding_backward(ids.data(), gout.data(), 5, 4, 3, gtable.data());
        k.dropout_forward(x.data(), y.data(), 50, 0.4f, 7, 3);
        k.dropout_backward(x.data(), gx.data(), 50, 0.4f, 7, 3);
        std::vector<double> all;
        for (const auto* v : {&out, &gtable, &y, &gx}) append(all, *v);
        return all;
      },
      1e-6, "embedding, dropout");

  for (bool causal : {false, true}) {
    CAPTURE(causal);
    compare_precisions(
        [&](const auto& k, auto zero) {
          using T = decltype(zero);
          const i64 BH = 2, L = 9, dh = 4, n = BH * L * dh;
          auto q = as<T>(inputs(n, 40)), kk = as<T>(inputs(n, 41)), v = as<T>(inputs(n, 42)),
               gout = as<T>(inputs(n, 43));
          std::vector<T> out(n), lse(BH * L), gq(n), gk(n), gv(n);
          k.attention_forward(q.data(), kk.data(), v.data(), BH, L, dh, T(0.5), causal, out.data(),
                              lse.data());
          k.attention_backward(q.data(), kk.data(), v.data(), out.data(), lse.data(), gout.data(),
                               BH, L, dh, T(0.5), causal, gq.data(), gk.data(), gv.data());
          std::vector<double> all;
          for (const auto* t : {&out, &lse, &gq, &gk, &gv}) append(all, *t);
          return all;
        },
        2e-6, "attention");
  }

  compare_precisions(
      [&](const auto& k, auto zero) {
        using T = decltype(zero);
        const i64 B = 2, L = 5, r = 6, P = 15;
        const std::vector<int32_t> offsets = {1, 3, 8};
        const i64 m = 3;
        auto z = as<T>(inputs(B * L * r, 50)), gout = as<T>(inputs(B * L * m * P, 51)),
             gmean = as<T>(inputs(B * L * P, 52));
        std::vector<T> out(B * L * m * P), norms(B * L * m), gz(B * L * r), mean(B * L * P),
            mean_norms(B * L * m), gz_mean(B * L * r);
        k.plucker_forward(z.data(), B, L, r, offsets.data(), m, T(1e-6), out.data(), norms.data());
        k.plucker_backward(z.data(), B, L, r, offsets.data(), m, T(1e-6), out.data(), norms.data(),
                           gout.data(), gz.data());
        k.plucker_mean_forward(z.data(), B, L, r, offsets.data(), m, T(1e-6), mean.data(),
                               mean_norms.data());
        k.plucker_mean_backward(z.data(), B, L, r, offsets.data(), m, T(1e-6), mean_norms.data(),
                                gmean.data(), gz_mean.data());
        std::vector<double> all;
        for (const auto* t : {&out, &norms, &gz, &mean, &mean_norms, &gz_mean}) append(all, *t);
        return all;
      },
      5e-6, "plucker");

  compare_precisions(
      [&](const auto& k, auto zero) {
        using T = decltype(zero);
        auto p = as<T>(inputs(17, 60)), g = as<T>(inputs(17, 61)), m = as<T>(inputs(17, 62)),
             v = as<T>(inputs(17, 63, 0, 0.01));
        const AdamParams hp{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.271f, 0.00399f, true};
        const AdamSegment<T> seg{p.data(), g.data(), m.data(), v.data(), 17};
        k.adam_update(hp, &seg, 1);
        std::vector<double> all;
        for (const auto* t : {&p, &m, &v}) append(all, *t);
        return all;
      },
      1e-6, "adam");
}

}  // namespace
}  // namespace wedge::kernels
