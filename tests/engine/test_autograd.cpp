// The autograd graph: diamonds, no_grad, detach, accumulation, freed graphs, memory.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "ops/ops.h"

using namespace wedge;

namespace {
Tensor leaf(std::vector<double> v, Shape s) {
  Tensor t = Tensor::from_vector(v, s);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST_CASE("diamond: a tensor used twice receives the sum of both paths") {
  Tensor x = leaf({2.0}, {1});
  Tensor a = x * 3.0;          // da/dx = 3
  Tensor b = ops::mul(x, x);   // db/dx = 2x = 4
  Tensor y = ops::sum(a + b);  // dy/dx = 7
  y.backward();
  CHECK(x.grad().item() == doctest::Approx(7.0));
}

TEST_CASE("a deeper diamond through a shared intermediate") {
  Tensor x = leaf({1.0, 2.0}, {2});
  Tensor h = ops::exp(x);
  Tensor y = ops::sum(h * h + h);  // dy/dx = (2 e^{2x}... ) = 2 h^2 + h
  y.backward();
  auto g = x.grad().to_vector<double>();
  CHECK(g[0] == doctest::Approx(2 * std::exp(2.0) + std::exp(1.0)));
  CHECK(g[1] == doctest::Approx(2 * std::exp(4.0) + std::exp(2.0)));
}

TEST_CASE("NoGradGuard records nothing; detach cuts the graph") {
  Tensor x = leaf({1.0, 2.0}, {2});
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
  }
  CHECK(grad_enabled());
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  Tensor y = ops::sum(ops::mul(d, x));  // d treated as a constant: dy/dx = d = 2x
  y.backward();
  auto g = x.grad().to_vector<double>();
  CHECK(g[0] == 2.0);
  CHECK(g[1] == 4.0);
  CHECK_THROWS_WITH_AS(ops::sum(d).backward(), doctest::Contains("does not require grad"), std::invalid_argument);
}

TEST_CASE("gradients accumulate across two backward calls until zeroed") {
  Tensor x = leaf({3.0}, {1});
  ops::sum(x * 2.0).backward();
  ops::sum(x * 5.0).backward();
  CHECK(x.grad().item() == 7.0);
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("backward from a given gradient") {
  Tensor x = leaf({1.0, 2.0, 3.0}, {3});
  Tensor y = x * x;
  y.backward(Tensor::from_vector<double>({1.0, 0.0, 2.0}, {3}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2.0, 0.0, 12.0});
}

TEST_CASE("a second backward through a freed graph is a clear error") {
  Tensor x = leaf({1.0}, {1});
  Tensor y = ops::sum(ops::exp(x));
  y.backward();
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("already freed"), std::runtime_error);
}

TEST_CASE("the graph and its saved activations are freed after backward") {
  Allocator& a = allocator_for(Device::cpu());
  Tensor x = leaf(std::vector<double>(1 << 16, 0.5), {1 << 16});
  const std::size_t before = a.bytes_in_use();
  {
    Tensor h = x;
    for (int i = 0; i < 5; ++i) h = ops::tanh(h * 1.1);
    Tensor loss = ops::sum(h);
    CHECK(a.bytes_in_use() > before + 5 * (1u << 19));  // the activations are alive
    loss.backward();
  }
  // Only x's gradient remains.
  CHECK(a.bytes_in_use() <= before + (1u << 19) + 4096);
}

TEST_CASE("a graph that is never walked does not leak") {
  Allocator& a = allocator_for(Device::cpu());
  Tensor x = leaf(std::vector<double>(1 << 16, 0.5), {1 << 16});
  const std::size_t before = a.bytes_in_use();
  {
    Tensor y = ops::sum(ops::exp(x) * ops::tanh(x));
    (void)y;
  }
  CHECK(a.bytes_in_use() == before);
}

TEST_CASE("an op with several outputs runs its backward once, with every output's summed gradient") {
  Tensor x = leaf({1.0, 2.0}, {2});
  int calls = 0;
  std::vector<Tensor> seen;
  // out0 = 2x, out1 = 3x, out2 = 5x (unused below): one node for the three.
  std::vector<Tensor> outs = record_multi_op(
      {(x * 2.0).detach(), (x * 3.0).detach(), (x * 5.0).detach()}, "three", {x},
      [&](const std::vector<Tensor>& g) -> std::vector<Tensor> {
        ++calls;
        seen = g;
        Tensor gx = g[0] * 2.0 + g[1] * 3.0;
        if (g[2].defined()) gx = gx + g[2] * 5.0;
        return {gx};
      });
  REQUIRE(outs.size() == 3);
  CHECK(outs[0].grad_fn() == outs[1].grad_fn());
  // out0 feeds the loss twice (its gradients must arrive summed), out1 once, out2 never.
  Tensor y = ops::sum(outs[0] + outs[0] * outs[1] + outs[1]);
  y.backward();
  CHECK(calls == 1);
  REQUIRE(seen.size() == 3);
  CHECK_FALSE(seen[2].defined());
  // d/dx [2x + 6x^2 + 3x] = 5 + 12x
  CHECK(x.grad().to_vector<double>()[0] == doctest::Approx(17.0));
  CHECK(x.grad().to_vector<double>()[1] == doctest::Approx(29.0));
}

TEST_CASE("an op recorded with one output through record_multi_op still runs its own closure") {
  Tensor x = leaf({3.0}, {1});
  std::vector<Tensor> outs = record_multi_op({(x * 2.0).detach()}, "one", {x},
                                             [](const std::vector<Tensor>& g) -> std::vector<Tensor> { return {g[0] * 2.0}; });
  ops::sum(outs[0]).backward();
  CHECK(x.grad().item() == doctest::Approx(2.0));
}
