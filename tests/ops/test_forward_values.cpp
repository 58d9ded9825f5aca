// Forward values of ops on small cases computed by hand, and the errors ops raise.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>

#include "ops/ops.h"

using namespace wedge;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to(DType::F64).to_vector<double>(); }
Tensor f64(std::vector<double> v, Shape s) { return Tensor::from_vector(v, s); }
}  // namespace

TEST_CASE("softmax of [1, 2, 3] by hand") {
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), z = e1 + e2 + e3;
  auto y = vals(ops::softmax(f64({1, 2, 3}, {1, 3}), -1));
  CHECK(y[0] == doctest::Approx(e1 / z).epsilon(1e-12));
  CHECK(y[1] == doctest::Approx(e2 / z).epsilon(1e-12));
  CHECK(y[2] == doctest::Approx(e3 / z).epsilon(1e-12));
  auto ly = vals(ops::log_softmax(f64({1, 2, 3}, {1, 3}), -1));
  CHECK(ly[0] == doctest::Approx(1 - std::log(z)).epsilon(1e-12));
  // Large logits must not overflow (the row max is subtracted).
  auto big = vals(ops::softmax(Tensor::from_vector<float>({1000.f, 1000.f}, {2}), 0));
  CHECK(big[0] == doctest::Approx(0.5));
}

TEST_CASE("layer_norm of [1, 2, 3] by hand") {
  // mean 2, biased variance 2/3.
  const double rstd = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);
  auto y = vals(ops::layer_norm(f64({1, 2, 3}, {1, 3}), f64({1, 2, 1}, {3}), f64({0, 0, 0.5}, {3}), 1e-5));
  CHECK(y[0] == doctest::Approx(-rstd).epsilon(1e-12));
  CHECK(y[1] == doctest::Approx(0.0));
  CHECK(y[2] == doctest::Approx(rstd + 0.5).epsilon(1e-12));
}

TEST_CASE("cross_entropy by hand, with an ignored row") {
  // row 0: logits (0, ln 3), target 1 -> -log(3/4);  row 1 ignored.
  Tensor logits = f64({0, std::log(3.0), 5, -5}, {2, 2});
  Tensor targets = Tensor::from_vector<std::int32_t>({1, -100}, {2});
  CHECK(ops::cross_entropy(logits, targets).item() == doctest::Approx(-std::log(0.75)).epsilon(1e-12));
  Tensor all_ignored = Tensor::from_vector<std::int32_t>({-100, -100}, {2});
  CHECK(ops::cross_entropy(logits, all_ignored).item() == 0.0);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(logits, Tensor::from_vector<std::int32_t>({2, 0}, {2})),
                       doctest::Contains("target 2 at row 0"), std::invalid_argument);
}

TEST_CASE("Plücker pairing of a 3x3 case by hand") {
  // r = 3, L = 2, offset 1: u = z_1 = (0, 1, 2), v = z_0 = (1, 0, 0).
  // p = (u0 v1 - u1 v0, u0 v2 - u2 v0, u1 v2 - u2 v1) = (-1, -2, 0), |p| = sqrt 5.
  Tensor z = f64({1, 0, 0, 0, 1, 2}, {1, 2, 3});
  auto p = vals(ops::plucker_pairs(z, {1}));
  REQUIRE(p.size() == 6);
  for (int i = 0; i < 3; ++i) CHECK(p[i] == 0.0);  // t = 0 has no past partner
  CHECK(p[3] == doctest::Approx(-1 / std::sqrt(5.0)).epsilon(1e-12));
  CHECK(p[4] == doctest::Approx(-2 / std::sqrt(5.0)).epsilon(1e-12));
  CHECK(p[5] == doctest::Approx(0.0));
  // The fused mean over one offset is the same numbers.
  auto pm = vals(ops::plucker_mean(z, {1}));
  for (int i = 0; i < 6; ++i) CHECK(pm[i] == doctest::Approx(p[i]).epsilon(1e-12));
}

TEST_CASE("plucker_mean equals the mean of plucker_pairs over the valid offsets") {
  Tensor z = Tensor::randn({2, 9, 5}, 3, 0, 1, DType::F64);
  const std::vector<std::int32_t> offs = {1, 2, 4, 8};
  auto pairs = vals(ops::plucker_pairs(z, offs));
  auto mean = vals(ops::plucker_mean(z, offs));
  const int P = 10, m = 4;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 9; ++t) {
      int valid = 0;
      for (int o : offs) valid += t - o >= 0;
      for (int k = 0; k < P; ++k) {
        double s = 0;
        for (int j = 0; j < m; ++j) s += pairs[((b * 9 + t) * m + j) * P + k];
        const double expect = valid ? s / valid : 0.0;
        CHECK(mean[(b * 9 + t) * P + k] == doctest::Approx(expect).epsilon(1e-12));
      }
    }
}

TEST_CASE("attention equals softmax(q k^T / sqrt d + mask) v built from primitives") {
  Tensor q = Tensor::randn({2, 2, 6, 4}, 1, 0, 1, DType::F64);
  Tensor k = Tensor::randn({2, 2, 6, 4}, 2, 0, 1, DType::F64);
  Tensor v = Tensor::randn({2, 2, 6, 4}, 3, 0, 1, DType::F64);
  std::vector<double> mask(36);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 6; ++j) mask[i * 6 + j] = j > i ? -1e300 : 0.0;
  Tensor scores = ops::add(ops::mul_scalar(ops::matmul(q, ops::transpose(k, -1, -2)), 0.5), f64(mask, {6, 6}));
  auto ref = vals(ops::matmul(ops::softmax(scores, -1), v));
  auto got = vals(ops::attention(q, k, v, true));
  for (std::size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-10));
}

TEST_CASE("ops reject bad arguments with messages naming the op and the shapes") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  CHECK_THROWS_WITH_AS(ops::matmul(a, b), doctest::Contains("matmul: inner dimensions differ: (2, 3) @ (4, 5)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::add(a, b), doctest::Contains("add: cannot broadcast shapes (2, 3) and (4, 5)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::add(a, Tensor::zeros({2, 3}, DType::F64)), doctest::Contains("different dtypes"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::reshape(a, {4}), doctest::Contains("reshape: cannot reshape (2, 3)"), std::invalid_argument);
  // Target shapes whose element count does not fit in int64: named, not wrapped around.
  CHECK_THROWS_WITH_AS(ops::reshape(a, {std::int64_t(1) << 40, std::int64_t(1) << 40, -1}),
                       doctest::Contains("reshape: target shape (1099511627776, 1099511627776, -1) has more elements than fit in 64 bits"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::reshape(a, {std::int64_t(1) << 32, std::int64_t(1) << 32, 6}),
                       doctest::Contains("(4294967296, 4294967296, 6)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::embedding(a, Tensor::from_vector<std::int32_t>({7}, {1})), doctest::Contains("outside the table"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::plucker_pairs(Tensor::zeros({1, 2, 4}), {0}), doctest::Contains("offsets must be >= 1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::linear(a, Tensor::zeros({4, 2})), doctest::Contains("linear"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::narrow(a, 1, 2, 2), doctest::Contains("narrow: range [2, 4)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::linear_gelu(a, Tensor::zeros({4, 2})), doctest::Contains("linear_gelu"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::linear_gelu(a, Tensor::zeros({4, 3}), Tensor::zeros({5})),
                       doctest::Contains("linear_gelu: bias (5,) does not match out_features 4"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::gate_mix(a, a, b), doctest::Contains("gate_mix: a, x and y must have one shape"),
                       std::invalid_argument);
}

TEST_CASE("linear_gelu equals gelu(linear) in value and gradient, float32 on the CPU table") {
  // Awkward sizes: rows and columns that are not multiples of the GEMM tile (14 x 32).
  for (auto [rows, in, out] : {std::tuple<int, int, int>{1, 1, 1}, {7, 5, 33}, {33, 17, 70}, {130, 64, 257}}) {
    CAPTURE(rows);
    CAPTURE(out);
    Tensor x = Tensor::randn({rows, in}, 31, 0.0, 1.0);
    Tensor w = Tensor::randn({out, in}, 32, 0.0, 0.5);
    Tensor b = Tensor::randn({out}, 33, 0.0, 1.0);
    Tensor gy = Tensor::randn({rows, out}, 34, 0.0, 1.0);
    auto run = [&](bool fused) {
      Tensor xs = x.clone().set_requires_grad(), ws = w.clone().set_requires_grad(), bs = b.clone().set_requires_grad();
      Tensor y = fused ? ops::linear_gelu(xs, ws, bs) : ops::gelu(ops::linear(xs, ws, bs));
      y.backward(gy);
      return std::vector<std::vector<double>>{vals(y), vals(xs.grad()), vals(ws.grad()), vals(bs.grad())};
    };
    const auto ref = run(false), got = run(true);
    for (std::size_t t = 0; t < ref.size(); ++t)
      for (std::size_t i = 0; i < ref[t].size(); ++i)
        CHECK(got[t][i] == doctest::Approx(ref[t][i]).epsilon(1e-5).scale(1.0));
  }
}

TEST_CASE("mse_loss by hand, its gradients, and its shape check") {
  // differences 1, 0, -2, 0.5: squares 1, 0, 4, 0.25, mean 5.25 / 4.
  Tensor pred = f64({1, 2, 3, 4}, {2, 2}), target = f64({0, 2, 5, 3.5}, {2, 2});
  pred.set_requires_grad(true);
  target.set_requires_grad(true);
  Tensor loss = ops::mse_loss(pred, target);
  CHECK(loss.shape().empty());
  CHECK(loss.item() == 1.3125);
  loss.backward();
  // d/dpred = 2 (pred - target) / 4, and its negative for target.
  CHECK(vals(pred.grad()) == std::vector<double>{0.5, 0.0, -1.0, 0.25});
  CHECK(vals(target.grad()) == std::vector<double>{-0.5, 0.0, 1.0, -0.25});
  // float32, a target without gradient, a non-contiguous prediction.
  Tensor p32 = ops::transpose(Tensor::from_vector<float>({1, 3, 2, 4}, {2, 2}), 0, 1);  // (1, 2; 3, 4)
  CHECK(ops::mse_loss(p32, Tensor::from_vector<float>({1, 2, 3, 6}, {2, 2})).item() == 1.0);  // (0 + 0 + 0 + 4) / 4
  // Shapes must be equal: (3, 1) against (3,) would broadcast to (3, 3).
  CHECK_THROWS_WITH_AS(ops::mse_loss(Tensor::zeros({3, 1}), Tensor::zeros({3})),
                       "mse_loss: pred (3, 1) and target (3,) must have the same shape", std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::mse_loss(Tensor::zeros({2}), Tensor::zeros({2}, DType::F64)),
                       doctest::Contains("mse_loss: tensors of different dtypes"), std::invalid_argument);
  CHECK_THROWS_AS(ops::mse_loss(Tensor::zeros({0, 2}), Tensor::zeros({0, 2})), std::invalid_argument);
}

namespace {
std::vector<std::int32_t> ints(const Tensor& t) { return t.to_vector<std::int32_t>(); }
}  // namespace

TEST_CASE("argmax by hand: 1-D, the middle and negative dims of a 3-D tensor, ties to the first") {
  Tensor v = f64({3, 7, 1, 7, -2}, {5});
  Tensor a = ops::argmax(v, 0);
  CHECK(a.dtype() == DType::I32);
  CHECK(a.shape().empty());
  CHECK(ints(a) == std::vector<std::int32_t>{1});  // 7 twice: the first
  CHECK(ints(ops::argmax(v, -1)) == std::vector<std::int32_t>{1});
  // x (2, 3, 2):  batch 0 rows (1, 9) (5, 2) (3, 4);  batch 1 rows (-4, -1) (6, -3) (6, 8).
  Tensor x = Tensor::from_vector<float>({1, 9, 5, 2, 3, 4, -4, -1, 6, -3, 6, 8}, {2, 3, 2});
  Tensor mid = ops::argmax(x, 1);  // down each column of a batch
  CHECK(mid.shape() == Shape{2, 2});
  CHECK(ints(mid) == std::vector<std::int32_t>{1, 0, 1, 2});  // batch 1, column 0: 6 at rows 1 and 2 -> 1
  Tensor last = ops::argmax(x, -1);  // along each row
  CHECK(last.shape() == Shape{2, 3});
  CHECK(ints(last) == std::vector<std::int32_t>{1, 0, 1, 1, 0, 1});
  Tensor first = ops::argmax(x, -3);  // batch 0 against batch 1
  CHECK(first.shape() == Shape{3, 2});
  CHECK(ints(first) == std::vector<std::int32_t>{0, 0, 1, 0, 1, 1});
  CHECK(ints(ops::argmax(x, 0)) == ints(first));
  // A non-contiguous view: the transpose of a batch's rows, so dim 0 of the view is dim 1.
  CHECK(ints(ops::argmax(ops::transpose(x, 1, 2), 2)) == ints(mid));
  // All equal: index 0.
  CHECK(ints(ops::argmax(Tensor::full({2, 4}, 1.5), 1)) == std::vector<std::int32_t>{0, 0});
  // An axis of size 1 and an empty other axis.
  CHECK(ints(ops::argmax(Tensor::randn({3, 1}, 5), 1)) == std::vector<std::int32_t>{0, 0, 0});
  CHECK(ops::argmax(Tensor::zeros({0, 3}), 1).shape() == Shape{0});
}

TEST_CASE("argmax with NaN and infinities, no gradient, and its errors") {
  const double nan = std::nan(""), inf = HUGE_VAL;
  // A NaN counts as larger than every number: the first NaN's index, as torch.argmax.
  Tensor x = f64({1, nan, 5, nan, -inf, -inf, inf, 2, -inf, -inf, -inf, -inf}, {3, 4});
  CHECK(ints(ops::argmax(x, 1)) == std::vector<std::int32_t>{1, 2, 0});  // +inf wins; all -inf: the first
  CHECK(ints(ops::argmax(x.to(DType::F32), 1)) == std::vector<std::int32_t>{1, 2, 0});
  CHECK(ints(ops::argmax(x, 0)) == std::vector<std::int32_t>{0, 0, 1, 0});
  // Integer indices have no gradient: nothing is recorded, whatever the input requires.
  Tensor w = Tensor::randn({4, 3}, 9);
  w.set_requires_grad(true);
  Tensor i = ops::argmax(w, 0);
  CHECK_FALSE(i.requires_grad());
  CHECK(i.grad_fn() == nullptr);
  CHECK_THROWS_WITH_AS(ops::argmax(w, 2), "argmax: dim 2 out of range for a 2-d tensor", std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::argmax(w, -3), doctest::Contains("dim -3 out of range"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::argmax(Tensor::zeros({2, 0}), 1), doctest::Contains("argmax: cannot take the max over an empty axis"),
                       std::invalid_argument);
  CHECK_THROWS_AS(ops::argmax(Tensor::from_vector<std::int32_t>({1, 2}, {2}), 0), std::invalid_argument);
}
