// Reference kernels on small cases whose answers are worked out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "kernels/tables.h"
#include "test_ref_helpers.h"

namespace wedge::kernels {
namespace {

using std::int32_t;
using testing::check_all_close;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInvSqrt2 = 1.0 / std::sqrt(2.0);

TEST_CASE("ref softmax and log-softmax of [1, 2, 3]") {
  const auto& k = ref_table_f64();
  // e^x / (e + e^2 + e^3); log-softmax = x - log(e + e^2 + e^3) = x - 3.40760596444438
  const std::vector<double> x = {1, 2, 3, 1, 2, 3};
  std::vector<double> y(6), logy(6);
  k.softmax_forward(x.data(), y.data(), 2, 3, false);
  k.softmax_forward(x.data(), logy.data(), 2, 3, true);
  const std::vector<double> expected = {0.09003057317038046, 0.24472847105479767,
                                        0.6652409557748219};
  check_all_close(std::vector<double>(y.begin(), y.begin() + 3), expected, 1e-15, 0,
                  "softmax row 0");
  check_all_close(std::vector<double>(y.begin() + 3, y.end()), expected, 1e-15, 0, "softmax row 1");
  check_all_close(logy,
                  std::vector<double>{-2.40760596444438, -1.40760596444438, -0.40760596444438,
                                      -2.40760596444438, -1.40760596444438, -0.40760596444438},
                  1e-13, 0, "log-softmax");

  SUBCASE("huge logits stay finite (the row max is subtracted)") {
    const std::vector<double> big = {1001, 1002, 1003};
    std::vector<double> out(3);
    k.softmax_forward(big.data(), out.data(), 1, 3, false);
    check_all_close(out, expected, 1e-15, 0, "softmax of x + 1000");
    const std::vector<float> bigf = {1001, 1002, 1003};
    std::vector<float> outf(3);
    ref_table_f32().softmax_forward(bigf.data(), outf.data(), 1, 3, true);
    check_all_close(outf,
                    std::vector<double>{-2.40760596444438, -1.40760596444438, -0.40760596444438},
                    1e-6, 0, "float log-softmax of x + 1000");
  }
  SUBCASE("in place") {
    std::vector<double> inplace = x;
    k.softmax_forward(inplace.data(), inplace.data(), 2, 3, false);
    check_all_close(inplace, y, 0, 0, "in-place softmax");
  }
}

TEST_CASE("ref layer norm of a 2x3 case") {
  const auto& k = ref_table_f64();
  // Row 0 = [1,2,3]: mean 2, biased var 2/3.  Row 1 = [2,4,6]: mean 4, var 8/3.
  // Both normalise to xhat = [-sqrt(3/2), 0, sqrt(3/2)] when eps = 0.
  const std::vector<double> x = {1, 2, 3, 2, 4, 6};
  const std::vector<double> gamma = {1, 2, 3}, beta = {0, 1, -1};
  std::vector<double> y(6), mean(2), rstd(2);
  const double s = std::sqrt(1.5);
  k.layer_norm_forward(x.data(), gamma.data(), beta.data(), 2, 3, 0.0, y.data(), mean.data(),
                       rstd.data());
  check_all_close(mean, std::vector<double>{2, 4}, 1e-15, 0, "mean");
  check_all_close(rstd, std::vector<double>{std::sqrt(1.5), std::sqrt(3.0 / 8.0)}, 1e-15, 0,
                  "rstd");
  // y = gamma * xhat + beta
  check_all_close(y, std::vector<double>{-s, 1, 3 * s - 1, -s, 1, 3 * s - 1}, 1e-14, 0, "y");

  SUBCASE("eps enters as 1 / sqrt(var + eps), no affine") {
    std::vector<double> y2(6);
    k.layer_norm_forward(x.data(), nullptr, nullptr, 2, 3, 0.5, y2.data(), mean.data(),
                         rstd.data());
    const double r0 = 1 / std::sqrt(2.0 / 3.0 + 0.5), r1 = 1 / std::sqrt(8.0 / 3.0 + 0.5);
    check_all_close(rstd, std::vector<double>{r0, r1}, 1e-15, 0, "rstd with eps");
    check_all_close(y2, std::vector<double>{-r0, 0, r0, -2 * r1, 0, 2 * r1}, 1e-15, 0,
                    "y with eps");
  }
}

TEST_CASE("ref cross-entropy with an ignored row") {
  const auto& k = ref_table_f64();
  const std::vector<double> logits = {1, 2,  3,   // target 2: nll = 0.40760596444438
                                      5, -7, 9,   // ignored
                                      0, 0,  0};  // target 1: nll = log 3
  const std::vector<int32_t> targets = {2, -100, 1};
  std::vector<double> lse(3);
  double loss = kNaN, count = kNaN;
  k.cross_entropy_forward(logits.data(), targets.data(), 3, 3, -100, lse.data(), &loss, &count);
  CHECK(count == 2.0);
  CHECK(loss == doctest::Approx((0.40760596444438 + std::log(3.0)) / 2).epsilon(1e-13));
  const double lse1 = 9 + std::log(std::exp(-4.0) + std::exp(-16.0) + 1.0);
  check_all_close(lse, std::vector<double>{3.40760596444438, lse1, std::log(3.0)}, 1e-13, 0, "lse");

  SUBCASE("backward: (softmax - onehot) * gloss / count, zero on the ignored row") {
    std::vector<double> g(9, kNaN);
    const double gloss = 3.0;
    k.cross_entropy_backward(logits.data(), targets.data(), lse.data(), &count, &gloss, 3, 3, -100,
                             g.data());
    const double c = gloss / 2;
    check_all_close(
        g,
        std::vector<double>{0.09003057317038046 * c, 0.24472847105479767 * c,
                            (0.6652409557748219 - 1) * c, 0, 0, 0, c / 3, (1.0 / 3 - 1) * c, c / 3},
        1e-14, 0, "glogits");
  }
  SUBCASE("every row ignored: loss 0, count 0, gradient 0") {
    const std::vector<int32_t> none = {-100, -100, -100};
    k.cross_entropy_forward(logits.data(), none.data(), 3, 3, -100, lse.data(), &loss, &count);
    CHECK(loss == 0.0);
    CHECK(count == 0.0);
    std::vector<double> g(9, kNaN);
    const double gloss = 1.0;
    k.cross_entropy_backward(logits.data(), none.data(), lse.data(), &count, &gloss, 3, 3, -100,
                             g.data());
    check_all_close(g, std::vector<double>(9, 0.0), 0, 0, "glogits");
  }
}

TEST_CASE("ref Plücker pairing, r = 3, by hand") {
  const auto& k = ref_table_f64();
  // r = 3 -> P = 3 pairs in the order (0,1), (0,2), (1,2); p_ab = u_a v_b - u_b v_a.
  const std::vector<double> z = {1, 0, 0,   // t = 0
                                 0, 1, 0,   // t = 1
                                 1, 1, 1,   // t = 2
                                 2, 2, 2};  // t = 3 (parallel to t = 2)
  const std::vector<int32_t> offsets = {1, 2};
  const double eps = 1e-3;
  std::vector<double> out(4 * 2 * 3, kNaN), norms(4 * 2, kNaN);
  k.plucker_forward(z.data(), 1, 4, 3, offsets.data(), 2, eps, out.data(), norms.data());
  const double h = kInvSqrt2;
  check_all_close(
      out,
      std::vector<double>{
          0,  0, 0,  0,  0,  0,    // t=0: no partner for either offset
          -1, 0, 0,  0,  0,  0,    // t=1: u=(0,1,0), v=(1,0,0): p = (-1, 0, 0); Δ=2 invalid
          h,  0, -h, -h, -h, 0,    // t=2: v=(0,1,0): p=(1,0,-1);  v=(1,0,0): p=(-1,-1,0)
          0,  0, 0,  h,  0,  -h},  // t=3: v=(1,1,1): p=0 -> 0/eps; v=(0,1,0): p=(2,0,-2)
      1e-15, 0, "plucker out");
  check_all_close(
      norms, std::vector<double>{0, 0, 1, 0, std::sqrt(2.0), std::sqrt(2.0), eps, std::sqrt(8.0)},
      1e-15, 0, "plucker norms");

  SUBCASE("mean over the valid offsets only") {
    std::vector<double> mean(4 * 3, kNaN), mean_norms(8, kNaN);
    k.plucker_mean_forward(z.data(), 1, 4, 3, offsets.data(), 2, eps, mean.data(),
                           mean_norms.data());
    check_all_close(mean,
                    std::vector<double>{0, 0, 0,            // no valid offset
                                        -1, 0, 0,           // one valid offset
                                        0, -h / 2, -h / 2,  // (p1 + p2) / 2
                                        h / 2, 0, -h / 2},
                    1e-15, 0, "plucker mean");
    check_all_close(mean_norms, norms, 1e-15, 0, "plucker mean norms");
  }
}

// The Grassmann-Plücker relations: a vector p of the P = r(r-1)/2 coordinates is the
// Plücker vector of a plane exactly when p_ij p_kl - p_ik p_jl + p_il p_jk = 0 for every
// i < j < k < l. Each normalised pair satisfies them. So does the mean over offsets,
// though a sum of planes in general does not: every pair at position t shares u = z_t,
// so the mean is u ^ w with w the partners' weighted sum, the plane of z_t and w.
double largest_plucker_relation(const double* p, std::int64_t r) {
  auto at = [&](std::int64_t i, std::int64_t j) { return p[i * (r - 1) - i * (i - 1) / 2 + (j - i - 1)]; };
  double worst = 0;
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = i + 1; j < r; ++j)
      for (std::int64_t k = j + 1; k < r; ++k)
        for (std::int64_t l = k + 1; l < r; ++l)
          worst = std::max(worst, std::abs(at(i, j) * at(k, l) - at(i, k) * at(j, l) + at(i, l) * at(j, k)));
  return worst;
}

TEST_CASE("Plücker vectors satisfy the Grassmann-Plücker relations, and so does their mean over offsets") {
  const std::int64_t B = 2, L = 9, r = 6, P = r * (r - 1) / 2;
  const std::vector<int32_t> offsets = {1, 2, 4};
  const auto m = static_cast<std::int64_t>(offsets.size());
  std::vector<double> z(static_cast<std::size_t>(B * L * r));
  for (std::size_t i = 0; i < z.size(); ++i) z[i] = std::sin(0.7 * double(i) + 0.3) + 0.1 * std::cos(3.1 * double(i));
  std::vector<float> zf(z.begin(), z.end());
  std::vector<double> out(static_cast<std::size_t>(B * L * m * P)), norms(static_cast<std::size_t>(B * L * m));
  ref_table_f64().plucker_forward(z.data(), B, L, r, offsets.data(), m, 1e-12, out.data(), norms.data());
  std::vector<float> outf(out.size()), normsf(norms.size());
  cpu_table_f32().plucker_forward(zf.data(), B, L, r, offsets.data(), m, 1e-6f, outf.data(), normsf.data());
  int planes = 0;
  for (std::int64_t row = 0; row < B * L * m; ++row) {
    if (norms[static_cast<std::size_t>(row)] == 0) continue;  // no partner: zeros
    ++planes;
    const double* p = out.data() + row * P;
    CHECK(largest_plucker_relation(p, r) < 1e-14);
    double length = 0;
    for (std::int64_t k = 0; k < P; ++k) length += p[k] * p[k];
    CHECK(length == doctest::Approx(1.0).epsilon(1e-14));  // normalised
    const std::vector<double> pf(outf.begin() + row * P, outf.begin() + (row + 1) * P);
    CHECK(largest_plucker_relation(pf.data(), r) < 1e-6);
  }
  CHECK(planes == B * (L - 1 + L - 2 + L - 4));
  // The mean of unit vectors of different planes: a plane again, of length below 1. A
  // control shows the relations can fail: the sum of two planes that share no vector.
  std::vector<double> mean(static_cast<std::size_t>(B * L * P)), mean_norms(norms.size());
  ref_table_f64().plucker_mean_forward(z.data(), B, L, r, offsets.data(), m, 1e-12, mean.data(), mean_norms.data());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 1; t < L; ++t) {
      const double* p = mean.data() + (b * L + t) * P;
      CHECK(largest_plucker_relation(p, r) < 1e-14);
      double length = 0;
      for (std::int64_t k = 0; k < P; ++k) length += p[k] * p[k];
      if (t >= 4) CHECK(length < 0.99);  // three different planes averaged
    }
  std::vector<float> meanf(mean.size()), mean_normsf(norms.size());  // the fused u ^ w kernel
  cpu_table_f32().plucker_mean_forward(zf.data(), B, L, r, offsets.data(), m, 1e-6f, meanf.data(), mean_normsf.data());
  for (std::int64_t row = 0; row < B * L; ++row) {
    const std::vector<double> pf(meanf.begin() + row * P, meanf.begin() + (row + 1) * P);
    CHECK(largest_plucker_relation(pf.data(), r) < 1e-6);
  }
  const std::vector<double> e01_plus_e23 = {1, 0, 0, 0, 0, 1};  // r = 4: p_01 = p_23 = 1
  CHECK(largest_plucker_relation(e01_plus_e23.data(), 4) == 1.0);
}

TEST_CASE("ref GELU (exact erf form) and its derivative at known points") {
  const auto& k = ref_table_f64();
  // gelu(x) = x Phi(x);  Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208
  const std::vector<double> x = {0, 1, -1, 2, -3};
  std::vector<double> y(5);
  k.unary(UnaryOp::Gelu, 0, x.data(), y.data(), 5);
  check_all_close(y,
                  std::vector<double>{0, 0.8413447460685429, -0.15865525393145707,
                                      1.9544997361036416, -0.004049694094890285},
                  1e-15, 1e-12, "gelu");
  // gelu'(x) = Phi(x) + x phi(x);  phi(1) = 0.24197072451914337
  std::vector<double> gx(5), ones(5, 1.0);
  k.unary_backward(UnaryOp::Gelu, 0, x.data(), y.data(), ones.data(), gx.data(), 5, false);
  CHECK(gx[0] == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(gx[1] == doctest::Approx(0.8413447460685429 + 0.24197072451914337).epsilon(1e-14));
  CHECK(gx[2] == doctest::Approx(0.15865525393145707 - 0.24197072451914337).epsilon(1e-14));
}

TEST_CASE("ref unary maps at chosen points") {
  const auto& k = ref_table_f64();
  auto apply = [&](UnaryOp op, double param, std::vector<double> x) {
    std::vector<double> y(x.size());
    k.unary(op, param, x.data(), y.data(), i64(x.size()));
    return y;
  };
  check_all_close(apply(UnaryOp::Neg, 0, {1.5, -2}), std::vector<double>{-1.5, 2}, 0, 0, "neg");
  check_all_close(apply(UnaryOp::Exp, 0, {0, 1}), std::vector<double>{1, std::numbers::e}, 1e-15, 0,
                  "exp");
  check_all_close(apply(UnaryOp::Log, 0, {1, std::numbers::e}), std::vector<double>{0, 1}, 1e-15, 0,
                  "log");
  check_all_close(apply(UnaryOp::Sqrt, 0, {4, 2.25}), std::vector<double>{2, 1.5}, 0, 0, "sqrt");
  check_all_close(apply(UnaryOp::Tanh, 0, {0, 1}), std::vector<double>{0, 0.7615941559557649},
                  1e-15, 0, "tanh");
  // sigmoid(-800) must be a tiny number, not 0/0 from exp(800) overflowing
  check_all_close(apply(UnaryOp::Sigmoid, 0, {0, 2, -800, 800}),
                  std::vector<double>{0.5, 0.8807970779778823, 0, 1}, 1e-15, 0, "sigmoid");
  check_all_close(apply(UnaryOp::Relu, 0, {-1, 0, 2}), std::vector<double>{0, 0, 2}, 0, 0, "relu");
  check_all_close(apply(UnaryOp::AddScalar, 0.5, {1, -2}), std::vector<double>{1.5, -1.5}, 0, 0,
                  "add");
  check_all_close(apply(UnaryOp::MulScalar, -3, {1, -2}), std::vector<double>{-3, 6}, 0, 0, "mul");
  check_all_close(apply(UnaryOp::PowScalar, 3, {2, -2}), std::vector<double>{8, -8}, 0, 0, "pow");
  check_all_close(apply(UnaryOp::PowScalar, 0.5, {9}), std::vector<double>{3}, 0, 0, "pow 0.5");
  check_all_close(apply(UnaryOp::Abs, 0, {-3, 2}), std::vector<double>{3, 2}, 0, 0, "abs");
  // silu(x) = x sigmoid(x): sigmoid(1) = 0.7310585786300049, sigmoid(-1) = 0.2689414213699951
  check_all_close(apply(UnaryOp::Silu, 0, {0, 1, -1, -800}),
                  std::vector<double>{0, 0.7310585786300049, -0.2689414213699951, 0}, 1e-15, 1e-15, "silu");
  // softplus(0) = ln 2; softplus(+-800) must be 800 and e^-800 (underflows to 0), never inf
  // from e^800; softplus(-30) = log1p(e^-30) = 9.357622968839737e-14 to full precision.
  check_all_close(apply(UnaryOp::Softplus, 0, {0, 800, -800, -30, 2}),
                  std::vector<double>{std::numbers::ln2, 800, 0, 9.357622968839737e-14, 2.1269280110429727},
                  1e-300, 1e-15, "softplus");

  SUBCASE("PowScalar derivative: c x^(c-1), and 0 for c = 0 even at x = 0") {
    const std::vector<double> x = {0, 2, 3};
    std::vector<double> y(3), gx(3), gy = {1, 1, 2};
    k.unary(UnaryOp::PowScalar, 3, x.data(), y.data(), 3);
    k.unary_backward(UnaryOp::PowScalar, 3, x.data(), y.data(), gy.data(), gx.data(), 3, false);
    check_all_close(gx, std::vector<double>{0, 12, 54}, 0, 0, "d x^3");
    k.unary(UnaryOp::PowScalar, 0, x.data(), y.data(), 3);
    k.unary_backward(UnaryOp::PowScalar, 0, x.data(), y.data(), gy.data(), gx.data(), 3, false);
    check_all_close(gx, std::vector<double>{0, 0, 0}, 0, 0, "d x^0");
  }
}

// A 2x3 times 3x2 product every way it can be stored.
TEST_CASE("ref gemm 2x3 * 3x2 with all four transpose combinations") {
  const auto& k = ref_table_f64();
  const std::vector<double> A = {1, 2, 3, 4, 5, 6};      // 2x3
  const std::vector<double> At = {1, 4, 2, 5, 3, 6};     // its transpose, 3x2
  const std::vector<double> B = {7, 8, 9, 10, 11, 12};   // 3x2
  const std::vector<double> Bt = {7, 9, 11, 8, 10, 12};  // its transpose, 2x3
  const std::vector<double> AB = {58, 64, 139, 154};
  for (Trans ta : {Trans::N, Trans::T}) {
    for (Trans tb : {Trans::N, Trans::T}) {
      CAPTURE(int(ta));
      CAPTURE(int(tb));
      // C has a padded leading dimension (3) to check ldc; the pad must stay untouched.
      std::vector<double> C = {kNaN, kNaN, -1, kNaN, kNaN, -1};
      GemmArgs<double> g;
      g.trans_a = ta;
      g.trans_b = tb;
      g.m = 2, g.n = 2, g.k = 3;
      g.a = ta == Trans::N ? A.data() : At.data();
      g.lda = ta == Trans::N ? 3 : 2;
      g.b = tb == Trans::N ? B.data() : Bt.data();
      g.ldb = tb == Trans::N ? 2 : 3;
      g.c = C.data();
      g.ldc = 3;
      k.gemm(g);  // beta = 0: the NaNs in C are never read
      check_all_close(C, std::vector<double>{58, 64, -1, 139, 154, -1}, 0, 0, "C = A B");
      g.alpha = 2, g.beta = -0.5;
      k.gemm(g);  // 2 AB - 0.5 AB = 1.5 AB
      check_all_close(C, std::vector<double>{87, 96, -1, 208.5, 231, -1}, 0, 0, "C = 2AB - C/2");
    }
  }

  SUBCASE("batch 2 with B broadcast (stride 0)") {
    std::vector<double> A2 = A;
    for (double a : A) A2.push_back(-a);  // the second batch entry is -A
    std::vector<double> C(8, kNaN);
    GemmArgs<double> g;
    g.m = 2, g.n = 2, g.k = 3;
    g.a = A2.data(), g.lda = 3, g.stride_a = 6;
    g.b = B.data(), g.ldb = 2, g.stride_b = 0;
    g.c = C.data(), g.ldc = 2, g.stride_c = 4;
    g.batch = 2;
    k.gemm(g);
    check_all_close(C, std::vector<double>{58, 64, 139, 154, -58, -64, -139, -154}, 0, 0,
                    "batched C");
  }
  SUBCASE("float table") {
    const std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end());
    std::vector<float> C(4);
    GemmArgs<float> g;
    g.m = 2, g.n = 2, g.k = 3;
    g.a = Af.data(), g.lda = 3, g.b = Bf.data(), g.ldb = 2, g.c = C.data(), g.ldc = 2;
    ref_table_f32().gemm(g);
    check_all_close(C, AB, 0, 0, "float C");
  }
}

TEST_CASE("ref reduce: sum and max with the first argmax") {
  const auto& k = ref_table_f64();
  // x has shape (outer 2, n 3, inner 2); reduce over n.
  const std::vector<double> x = {1,  5, 4,  5, 4,  -1,  // o = 0
                                 -2, 0, -3, 7, -2, 7};  // o = 1
  std::vector<double> y(4);
  std::vector<int32_t> idx(4, -9);
  k.reduce(ReduceOp::Sum, x.data(), y.data(), nullptr, 2, 3, 2);
  check_all_close(y, std::vector<double>{9, 9, -7, 14}, 0, 0, "sum");
  k.reduce(ReduceOp::Max, x.data(), y.data(), idx.data(), 2, 3, 2);
  check_all_close(y, std::vector<double>{4, 5, -2, 7}, 0, 0, "max");
  // ties: the first index wins (4 at i=1 and i=2; 5 at i=0 and i=1; ...)
  CHECK(idx == std::vector<int32_t>{1, 0, 0, 1});
  k.reduce(ReduceOp::Max, x.data(), y.data(), nullptr, 2, 3, 2);  // idx may be null
  check_all_close(y, std::vector<double>{4, 5, -2, 7}, 0, 0, "max without idx");
}

TEST_CASE("ref binary ops with broadcasting") {
  const auto& k = ref_table_f64();
  const std::vector<double> a = {1, 2, 3, 4, 5, 6};  // (2, 3)
  const std::vector<double> row = {10, 20, 30};      // (3,) broadcast over rows
  const std::vector<double> col = {2, -1};           // (2, 1) broadcast over columns
  BroadcastLayout layout;
  layout.ndim = 2;
  layout.shape[0] = 2, layout.shape[1] = 3;
  layout.stride_a[0] = 3, layout.stride_a[1] = 1;
  layout.stride_b[0] = 0, layout.stride_b[1] = 1;
  std::vector<double> out(6);
  k.binary(BinaryOp::Add, layout, a.data(), row.data(), out.data());
  check_all_close(out, std::vector<double>{11, 22, 33, 14, 25, 36}, 0, 0, "a + row");
  k.binary(BinaryOp::Sub, layout, a.data(), row.data(), out.data());
  check_all_close(out, std::vector<double>{-9, -18, -27, -6, -15, -24}, 0, 0, "a - row");
  k.binary(BinaryOp::Div, layout, a.data(), row.data(), out.data());
  check_all_close(out, std::vector<double>{0.1, 0.1, 0.1, 0.4, 0.25, 0.2}, 1e-16, 0, "a / row");

  layout.stride_b[0] = 1, layout.stride_b[1] = 0;
  k.binary(BinaryOp::Mul, layout, a.data(), col.data(), out.data());
  check_all_close(out, std::vector<double>{2, 4, 6, -4, -5, -6}, 0, 0, "a * col");
  k.binary(BinaryOp::Pow, layout, a.data(), col.data(), out.data());
  check_all_close(out, std::vector<double>{1, 4, 9, 0.25, 0.2, 1.0 / 6}, 1e-16, 0, "a ^ col");

  SUBCASE("both operands broadcast: (2,1) max/min (1,3) -> (2,3)") {
    const std::vector<double> c = {0, 5}, r = {-1, 3, 9};
    BroadcastLayout outer;
    outer.ndim = 2;
    outer.shape[0] = 2, outer.shape[1] = 3;
    outer.stride_a[0] = 1, outer.stride_a[1] = 0;
    outer.stride_b[0] = 0, outer.stride_b[1] = 1;
    k.binary(BinaryOp::Max, outer, c.data(), r.data(), out.data());
    check_all_close(out, std::vector<double>{0, 3, 9, 5, 5, 9}, 0, 0, "max");
    k.binary(BinaryOp::Min, outer, c.data(), r.data(), out.data());
    check_all_close(out, std::vector<double>{-1, 0, 0, -1, 3, 5}, 0, 0, "min");
  }
  SUBCASE("0-d: one scalar") {
    BroadcastLayout scalar;
    const double x = 3, y = 4;
    double z = 0;
    k.binary(BinaryOp::Mul, scalar, &x, &y, &z);
    CHECK(z == 12);
  }
}

TEST_CASE("ref strided copy of a transpose, every element size") {
  const auto& mem = ref_memory_table();
  // src is 2x3 row-major; dst = src^T, 3x2 row-major. Walk dst's index space (i, j):
  // dst[i, j] = src[j, i], so src strides are (1, 3) and dst strides (2, 1).
  CopyLayout layout;
  layout.ndim = 2;
  layout.shape[0] = 3, layout.shape[1] = 2;
  layout.stride_src[0] = 1, layout.stride_src[1] = 3;
  layout.stride_dst[0] = 2, layout.stride_dst[1] = 1;
  auto transpose = [&](auto zero) {
    using E = decltype(zero);
    const std::vector<E> src = {E(1), E(2), E(3), E(4), E(5), E(6)};
    std::vector<E> dst(6, E(0));
    mem.strided_copy(layout, src.data(), dst.data(), int(sizeof(E)));
    return dst == std::vector<E>{E(1), E(4), E(2), E(5), E(3), E(6)};
  };
  CHECK(transpose(std::uint8_t{}));
  CHECK(transpose(std::int16_t{}));
  CHECK(transpose(float{}));
  CHECK(transpose(double{}));

  SUBCASE("3-d gather: every other column of a (2,2,4) block") {
    std::vector<int32_t> src(16);
    for (int i = 0; i < 16; ++i) src[i] = i;
    CopyLayout slice;
    slice.ndim = 3;
    slice.shape[0] = 2, slice.shape[1] = 2, slice.shape[2] = 2;
    slice.stride_src[0] = 8, slice.stride_src[1] = 4, slice.stride_src[2] = 2;
    slice.stride_dst[0] = 4, slice.stride_dst[1] = 2, slice.stride_dst[2] = 1;
    std::vector<int32_t> dst(8, -1);
    mem.strided_copy(slice, src.data(), dst.data(), 4);
    CHECK(dst == std::vector<int32_t>{0, 2, 4, 6, 8, 10, 12, 14});
  }
}

TEST_CASE("ref cast between f32, f64 and i32") {
  const auto& mem = ref_memory_table();
  const std::vector<float> f = {-2.7f, -0.5f, 0.0f, 2.7f, 3.0f};
  std::vector<int32_t> i(5);
  mem.cast(f.data(), 0, i.data(), 2, 5);
  CHECK(i == std::vector<int32_t>{-2, 0, 0, 2, 3});  // truncation toward zero
  std::vector<double> d(5);
  mem.cast(i.data(), 2, d.data(), 1, 5);
  CHECK(d == std::vector<double>{-2, 0, 0, 2, 3});
  const std::vector<double> precise = {0.1, 1e300, -16777217.0};
  std::vector<float> narrowed(3);
  mem.cast(precise.data(), 1, narrowed.data(), 0, 3);
  CHECK(narrowed[0] == 0.1f);
  CHECK(std::isinf(narrowed[1]));
  CHECK(narrowed[2] == -16777216.0f);  // rounded to the nearest float (ties to even)
  const std::vector<double> extreme = {1e20, -1e20, kNaN};
  std::vector<int32_t> saturated(3);
  mem.cast(extreme.data(), 1, saturated.data(), 2, 3);
  CHECK(saturated == std::vector<int32_t>{2147483647, -2147483647 - 1, 0});
}

TEST_CASE("ref fill, sum of squares, embedding lookup") {
  const auto& k = ref_table_f64();
  std::vector<double> y(4);
  k.fill(y.data(), 2.5, 4);
  CHECK(y == std::vector<double>{2.5, 2.5, 2.5, 2.5});

  const std::vector<double> x = {1, -2, 3};
  double out = 100;
  k.sum_squares(x.data(), 3, &out, false);
  CHECK(out == 14);
  k.sum_squares(x.data(), 3, &out, true);
  CHECK(out == 28);

  const std::vector<double> table = {0, 1, 10, 11, 20, 21};  // V = 3, D = 2
  const std::vector<int32_t> ids = {2, 0, 2};
  std::vector<double> rows(6);
  k.embedding_forward(table.data(), ids.data(), 3, 3, 2, rows.data());
  CHECK(rows == std::vector<double>{20, 21, 0, 1, 20, 21});
  const std::vector<double> gout = {1, 2, 3, 4, 5, 6};
  std::vector<double> gtable(6, kNaN);
  k.embedding_backward(ids.data(), gout.data(), 3, 3, 2, gtable.data());
  CHECK(gtable == std::vector<double>{3, 4, 0, 0, 6, 8});  // id 2 twice: rows 0 and 2 add
}

}  // namespace
}  // namespace wedge::kernels
