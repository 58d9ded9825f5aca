// Adam / AdamW against the update rule computed by hand, clipping, schedules, and an
// end-to-end learning test: an MLP built from Modules fits 2-D spirals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim.h"
#include "ops/nn.h"
#include "ops/ops.h"

using namespace wedge;

namespace {

// One parameter, gradients g1 then g2, the textbook update written out.
double adam_by_hand(double p, double g1, double g2, double lr, double wd, bool decoupled) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  double m = 0, v = 0;
  int t = 0;
  for (double g : {g1, g2}) {
    ++t;
    if (!decoupled) g += wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double mhat = m / (1 - std::pow(b1, t)), vhat = v / (1 - std::pow(b2, t));
    p -= lr * (mhat / (std::sqrt(vhat) + eps) + (decoupled ? wd * p : 0.0));
  }
  return p;
}

double run_adam(double g1, double g2, double wd, bool decoupled) {
  Tensor p = Tensor::from_vector<double>({1.0}, {1});
  p.set_requires_grad(true);
  AdamConfig cfg;
  cfg.lr = 0.1;
  cfg.weight_decay = wd;
  cfg.decoupled = decoupled;
  Adam opt({{"p", p}}, cfg);
  for (double g : {g1, g2}) {
    p.set_grad(Tensor::from_vector<double>({g}, {1}));
    opt.step();
  }
  CHECK(opt.steps() == 2);
  return p.item();
}

}  // namespace

TEST_CASE("Adam: two steps match the update rule by hand") {
  CHECK(run_adam(0.5, -1.0, 0.0, true) == doctest::Approx(adam_by_hand(1.0, 0.5, -1.0, 0.1, 0.0, true)).epsilon(1e-5));  // hyper-parameters reach the kernel as float32
  // The first step of Adam moves by lr whatever the gradient's size (bias correction).
  CHECK(adam_by_hand(1.0, 0.5, -1.0, 0.1, 0.0, true) == doctest::Approx(0.936610).epsilon(1e-5));
}

TEST_CASE("AdamW decouples weight decay; Adam with L2 folds it into the gradient") {
  const double w = run_adam(0.5, -1.0, 0.1, true);
  const double l2 = run_adam(0.5, -1.0, 0.1, false);
  CHECK(w == doctest::Approx(adam_by_hand(1.0, 0.5, -1.0, 0.1, 0.1, true)).epsilon(1e-5));  // hyper-parameters reach the kernel as float32
  CHECK(l2 == doctest::Approx(adam_by_hand(1.0, 0.5, -1.0, 0.1, 0.1, false)).epsilon(1e-5));  // hyper-parameters reach the kernel as float32
  CHECK(w != doctest::Approx(l2).epsilon(1e-6));
}

TEST_CASE("gradient clipping by global norm") {
  Tensor a = Tensor::zeros({2}, DType::F64), b = Tensor::zeros({1}, DType::F64);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  a.set_grad(Tensor::from_vector<double>({3.0, 0.0}, {2}));
  b.set_grad(Tensor::from_vector<double>({4.0}, {1}));
  const double norm = clip_grad_norm({a, b}, 1.0);
  CHECK(norm == doctest::Approx(5.0));
  CHECK(a.grad().to_vector<double>()[0] == doctest::Approx(0.6).epsilon(1e-5));
  CHECK(b.grad().item() == doctest::Approx(0.8).epsilon(1e-5));
  CHECK(clip_grad_norm({a, b}, 10.0) == doctest::Approx(1.0).epsilon(1e-5));  // under the bound: untouched
  CHECK(b.grad().item() == doctest::Approx(0.8).epsilon(1e-5));
}

TEST_CASE("learning-rate schedules") {
  LrSchedule s;
  s.kind = LrSchedule::Kind::WarmupCosine;
  s.base_lr = 1.0;
  s.warmup_steps = 4;
  s.total_steps = 14;
  s.min_lr = 0.1;
  CHECK(s.at(0) == doctest::Approx(0.25));
  CHECK(s.at(3) == doctest::Approx(1.0));
  CHECK(s.at(4) == doctest::Approx(1.0));
  CHECK(s.at(9) == doctest::Approx(0.55));  // half way down the cosine
  CHECK(s.at(14) == doctest::Approx(0.1));
  CHECK(s.at(100) == doctest::Approx(0.1));
  LrSchedule c;
  c.base_lr = 0.3;
  CHECK(c.at(1000) == 0.3);
}

TEST_CASE("end to end: an MLP of Modules fits two interleaved spirals with AdamW") {
  // 2 classes x 100 points on two spirals: not linearly separable.
  const int n = 200;
  std::vector<float> xs;
  std::vector<std::int32_t> ys;
  for (int i = 0; i < n; ++i) {
    const int cls = i % 2;
    const double r = 0.1 + 0.9 * (i / 2) / 100.0;
    const double a = 3.0 * M_PI * r + cls * M_PI;
    xs.push_back(static_cast<float>(r * std::cos(a)));
    xs.push_back(static_cast<float>(r * std::sin(a)));
    ys.push_back(cls);
  }
  Tensor x = Tensor::from_vector(xs, {n, 2});
  Tensor y = Tensor::from_vector(ys, {n});

  struct Mlp : Module {
    explicit Mlp(Generator& g) {
      l1 = &register_module("l1", std::make_shared<nn::Linear>(2, 64, g, true, 0.5));
      l2 = &register_module("l2", std::make_shared<nn::Linear>(64, 64, g, true, 0.2));
      l3 = &register_module("l3", std::make_shared<nn::Linear>(64, 2, g, true, 0.2));
    }
    Tensor forward(const Tensor& x) const {
      return l3->forward(ops::tanh(l2->forward(ops::tanh(l1->forward(x)))));
    }
    nn::Linear *l1, *l2, *l3;
  };
  Generator gen(7);
  Mlp mlp(gen);
  CHECK(mlp.num_parameters() == (2 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2));
  AdamConfig cfg;
  cfg.lr = 0.01;
  cfg.weight_decay = 1e-4;
  Adam opt(mlp.named_parameters(), cfg);
  double first = 0, last = 0;
  for (int step = 0; step < 1500; ++step) {
    opt.zero_grad();
    Tensor loss = ops::cross_entropy(mlp.forward(x), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    opt.step();
  }
  MESSAGE("spirals: loss " << first << " -> " << last);
  CHECK(first > 0.6);
  CHECK(last < 0.05);
}

TEST_CASE("AdamW decays matrices but not vectors nor A_log under the default rule") {
  Tensor w = Tensor::full({2, 3}, 1.0), b = Tensor::full({3}, 1.0), a_log = Tensor::full({3, 2}, 1.0);
  for (Tensor* t : {&w, &b, &a_log}) t->set_requires_grad(true);
  AdamConfig cfg;
  cfg.lr = 0.1;
  cfg.weight_decay = 0.5;
  Adam opt({{"blocks.0.ffn.w1.weight", w}, {"blocks.0.ffn.w1.bias", b}, {"blocks.0.mixer.A_log", a_log}}, cfg,
           decays_by_default);
  CHECK(opt.decayed("blocks.0.ffn.w1.weight"));
  CHECK_FALSE(opt.decayed("blocks.0.ffn.w1.bias"));
  CHECK_FALSE(opt.decayed("blocks.0.mixer.A_log"));
  // Zero gradients: the Adam term is 0, so only the decoupled decay moves a parameter,
  // p <- p - lr wd p = 1 - 0.05.
  for (Tensor* t : {&w, &b, &a_log}) t->set_grad(Tensor::zeros(t->shape()));
  opt.step();
  for (float v : w.to_vector<float>()) CHECK(v == doctest::Approx(0.95));
  for (float v : b.to_vector<float>()) CHECK(v == 1.0f);
  for (float v : a_log.to_vector<float>()) CHECK(v == 1.0f);
  // Without a rule every parameter decays, as before.
  Tensor v = Tensor::full({3}, 1.0);
  v.set_requires_grad(true);
  Adam all({{"bias", v}}, cfg);
  v.set_grad(Tensor::zeros({3}));
  all.step();
  CHECK(v.to_vector<float>()[0] == doctest::Approx(0.95));
}

TEST_CASE("ZeRO-1 shards of AdamW, each updating its elements, equal the whole optimizer bit for bit") {
  // Three parameters (a matrix that decays, a vector that does not, another matrix) of 7 + 5
  // + 12 = 24 elements, cut at 4, 10 and 10 (an empty shard) and 17: shards that end inside
  // a parameter, span two, and hold none.
  const std::vector<std::int64_t> cuts = {0, 4, 10, 10, 17, 24};
  auto make = [] {
    std::vector<std::pair<std::string, Tensor>> params = {
        {"a.weight", Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f}, {7, 1})},
        {"b.bias", Tensor::from_vector<float>({1.0f, 2.0f, -3.0f, 0.5f, 0.25f}, {5})},
        {"c.weight", Tensor::full({3, 4}, 0.75)}};
    for (auto& [name, p] : params) p.set_requires_grad(true);
    return params;
  };
  auto gradients = [](int step, const std::vector<std::pair<std::string, Tensor>>& params) {
    int k = 0;
    for (const auto& [name, p] : params) {
      std::vector<float> g(static_cast<std::size_t>(p.numel()));
      for (float& x : g) x = std::sin(0.7f * static_cast<float>(++k) + static_cast<float>(step)) * 0.3f;
      Tensor pp = p;
      pp.set_grad(Tensor::from_vector(g, p.shape()));
    }
  };
  AdamConfig cfg;
  cfg.lr = 0.05;
  cfg.weight_decay = 0.1;
  auto whole_params = make();
  Adam whole(whole_params, cfg, decays_by_default);
  std::vector<std::vector<std::pair<std::string, Tensor>>> shard_params;
  std::vector<Adam> shards;
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
    shard_params.push_back(make());
    shards.emplace_back(shard_params.back(), cfg, decays_by_default);
    shards.back().keep_shard(cuts[s], cuts[s + 1]);
  }
  CHECK_THROWS_AS(shards[0].state_tensors(), std::invalid_argument);
  CHECK_THROWS_AS(shards[0].keep_shard(3, 25), std::invalid_argument);
  for (int step = 0; step < 3; ++step) {
    gradients(step, whole_params);
    whole.step(0.8);
    for (std::size_t s = 0; s < shards.size(); ++s) {
      gradients(step, shard_params[s]);
      shards[s].step(0.8);
    }
    // Element by element, each shard's updated elements are the whole optimizer's.
    std::vector<float> whole_flat, shard_flat(24);
    for (const auto& [name, p] : whole_params)
      for (float x : p.to_vector<float>()) whole_flat.push_back(x);
    for (std::size_t s = 0; s < shards.size(); ++s) {
      std::size_t at = 0;
      for (const auto& [name, p] : shard_params[s]) {
        const std::vector<float> v = p.to_vector<float>();
        for (std::size_t i = 0; i < v.size(); ++i, ++at)
          if (static_cast<std::int64_t>(at) >= cuts[s] && static_cast<std::int64_t>(at) < cuts[s + 1]) shard_flat[at] = v[i];
      }
    }
    REQUIRE(whole_flat.size() == shard_flat.size());
    for (std::size_t i = 0; i < whole_flat.size(); ++i) {
      CAPTURE(i);
      CHECK(std::memcmp(&whole_flat[i], &shard_flat[i], sizeof(float)) == 0);
    }
    // Bring every shard's copy of the parameters up to date, as the all-gather does.
    for (std::size_t s = 0; s < shards.size(); ++s) {
      std::size_t at = 0;
      for (auto& [name, p] : shard_params[s]) {
        std::vector<float> v(whole_flat.begin() + static_cast<std::ptrdiff_t>(at),
                             whole_flat.begin() + static_cast<std::ptrdiff_t>(at) + p.numel());
        p.copy_(Tensor::from_vector(v, p.shape()));
        at += static_cast<std::size_t>(p.numel());
      }
    }
  }
  // The shards' moments, exported into one flat layout, are the whole optimizer's; imported
  // into fresh shards they give the same next step.
  std::vector<float> m(24, 0.0f), v(24, 0.0f), wm(24), wv(24);
  for (const Adam& s : shards) s.export_moments(m, v);
  whole.export_moments(wm, wv);
  CHECK(std::memcmp(m.data(), wm.data(), m.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(v.data(), wv.data(), v.size() * sizeof(float)) == 0);
  auto resumed_params = make();
  Adam resumed(resumed_params, cfg, decays_by_default);
  resumed.keep_shard(4, 17);
  resumed.import_moments(m, v, whole.steps());
  CHECK(resumed.steps() == 3);
  for (std::size_t i = 0; i < resumed_params.size(); ++i) resumed_params[i].second.copy_(whole_params[i].second);
  gradients(3, whole_params);
  gradients(3, resumed_params);
  whole.step();
  resumed.step();
  std::vector<float> a, b;
  for (const auto& [name, p] : whole_params)
    for (float x : p.to_vector<float>()) a.push_back(x);
  for (const auto& [name, p] : resumed_params)
    for (float x : p.to_vector<float>()) b.push_back(x);
  for (std::size_t i = 4; i < 17; ++i) CHECK(std::memcmp(&a[i], &b[i], sizeof(float)) == 0);
  CHECK(std::memcmp(&a[0], &b[0], sizeof(float)) != 0);  // outside its shard: not updated
}

TEST_CASE("a checkpoint's named moments: load_state and flatten_state check them the same way") {
  std::vector<std::pair<std::string, Tensor>> params = {{"w", Tensor::full({2, 3}, 0.5)}, {"b", Tensor::full({4}, -1.0)}};
  for (auto& [name, p] : params) p.set_requires_grad(true);
  Adam saved(params, AdamConfig{}, decays_by_default);
  for (auto& [name, p] : params) p.set_grad(Tensor::full(p.shape(), 0.25));
  saved.step();
  const std::map<std::string, Tensor> state = saved.state_tensors();
  // Laid end to end, the named moments are what the optimizer exports, sharded or not.
  std::vector<float> m(10), v(10), em(10), ev(10);
  saved.export_moments(em, ev);
  Adam sharded(params, AdamConfig{}, decays_by_default);
  sharded.keep_shard(3, 7);
  sharded.flatten_state(state, m, v);
  CHECK(m == em);
  CHECK(v == ev);
  // A missing tensor, or one of another shape, is one error naming it, for both.
  std::map<std::string, Tensor> missing = state, reshaped = state;
  missing.erase("b.adam_v");
  reshaped["w.adam_m"] = Tensor::zeros({3, 2});
  Adam whole(params, AdamConfig{}, decays_by_default);
  for (const auto& [bad, text] : {std::pair{&missing, "missing tensor 'b.adam_v'"}, std::pair{&reshaped, "'w.adam_m' is"}}) {
    CHECK_THROWS_WITH(whole.load_state(*bad, 1), doctest::Contains(text));
    CHECK_THROWS_WITH(sharded.flatten_state(*bad, m, v), doctest::Contains(text));
  }
  whole.load_state(state, 1);
  whole.export_moments(m, v);
  CHECK(m == em);
  CHECK_THROWS_AS(sharded.flatten_state(state, std::span<float>(m).first(9), v), std::invalid_argument);
}

TEST_CASE("a parameter's handle stays valid however many are registered after it") {
  // register_parameter returns a reference; registering 99 more must not move the first
  // (it once dangled when the list grew, and a matmul on it failed or read freed memory).
  struct Many : Module {
    Many() {
      first = &register_parameter("p0", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}));
      for (int i = 1; i < 100; ++i)
        register_parameter("p" + std::to_string(i), Tensor::from_vector(std::vector<float>{float(i)}, {1}));
    }
    Tensor* first = nullptr;
  };
  Many m;
  REQUIRE(m.first->defined());
  CHECK(m.first->shape() == std::vector<std::int64_t>{2, 3});
  CHECK(m.first->requires_grad());
  // x W^T with x = (1, 1, 1): the rows' sums, 6 and 15; and the gradient reaches the handle.
  Tensor y = ops::linear(Tensor::from_vector(std::vector<float>{1, 1, 1}, {1, 3}), *m.first);
  CHECK(y.to_vector<float>() == std::vector<float>{6, 15});
  ops::sum(y).backward();
  CHECK(m.first->grad().to_vector<float>() == std::vector<float>{1, 1, 1, 1, 1, 1});
  // The handle is the registered parameter itself, not a copy.
  const auto named = m.named_parameters();
  REQUIRE(named.size() == 100);
  CHECK(named[0].first == "p0");
  CHECK(&named[0].second.impl() == &m.first->impl());
}
