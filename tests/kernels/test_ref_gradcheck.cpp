// Every backward reference kernel against central finite differences of its forward, in
// float64. The loss is L = sum(w * f(x)) with a fixed random w, so the backward kernel is
// called with gy = w. Shapes are deliberately awkward (1, 3, 5, 7, ...).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/tables.h"
#include "test_ref_helpers.h"

namespace wedge::kernels {
namespace {

using std::int32_t;
using testing::check_gradient;
using testing::numeric_gradient;
using testing::random_vector;
using testing::weighted_sum;

const KernelTable<double>& K() { return ref_table_f64(); }

// Keeps every x at least `gap` away from 0, where Relu and Abs have their kink.
std::vector<double> away_from_zero(std::vector<double> x, double gap) {
  for (double& v : x) v = v >= 0 ? v + gap : v - gap;
  return x;
}

TEST_CASE("gradcheck unary_backward, every UnaryOp") {
  struct Case {
    UnaryOp op;
    double param;
    std::vector<double> x;
    const char* name;
  };
  const std::vector<Case> cases = {
      {UnaryOp::Neg, 0, random_vector(7, 1, -2, 2), "neg"},
      {UnaryOp::Exp, 0, random_vector(7, 2, -2, 2), "exp"},
      {UnaryOp::Log, 0, random_vector(7, 3, 0.3, 3), "log"},
      {UnaryOp::Sqrt, 0, random_vector(7, 4, 0.3, 3), "sqrt"},
      {UnaryOp::Tanh, 0, random_vector(7, 5, -2, 2), "tanh"},
      {UnaryOp::Sigmoid, 0, random_vector(7, 6, -4, 4), "sigmoid"},
      {UnaryOp::Relu, 0, away_from_zero(random_vector(7, 7), 0.05), "relu"},
      {UnaryOp::Gelu, 0, random_vector(7, 8, -3, 3), "gelu"},
      {UnaryOp::AddScalar, 0.7, random_vector(7, 9), "add scalar"},
      {UnaryOp::MulScalar, -1.3, random_vector(7, 10), "mul scalar"},
      {UnaryOp::PowScalar, 2.5, random_vector(7, 11, 0.3, 2), "pow 2.5"},
      {UnaryOp::PowScalar, 3, random_vector(7, 12, -2, 2), "pow 3 (negative x)"},
      {UnaryOp::PowScalar, -1, random_vector(7, 13, 0.5, 2), "pow -1"},
      {UnaryOp::Abs, 0, away_from_zero(random_vector(7, 14), 0.05), "abs"},
      {UnaryOp::Silu, 0, random_vector(7, 15, -4, 4), "silu"},
      {UnaryOp::Softplus, 0, random_vector(7, 16, -6, 6), "softplus"},
      {UnaryOp::Softplus, 0, random_vector(7, 17, 25, 40), "softplus, large x (the linear branch)"},
  };
  const std::vector<double> w = random_vector(7, 99);
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::vector<double> x = c.x, y(7);
    auto loss = [&] {
      K().unary(c.op, c.param, x.data(), y.data(), 7);
      return weighted_sum(w, y);
    };
    const std::vector<double> numeric = numeric_gradient(x, loss);
    K().unary(c.op, c.param, x.data(), y.data(), 7);
    std::vector<double> gx(7);
    K().unary_backward(c.op, c.param, x.data(), y.data(), w.data(), gx.data(), 7, false);
    check_gradient(gx, numeric, c.name);

    // accumulate = true adds onto what gx holds
    std::vector<double> acc(7, 0.25), expected(7);
    for (int i = 0; i < 7; ++i) expected[i] = 0.25 + gx[i];
    K().unary_backward(c.op, c.param, x.data(), y.data(), w.data(), acc.data(), 7, true);
    testing::check_all_close(acc, expected, 1e-15, 0, "accumulated");
  }
}

TEST_CASE("gradcheck softmax and log-softmax") {
  for (bool log : {false, true}) {
    for (auto [rows, n] : {std::pair<i64, i64>{3, 7}, {2, 1}, {1, 3}}) {
      CAPTURE(log);
      CAPTURE(n);
      std::vector<double> x = random_vector(rows * n, 20 + n, -3, 3), y(rows * n);
      const std::vector<double> w = random_vector(rows * n, 21);
      auto loss = [&] {
        K().softmax_forward(x.data(), y.data(), rows, n, log);
        return weighted_sum(w, y);
      };
      const auto numeric = numeric_gradient(x, loss);
      K().softmax_forward(x.data(), y.data(), rows, n, log);
      std::vector<double> gx(rows * n);
      K().softmax_backward(y.data(), w.data(), gx.data(), rows, n, log);
      check_gradient(gx, numeric, log ? "log_softmax" : "softmax");
    }
  }
}

TEST_CASE("gradcheck cross-entropy, with ignored rows") {
  const i64 rows = 5, V = 7;
  const std::vector<int32_t> targets = {3, -1, 0, 6, -1};
  std::vector<double> logits = random_vector(rows * V, 30, -3, 3), lse(rows);
  double loss = 0, count = 0;
  const double gloss = 1.7;  // the weight w of the single output
  auto L = [&] {
    K().cross_entropy_forward(logits.data(), targets.data(), rows, V, -1, lse.data(), &loss,
                              &count);
    return gloss * loss;
  };
  const auto numeric = numeric_gradient(logits, L);
  L();
  CHECK(count == 3.0);
  std::vector<double> g(rows * V);
  K().cross_entropy_backward(logits.data(), targets.data(), lse.data(), &count, &gloss, rows, V, -1,
                             g.data());
  check_gradient(g, numeric, "cross_entropy");
}

TEST_CASE("gradcheck layer norm: gx, ggamma, gbeta") {
  for (auto [rows, D] : {std::pair<i64, i64>{3, 7}, {1, 5}, {4, 1}}) {
    CAPTURE(rows);
    CAPTURE(D);
    const double eps = 1e-5;
    std::vector<double> x = random_vector(rows * D, 40 + D, -2, 2);
    std::vector<double> gamma = random_vector(D, 41, 0.5, 1.5), beta = random_vector(D, 42);
    std::vector<double> y(rows * D), mean(rows), rstd(rows);
    const std::vector<double> w = random_vector(rows * D, 43);
    for (bool affine : {true, false}) {
      CAPTURE(affine);
      const double* g = affine ? gamma.data() : nullptr;
      const double* b = affine ? beta.data() : nullptr;
      auto loss = [&] {
        K().layer_norm_forward(x.data(), g, b, rows, D, eps, y.data(), mean.data(), rstd.data());
        return weighted_sum(w, y);
      };
      const auto num_x = numeric_gradient(x, loss);
      loss();
      std::vector<double> gx(rows * D), ggamma(D), gbeta(D);
      K().layer_norm_backward(x.data(), g, mean.data(), rstd.data(), w.data(), rows, D, gx.data(),
                              affine ? ggamma.data() : nullptr, affine ? gbeta.data() : nullptr);
      check_gradient(gx, num_x, "layer_norm gx");
      if (affine) {
        check_gradient(ggamma, numeric_gradient(gamma, loss), "layer_norm ggamma");
        check_gradient(gbeta, numeric_gradient(beta, loss), "layer_norm gbeta");
      }
    }
  }
}

TEST_CASE("gradcheck embedding backward (repeated and unused ids)") {
  const i64 n = 6, V = 5, D = 3;
  const std::vector<int32_t> ids = {4, 1, 4, 0, 1, 4};  // id 2 and 3 never used
  std::vector<double> table = random_vector(V * D, 50), out(n * D);
  const std::vector<double> w = random_vector(n * D, 51);
  auto loss = [&] {
    K().embedding_forward(table.data(), ids.data(), n, V, D, out.data());
    return weighted_sum(w, out);
  };
  const auto numeric = numeric_gradient(table, loss);
  std::vector<double> gtable(V * D, 123.0);  // overwritten, not accumulated
  K().embedding_backward(ids.data(), w.data(), n, V, D, gtable.data());
  check_gradient(gtable, numeric, "embedding");
}

TEST_CASE("gradcheck dropout backward") {
  const i64 n = 11;
  std::vector<double> x = random_vector(n, 60), y(n);
  const std::vector<double> w = random_vector(n, 61);
  for (float p : {0.0f, 0.3f, 0.7f}) {
    CAPTURE(p);
    auto loss = [&] {
      K().dropout_forward(x.data(), y.data(), n, p, 1234, 17);
      return weighted_sum(w, y);
    };
    const auto numeric = numeric_gradient(x, loss);
    std::vector<double> gx(n);
    K().dropout_backward(w.data(), gx.data(), n, p, 1234, 17);
    check_gradient(gx, numeric, "dropout");
  }
}

TEST_CASE("gradcheck attention, causal and not") {
  struct Shape {
    i64 BH, L, dh;
  };
  for (Shape s : {Shape{2, 5, 3}, Shape{1, 1, 2}, Shape{3, 7, 1}}) {
    for (bool causal : {false, true}) {
      CAPTURE(s.L);
      CAPTURE(causal);
      const i64 size = s.BH * s.L * s.dh;
      const double scale = 1.0 / std::sqrt(double(s.dh));
      std::vector<double> q = random_vector(size, 70, -1.5, 1.5),
                          k = random_vector(size, 71, -1.5, 1.5), v = random_vector(size, 72);
      std::vector<double> out(size), lse(s.BH * s.L);
      const std::vector<double> w = random_vector(size, 73);
      auto loss = [&] {
        K().attention_forward(q.data(), k.data(), v.data(), s.BH, s.L, s.dh, scale, causal,
                              out.data(), lse.data());
        return weighted_sum(w, out);
      };
      const auto num_q = numeric_gradient(q, loss);
      const auto num_k = numeric_gradient(k, loss);
      const auto num_v = numeric_gradient(v, loss);
      loss();
      std::vector<double> gq(size, 9.0), gk(size, 9.0), gv(size, 9.0);  // overwritten
      K().attention_backward(q.data(), k.data(), v.data(), out.data(), lse.data(), w.data(), s.BH,
                             s.L, s.dh, scale, causal, gq.data(), gk.data(), gv.data());
      check_gradient(gq, num_q, "attention gq");
      check_gradient(gk, num_k, "attention gk");
      check_gradient(gv, num_v, "attention gv");
    }
  }
}

// The Plücker shapes: r = 4 and 5, offsets {1, 2, 4} with L = 3 < 4, so offset 4 is never
// valid, position 0 has no partner at all and position 1 only one.
struct PluckerCase {
  i64 B = 2, L = 3, r;
  std::vector<int32_t> offsets = {1, 2, 4};
  i64 m() const { return i64(offsets.size()); }
  i64 P() const { return r * (r - 1) / 2; }
};

// An eps that splits the valid norms of z in two, far (relative to the finite-difference
// step) from every norm, so both branches of max(||p||, eps) are exercised and none is
// straddled.
double eps_between_norms(const PluckerCase& c, const std::vector<double>& z) {
  std::vector<double> out(c.B * c.L * c.m() * c.P()), norms(c.B * c.L * c.m());
  K().plucker_forward(z.data(), c.B, c.L, c.r, c.offsets.data(), c.m(), 0.0, out.data(),
                      norms.data());
  std::vector<double> valid;
  for (double n : norms)
    if (n > 0) valid.push_back(n);
  std::sort(valid.begin(), valid.end());
  const std::size_t half = valid.size() / 2;
  REQUIRE(half >= 1);
  REQUIRE(valid[half] - valid[half - 1] > 1e-3);
  return 0.5 * (valid[half - 1] + valid[half]);
}

TEST_CASE("gradcheck Plücker pairing and its fused mean") {
  for (i64 r : {4, 5}) {
    PluckerCase c;
    c.r = r;
    std::vector<double> z = random_vector(c.B * c.L * r, 80 + r);
    // eps tiny (normalised branch everywhere), eps above every norm (the constant 1/eps
    // branch everywhere), and eps splitting the norms (both).
    for (double eps : {1e-9, 10.0, eps_between_norms(c, z)}) {
      CAPTURE(r);
      CAPTURE(eps);
      const i64 rows = c.B * c.L * c.m();
      std::vector<double> out(rows * c.P()), norms(rows), gz(z.size(), 5.0);

      const std::vector<double> w = random_vector(rows * c.P(), 81);
      auto loss = [&] {
        K().plucker_forward(z.data(), c.B, c.L, r, c.offsets.data(), c.m(), eps, out.data(),
                            norms.data());
        return weighted_sum(w, out);
      };
      const auto numeric = numeric_gradient(z, loss);
      loss();
      K().plucker_backward(z.data(), c.B, c.L, r, c.offsets.data(), c.m(), eps, out.data(),
                           norms.data(), w.data(), gz.data());
      check_gradient(gz, numeric, "plucker");

      std::vector<double> mean(c.B * c.L * c.P());
      const std::vector<double> w_mean = random_vector(mean.size(), 82);
      auto mean_loss = [&] {
        K().plucker_mean_forward(z.data(), c.B, c.L, r, c.offsets.data(), c.m(), eps, mean.data(),
                                 norms.data());
        return weighted_sum(w_mean, mean);
      };
      const auto numeric_mean = numeric_gradient(z, mean_loss);
      mean_loss();
      std::vector<double> gz_mean(z.size(), 5.0);
      K().plucker_mean_backward(z.data(), c.B, c.L, r, c.offsets.data(), c.m(), eps, norms.data(),
                                w_mean.data(), gz_mean.data());
      check_gradient(gz_mean, numeric_mean, "plucker_mean");
    }
  }
}

}  // namespace
}  // namespace wedge::kernels
