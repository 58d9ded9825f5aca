// ops::residual_layer_norm against the three ops it fuses (dropout, add, layer_norm) in
// float32: on the CPU the sum, the normalised output and every gradient are the same bits,
// on awkward shapes, with and without dropout and affine parameters, whichever outputs the
// loss reads; the same for any thread count; and bad input is named.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/thread_pool.h"
#include "ops/ops.h"

using namespace wedge;

namespace {

Tensor leaf(const Shape& shape, std::uint64_t seed, double mean = 0.0) {
  Tensor t = Tensor::randn(shape, seed, mean, 1.0);
  t.set_requires_grad(true);
  return t;
}

struct Run {
  std::vector<float> sum, out, gx, gy, ggamma, gbeta;
};

// Which outputs the loss reads: the normalised output (a post-norm block), the sum too (a
// pre-norm block's residual stream), or the sum alone.
enum class Reads { out, both, sum };

// loss = sum(out * wo) + sum(tanh(sum) * ws) over the outputs read; y is a transposed view
// when `strided`.
Run run(bool fused, const Shape& shape, double p, bool affine, Reads reads, bool strided) {
  Tensor x = leaf(shape, 11, 0.5), y_base = leaf(shape, 12);
  Tensor y = y_base;
  if (strided) {
    Shape swapped = shape;
    std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
    y_base = leaf(swapped, 12);
    y = ops::transpose(y_base, -1, -2);
  }
  const std::int64_t D = shape.back();
  Tensor gamma = affine ? leaf({D}, 13, 1.0) : Tensor(), beta = affine ? leaf({D}, 14) : Tensor();
  const std::uint64_t seed = 77, offset = 6;
  Tensor sum, out;
  if (fused) {
    const ops::ResidualNorm r = ops::residual_layer_norm(x, y, gamma, beta, p, seed, offset);
    sum = r.sum;
    out = r.out;
  } else {
    sum = x + ops::dropout(y, p, true, seed, offset);
    out = ops::layer_norm(sum, gamma, beta);
  }
  const Tensor wo = Tensor::randn(shape, 15), ws = Tensor::randn(shape, 16);
  Tensor loss;
  if (reads != Reads::sum) loss = ops::sum(out * wo);
  if (reads != Reads::out) {
    const Tensor t = ops::sum(ops::tanh(sum) * ws);
    loss = loss.defined() ? loss + t : t;
  }
  loss.backward();
  Run result;
  result.sum = sum.detach().to_vector<float>();
  result.out = out.detach().to_vector<float>();
  result.gx = x.grad().to_vector<float>();
  result.gy = y_base.grad().to_vector<float>();
  if (affine && reads != Reads::sum) {
    result.ggamma = gamma.grad().to_vector<float>();
    result.gbeta = beta.grad().to_vector<float>();
  }
  return result;
}

}  // namespace

TEST_CASE("residual_layer_norm: the same bits as dropout, add and layer_norm apart (fp32, CPU)") {
  for (const Shape& shape : {Shape{1, 1}, Shape{3, 7}, Shape{37, 256}, Shape{5, 1}, Shape{2, 9, 1037}, Shape{4, 33, 65}})
    for (const double p : {0.0, 0.1, 0.5})
      for (const bool affine : {true, false})
        for (const Reads reads : {Reads::out, Reads::both, Reads::sum})
          for (const bool strided : {false, true}) {
            CAPTURE(shape_str(shape));
            CAPTURE(p);
            CAPTURE(affine);
            CAPTURE(static_cast<int>(reads));
            CAPTURE(strided);
            const Run apart = run(false, shape, p, affine, reads, strided);
            const Run fused = run(true, shape, p, affine, reads, strided);
            CHECK(fused.sum == apart.sum);
            CHECK(fused.out == apart.out);
            CHECK(fused.gx == apart.gx);
            CHECK(fused.gy == apart.gy);
            CHECK(fused.ggamma == apart.ggamma);
            CHECK(fused.gbeta == apart.gbeta);
          }
}

TEST_CASE("residual_layer_norm: dropout really drops; the same bits for any thread count; eval keeps all") {
  // With p = 0.5 about half of y's gradient is 0 (exactly where y was dropped).
  const Run r = run(true, {64, 64}, 0.5, true, Reads::out, false);
  std::size_t zeros = 0;
  for (float g : r.gy) zeros += g == 0.0f;
  CHECK(zeros > 1700);
  CHECK(zeros < 2400);

  const int saved = num_threads();
  set_num_threads(1);
  const Run one = run(true, {300, 256}, 0.1, true, Reads::both, false);
  set_num_threads(2);
  const Run two = run(true, {300, 256}, 0.1, true, Reads::both, false);
  set_num_threads(saved);
  CHECK(one.sum == two.sum);
  CHECK(one.out == two.out);
  CHECK(one.gx == two.gx);
  CHECK(one.gy == two.gy);
  CHECK(one.ggamma == two.ggamma);

  // p = 0: the sum is x + y exactly.
  const Tensor x = Tensor::randn({4, 8}, 1), y = Tensor::randn({4, 8}, 2);
  const ops::ResidualNorm kept = ops::residual_layer_norm(x, y, Tensor(), Tensor(), 0.0, 3, 0);
  CHECK(kept.sum.to_vector<float>() == (x + y).to_vector<float>());
  CHECK_FALSE(kept.out.requires_grad());
}

TEST_CASE("residual_layer_norm: bad input is named") {
  auto message = [](const Tensor& x, const Tensor& y, const Tensor& gamma, double p) {
    try {
      (void)ops::residual_layer_norm(x, y, gamma, Tensor(), p, 1, 0);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Tensor x = Tensor::zeros({3, 4});
  CHECK(message(x, Tensor::zeros({3, 5}), Tensor(), 0.1).find("must have the same shape") != std::string::npos);
  CHECK(message(x, Tensor::zeros({3, 4}), Tensor::ones({5}), 0.1).find("affine parameter (5,)") != std::string::npos);
  CHECK(message(x, Tensor::zeros({3, 4}), Tensor(), 1.5).find("dropout probability") != std::string::npos);
  CHECK(message(x, Tensor::zeros({3, 4}, DType::F64), Tensor(), 0.1).find("residual_layer_norm") != std::string::npos);
}
