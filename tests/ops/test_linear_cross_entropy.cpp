// ops::linear_cross_entropy against the unfused pair (linear, then cross_entropy) in
// float32 on awkward shapes and block sizes, under both matmul precisions, and its bits
// for any thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/precision.h"
#include "engine/thread_pool.h"
#include "ops/ops.h"

using namespace wedge;

namespace {

struct Result {
  float loss;
  std::vector<float> gx, gw;
};

Tensor leaf(const Shape& shape, std::uint64_t seed, double scale) {
  Tensor t = Tensor::randn(shape, seed, 0.0, scale);
  t.set_requires_grad(true);
  return t;
}

// rows x d inputs, V classes, every 7th target ignored; the loss scaled by 2.5 before the
// backward (so the backward's scaling is exercised).
Result run(bool fused, std::int64_t rows, std::int64_t d, std::int64_t V, std::int64_t block_rows) {
  Tensor x = leaf({rows, d}, 7, 1.0), w = leaf({V, d}, 8, 0.5);
  std::vector<std::int32_t> t(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) t[i] = i % 7 == 3 ? -100 : static_cast<std::int32_t>((i * 37 + 11) % V);
  const Tensor targets = Tensor::from_vector(t, {rows});
  const Tensor loss = fused ? ops::linear_cross_entropy(x, w, targets, -100, block_rows)
                            : ops::cross_entropy(ops::linear(x, w), targets, -100);
  (loss * 2.5).backward();
  return {static_cast<float>(loss.item()), x.grad().to_vector<float>(), w.grad().to_vector<float>()};
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double scale = 0;
  for (float v : b) scale = std::max(scale, double(std::abs(v)));
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  CHECK(worst <= tol * std::max(scale, 1e-30));
}

}  // namespace

TEST_CASE("linear_cross_entropy: equals linear + cross_entropy on awkward shapes and blocks, fp32 and bf16") {
  struct Shape3 {
    std::int64_t rows, d, V;
  };
  for (const bool bf16 : {false, true}) {
    const MatmulPrecisionGuard precision(bf16 ? kernels::Precision::BF16 : kernels::Precision::F32);
    for (const Shape3 s : {Shape3{1, 3, 2}, Shape3{37, 19, 1003}, Shape3{130, 64, 517}}) {
      const Result ref = run(false, s.rows, s.d, s.V, 0);
      for (const std::int64_t block : {std::int64_t{0}, std::int64_t{1}, std::int64_t{5}, std::int64_t{16}, s.rows}) {
        CAPTURE(bf16);
        CAPTURE(s.rows);
        CAPTURE(s.V);
        CAPTURE(block);
        const Result got = run(true, s.rows, s.d, s.V, block);
        CHECK(got.loss == doctest::Approx(ref.loss).epsilon(1e-5));
        // In fp32 the gradients differ from the unfused pair only by the order of the sums.
        // In bf16 the pair rounds (softmax - onehot) * 2.5 / count to bf16 for its gradient
        // products and the fused op rounds (softmax - onehot) / count, then scales by 2.5:
        // one bf16 rounding (2^-8 relative) apart.
        check_close(got.gx, ref.gx, bf16 ? 1e-2 : 1e-5);
        check_close(got.gw, ref.gw, bf16 ? 1e-2 : 1e-5);
      }
    }
  }
}

TEST_CASE("linear_cross_entropy: the same bits for any thread count; no gradient work without autograd") {
  const int saved = num_threads();
  set_num_threads(1);
  const Result one = run(true, 300, 48, 2001, 64);
  set_num_threads(2);
  const Result two = run(true, 300, 48, 2001, 64);
  set_num_threads(saved);
  CHECK(one.loss == two.loss);
  CHECK(one.gx == two.gx);
  CHECK(one.gw == two.gw);

  // Under no_grad the value is the same and no graph is recorded.
  Tensor x = leaf({9, 4}, 3, 1.0), w = leaf({6, 4}, 4, 1.0);
  const Tensor t = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2}, {9});
  const float with_graph = static_cast<float>(ops::linear_cross_entropy(x, w, t, -100, 2).item());
  NoGradGuard no_grad;
  const Tensor value = ops::linear_cross_entropy(x, w, t, -100, 2);
  CHECK(static_cast<float>(value.item()) == with_graph);
  CHECK_FALSE(value.requires_grad());
}

TEST_CASE("linear_cross_entropy: the block size is a function of the vocabulary; bad input is named") {
  CHECK(ops::linear_cross_entropy_block_rows(30522, 4) == 512);
  CHECK(ops::linear_cross_entropy_block_rows(100, 4) % 64 == 0);
  CHECK(ops::linear_cross_entropy_block_rows(std::int64_t{1} << 30, 4) == 1);
  const Tensor x = Tensor::zeros({3, 4}), w = Tensor::zeros({5, 4});
  auto message = [&](const Tensor& xx, const Tensor& ww, const Tensor& t) {
    try {
      (void)ops::linear_cross_entropy(xx, ww, t);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Tensor ok = Tensor::from_vector(std::vector<std::int32_t>{0, 1, 2}, {3});
  CHECK(message(x, w, Tensor::from_vector(std::vector<std::int32_t>{0, 5, 1}, {3})).find("target 5 at row 1") != std::string::npos);
  CHECK(message(x, w, Tensor::from_vector(std::vector<std::int32_t>{0, 1}, {2})).find("gives 3 rows") != std::string::npos);
  CHECK(message(x, Tensor::zeros({5, 3}), ok).find("in_features") != std::string::npos);
  CHECK(message(x, w, Tensor::zeros({3})).find("int32") != std::string::npos);
}
