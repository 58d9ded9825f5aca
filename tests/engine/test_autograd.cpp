// The autograd graph: diamonds, no_grad, detach, accumulation, freed graphs, memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

TEST_CASE("gradients summed in place: the right sums, and never into a gradient another input shares") {
  // add's backward hands the same (here contiguous) gradient to both its inputs, p and q.
  // The tape below runs that add, then p * 7 (whose gradient joins p's), and q's other use
  // only after p: adding p * 7's gradient into the memory q's pending gradient shares would
  // give dy/dq 20 instead of 13.
  Tensor x = leaf({1.0, -2.0, 0.5}, {3});
  Tensor p = x * 3.0, q = x * 5.0;
  Tensor y = (ops::sum(q * 11.0) + ops::sum(p * 7.0)) + ops::sum((p + q) * 2.0);
  y.backward();  // dy/dp = 7 + 2, dy/dq = 11 + 2: dy/dx = 3 * 9 + 5 * 13 = 92
  for (double g : x.grad().to_vector<double>()) CHECK(g == doctest::Approx(92.0));
  // Three gradients into one intermediate: the second and third are summed in place.
  Tensor w = leaf({1.0, 2.0}, {2});
  Tensor h = w * 1.5;
  Tensor z = ops::sum(h * 2.0) + ops::sum(h * 3.0) + ops::sum(h * 4.0);  // dz/dw = 1.5 (2 + 3 + 4)
  z.backward();
  for (double g : w.grad().to_vector<double>()) CHECK(g == doctest::Approx(13.5));
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

TEST_CASE("LeafGradientHook: each leaf once, when its gradient is final, the order following the tape") {
  // loss = sum(a * b) + sum((a + c) * c) + sum(d * 0): `a` is reached twice (its gradient is
  // final only after both paths), `b` early, `c` twice through one node, `d` with a zero
  // gradient; `e` is in no graph and never reported.
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2}), c = leaf({5, 6}, {2}), d = leaf({7, 8}, {2}), e = leaf({9}, {1});
  const Tensor loss = ops::sum(a * b) + ops::sum((a + c) * c) + ops::sum(d * Tensor::zeros({2}, DType::F64));
  std::vector<std::string> order;
  std::vector<std::vector<double>> seen;
  auto name = [&](const TensorImpl& t) {
    for (auto [n, x] : {std::pair{"a", &a}, std::pair{"b", &b}, std::pair{"c", &c}, std::pair{"d", &d}, std::pair{"e", &e}})
      if (&t == x->impl_ptr().get()) return std::string(n);
    return std::string("?");
  };
  {
    const LeafGradientHook hook([&](const TensorImpl& t) {
      order.push_back(name(t));
      for (auto* x : {&a, &b, &c, &d})
        if (&t == x->impl_ptr().get()) seen.push_back(x->grad().to_vector<double>());
    });
    CHECK_THROWS_AS(LeafGradientHook([](const TensorImpl&) {}), std::logic_error);
    loss.backward();
  }
  REQUIRE(order.size() == 4);
  std::vector<std::string> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<std::string>{"a", "b", "c", "d"});
  // What each leaf held when it was reported is its final gradient.
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Tensor& x = order[i] == "a" ? a : order[i] == "b" ? b : order[i] == "c" ? c : d;
    CHECK(seen[i] == x.grad().to_vector<double>());
  }
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3 + 5, 4 + 6});  // b + c
  CHECK(c.grad().to_vector<double>() == std::vector<double>{1 + 2 * 5, 2 + 2 * 6});  // a + 2c
  // The hook is gone with its scope: the next backward reports nothing.
  order.clear();
  (ops::sum(a * b)).backward();
  CHECK(order.empty());
}
