// Adam / AdamW and SGD against the update rules computed by hand, clipping, schedules (and
// optimizers driven by them), and an end-to-end learning test: an MLP built from Modules
// fits 2-D spirals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim.h"
#include "engine/safetensors.h"
#include "ops/nn.h"
#include "ops/ops.h"
#include "scratch.h"

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

// ---- SGD ----------------------------------------------------------------------------------

namespace {

// One float64 parameter p = 1 through three steps with gradients 0.5, -1, 0.25 and lr 0.1;
// the parameter after each step.
std::vector<double> run_sgd(SgdConfig cfg, double grad_scale = 1.0) {
  Tensor p = Tensor::from_vector<double>({1.0}, {1});
  p.set_requires_grad(true);
  cfg.lr = 0.1;
  Sgd opt({{"p", p}}, cfg);
  std::vector<double> after;
  for (double g : {0.5, -1.0, 0.25}) {
    p.set_grad(Tensor::from_vector<double>({g}, {1}));
    opt.step(grad_scale);
    after.push_back(p.item());
  }
  CHECK(opt.steps() == 3);
  return after;
}

void check_steps(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-13));
  }
}

}  // namespace

TEST_CASE("SGD with momentum: three steps match the torch.optim.SGD rule worked by hand") {
  // The values below are worked out on paper from
  //   g += wd p;  buf = g (first step) or m buf + (1 - dampening) g;  p -= lr (nesterov ? g + m buf : buf).
  SgdConfig plain;
  // momentum 0, wd 0.1: p -= 0.1 (g + 0.1 p): 1 - 0.06; 0.94 + 0.0906; 1.0306 - 0.035306.
  plain.weight_decay = 0.1;
  check_steps(run_sgd(plain), {0.94, 1.0306, 0.995294});
  SgdConfig heavy;
  heavy.momentum = 0.9;
  // buf 0.5, -0.55, -0.245.
  check_steps(run_sgd(heavy), {0.95, 1.005, 1.0295});
  SgdConfig nesterov = heavy;
  nesterov.nesterov = true;
  // the step is g + 0.9 buf: 0.95, -1.495, 0.0295.
  check_steps(run_sgd(nesterov), {0.905, 1.0545, 1.05155});
  SgdConfig decayed = heavy;
  decayed.weight_decay = 0.1;
  // g + 0.1 p = 0.6, -0.906, 0.34766; buf 0.6, -0.366, 0.01826.
  check_steps(run_sgd(decayed), {0.94, 0.9766, 0.974774});
  SgdConfig damped = heavy;
  damped.dampening = 0.5;
  // The first buffer is the gradient itself, undamped: 0.5; then 0.45 - 0.5 = -0.05; -0.045 + 0.125 = 0.08.
  check_steps(run_sgd(damped), {0.95, 0.955, 0.947});
  // grad_scale multiplies the gradient before weight decay: gradients 1, -2, 0.5 with
  // nesterov and wd 0.1 give steps 2.09, -2.75871, 0.39867649.
  SgdConfig scaled = nesterov;
  scaled.weight_decay = 0.1;
  check_steps(run_sgd(scaled, 2.0), {0.791, 1.066871, 1.027003351});
}

TEST_CASE("SGD: float32 parameters, the decay rule, parameters without a gradient, and refused configurations") {
  Tensor w = Tensor::full({2, 2}, 1.0), b = Tensor::full({2}, 1.0), idle = Tensor::full({3}, 2.0);
  for (Tensor* t : {&w, &b, &idle}) t->set_requires_grad(true);
  SgdConfig cfg;
  cfg.lr = 0.5;
  cfg.momentum = 0.9;
  cfg.weight_decay = 0.2;
  Sgd opt({{"l.weight", w}, {"l.bias", b}, {"idle", idle}}, cfg, decays_by_default);
  CHECK(opt.decayed("l.weight"));
  CHECK_FALSE(opt.decayed("l.bias"));
  CHECK_FALSE(opt.decayed("nothing"));
  w.set_grad(Tensor::full({2, 2}, 0.25));
  b.set_grad(Tensor::full({2}, 0.25));
  opt.step();
  // weight: 1 - 0.5 (0.25 + 0.2) = 0.775; bias, not decayed: 1 - 0.125 = 0.875; idle has no
  // gradient and is left alone (so is its momentum).
  for (float v : w.to_vector<float>()) CHECK(v == doctest::Approx(0.775).epsilon(1e-6));
  for (float v : b.to_vector<float>()) CHECK(v == 0.875f);
  for (float v : idle.to_vector<float>()) CHECK(v == 2.0f);
  for (float v : opt.state_tensors().at("idle.sgd_momentum").to_vector<float>()) CHECK(v == 0.0f);
  CHECK(opt.state_tensors().at("l.bias.sgd_momentum").to_vector<float>() == std::vector<float>{0.25f, 0.25f});
  opt.zero_grad();
  CHECK_FALSE(w.grad().defined());

  // Plain SGD keeps no state.
  Sgd plain({{"w", w}}, SgdConfig{});
  CHECK(plain.state_tensors().empty());

  SgdConfig bad;
  bad.nesterov = true;  // without momentum
  CHECK_THROWS_WITH_AS(Sgd({{"w", w}}, bad), doctest::Contains("Nesterov momentum needs momentum > 0"), std::invalid_argument);
  bad.momentum = 0.9;
  bad.dampening = 0.1;
  CHECK_THROWS_AS(Sgd({{"w", w}}, bad), std::invalid_argument);
  SgdConfig negative;
  negative.lr = -1;
  CHECK_THROWS_WITH_AS(Sgd({{"w", w}}, negative), "Sgd: lr -1, momentum 0 and weight_decay 0 must all be >= 0", std::invalid_argument);
  Tensor ids = Tensor::from_vector<std::int32_t>({1, 2}, {2});
  CHECK_THROWS_WITH_AS(Sgd({{"ids", ids}}, SgdConfig{}), doctest::Contains("parameter 'ids' is int32(2,)"), std::invalid_argument);
}

TEST_CASE("SGD state round trip: a resumed optimizer takes the same steps bit for bit") {
  auto make = [] {
    std::vector<std::pair<std::string, Tensor>> params = {
        {"a.weight", Tensor::from_vector<float>({0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}, {2, 3})},
        {"a.bias", Tensor::from_vector<float>({1.0f, -1.0f}, {2})}};
    for (auto& [name, p] : params) p.set_requires_grad(true);
    return params;
  };
  auto gradients = [](int step, const std::vector<std::pair<std::string, Tensor>>& params) {
    int k = 0;
    for (const auto& [name, p] : params) {
      std::vector<float> g(static_cast<std::size_t>(p.numel()));
      for (float& x : g) x = std::sin(0.9f * static_cast<float>(++k) + static_cast<float>(step));
      Tensor(p).set_grad(Tensor::from_vector(g, p.shape()));
    }
  };
  SgdConfig cfg;
  cfg.lr = 0.05;
  cfg.momentum = 0.8;
  cfg.dampening = 0.25;
  cfg.weight_decay = 0.01;
  auto params = make();
  Sgd opt(params, cfg, decays_by_default);
  for (int step = 0; step < 2; ++step) {
    gradients(step, params);
    opt.step();
  }
  // Through a file, as a checkpoint would take them.
  testing::ScratchDir dir("sgd-state");
  std::map<std::string, Tensor> state = opt.state_tensors();
  CHECK(state.size() == 2);
  for (const auto& [name, p] : params) state[name] = p;
  save_safetensors(dir.str("ckpt.safetensors"), state);
  const SafeTensors file = load_safetensors(dir.str("ckpt.safetensors"));

  auto resumed_params = make();
  for (auto& [name, p] : resumed_params) p.copy_(file.tensors.at(name));
  Sgd resumed(resumed_params, cfg, decays_by_default);
  resumed.load_state(file.tensors, opt.steps());
  CHECK(resumed.steps() == 2);
  for (int step = 2; step < 4; ++step) {
    gradients(step, params);
    gradients(step, resumed_params);
    opt.step();
    resumed.step();
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> a = params[i].second.to_vector<float>(), b = resumed_params[i].second.to_vector<float>();
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
  // A missing or reshaped buffer is one error naming it, and changes nothing.
  std::map<std::string, Tensor> missing = file.tensors, reshaped = file.tensors;
  missing.erase("a.bias.sgd_momentum");
  reshaped["a.weight.sgd_momentum"] = Tensor::zeros({3, 2});
  const std::vector<float> before = resumed.state_tensors().at("a.bias.sgd_momentum").to_vector<float>();
  CHECK_THROWS_WITH(resumed.load_state(missing, 9), doctest::Contains("missing tensor 'a.bias.sgd_momentum'"));
  CHECK_THROWS_WITH(resumed.load_state(reshaped, 9), doctest::Contains("'a.weight.sgd_momentum' is float32(3, 2)"));
  CHECK(resumed.steps() == 4);
  CHECK(resumed.state_tensors().at("a.bias.sgd_momentum").to_vector<float>() == before);
}

// ---- schedules ----------------------------------------------------------------------------

TEST_CASE("schedules: warm-up then linear, constant and inverse square root") {
  LrSchedule s;
  s.base_lr = 1.0;
  s.warmup_steps = 4;
  s.total_steps = 14;
  s.min_lr = 0.1;
  // The warm-up is shared: 0.25, 0.5, 0.75, 1 over steps 0-3.
  for (auto kind : {LrSchedule::Kind::WarmupLinear, LrSchedule::Kind::WarmupConstant, LrSchedule::Kind::WarmupInverseSqrt}) {
    s.kind = kind;
    CAPTURE(schedule_name(kind));
    CHECK(s.at(0) == doctest::Approx(0.25));
    CHECK(s.at(1) == doctest::Approx(0.5));
    CHECK(s.at(3) == doctest::Approx(1.0));
  }
  s.kind = LrSchedule::Kind::WarmupLinear;  // from 1 at step 4 to 0.1 at step 14: 0.09 a step
  CHECK(s.at(4) == doctest::Approx(1.0));
  CHECK(s.at(9) == doctest::Approx(0.55));
  CHECK(s.at(13) == doctest::Approx(0.19));
  CHECK(s.at(14) == 0.1);  // exactly min_lr at the end, and held
  CHECK(s.at(1000) == 0.1);
  s.kind = LrSchedule::Kind::WarmupConstant;
  CHECK(s.at(4) == 1.0);
  CHECK(s.at(14) == 1.0);
  CHECK(s.at(1000) == 1.0);
  s.kind = LrSchedule::Kind::WarmupInverseSqrt;  // sqrt(4 / (step + 1))
  CHECK(s.at(4) == doctest::Approx(std::sqrt(0.8)));
  CHECK(s.at(15) == doctest::Approx(0.5));
  CHECK(s.at(99) == doctest::Approx(0.2));
  CHECK(s.at(399) == 0.1);  // 4 / 400: sqrt is 0.1 -- and never less
  CHECK(s.at(100000) == 0.1);
  // Without warm-up the decay runs from step 0 as if the warm-up were one step.
  s.warmup_steps = 0;
  s.min_lr = 0.0;
  CHECK(s.at(0) == 1.0);
  CHECK(s.at(3) == doctest::Approx(0.5));
  CHECK(s.at(8) == doctest::Approx(1.0 / 3.0));
  s.kind = LrSchedule::Kind::WarmupLinear;  // no warm-up: 1 at step 0 down to 0 at step 14
  CHECK(s.at(0) == 1.0);
  CHECK(s.at(7) == doctest::Approx(0.5));
}

TEST_CASE("schedules: the cosine and constant values are the ones runs were trained with") {
  // Bit for bit what LrSchedule::at returned before the new kinds (a resumed run must see the
  // same learning rates): the expressions written out here.
  LrSchedule s{.kind = LrSchedule::Kind::WarmupCosine, .base_lr = 3e-4, .warmup_steps = 7, .total_steps = 53, .min_lr = 3e-5};
  for (std::int64_t step = 0; step < 80; ++step) {
    double want;
    if (step < 7) {
      want = 3e-4 * static_cast<double>(step + 1) / 7.0;
    } else {
      const double progress = std::min(1.0, static_cast<double>(step - 7) / 46.0);
      want = 3e-5 + 0.5 * (3e-4 - 3e-5) * (1.0 + std::cos(M_PI * progress));
    }
    CAPTURE(step);
    CHECK(s.at(step) == want);
  }
  LrSchedule c{.kind = LrSchedule::Kind::Constant, .base_lr = 0.3, .warmup_steps = 10};
  CHECK(c.at(0) == 0.3);  // Constant ignores the warm-up
  CHECK(c.at(1000) == 0.3);
}

TEST_CASE("schedule names: parse_schedule reads schedule_name's, and names the choices otherwise") {
  for (auto kind : {LrSchedule::Kind::WarmupCosine, LrSchedule::Kind::WarmupLinear, LrSchedule::Kind::WarmupConstant,
                    LrSchedule::Kind::WarmupInverseSqrt})
    CHECK(parse_schedule(schedule_name(kind)) == kind);
  CHECK(std::string(schedule_name(LrSchedule::Kind::WarmupCosine)) == "cosine");
  CHECK(std::string(schedule_name(LrSchedule::Kind::WarmupInverseSqrt)) == "inverse-sqrt");
  CHECK(std::string(schedule_name(LrSchedule::Kind::Constant)) == "constant");
  CHECK(parse_schedule("linear") == LrSchedule::Kind::WarmupLinear);
  CHECK_THROWS_WITH_AS(parse_schedule("cosin"),
                       "unknown schedule 'cosin' (expected cosine, linear, constant or inverse-sqrt)",
                       std::invalid_argument);
  CHECK_THROWS_AS(parse_schedule(""), std::invalid_argument);
}

namespace {

// A parameter and the gradient of each step for the schedule tests below.
Tensor scheduled_param() {
  Tensor p = Tensor::from_vector<float>({0.5f, -1.5f, 2.0f}, {3});
  p.set_requires_grad(true);
  return p;
}
Tensor scheduled_grad(int step) {
  return Tensor::from_vector<float>({0.3f * static_cast<float>(step + 1), -0.7f, 0.1f / static_cast<float>(step + 1)}, {3});
}

}  // namespace

TEST_CASE("an optimizer with a schedule applies exactly the learning rates of a manual set_lr loop") {
  LrSchedule sched{.kind = LrSchedule::Kind::WarmupCosine, .base_lr = 0.1, .warmup_steps = 2, .total_steps = 5, .min_lr = 0.01};
  const auto make = scheduled_param;
  const auto grad = scheduled_grad;
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  {
    Tensor scheduled = make(), manual = make();
    Adam with({{"p", scheduled}}, AdamConfig{});
    Adam without({{"p", manual}}, AdamConfig{});
    CHECK(with.schedule() == nullptr);
    with.set_schedule(sched);
    REQUIRE(with.schedule() != nullptr);
    CHECK(with.schedule()->total_steps == 5);
    for (int step = 0; step < 5; ++step) {
      scheduled.set_grad(grad(step));
      manual.set_grad(grad(step));
      with.step();
      without.set_lr(sched.at(step));
      without.step();
      CAPTURE(step);
      CHECK(with.lr() == sched.at(step));  // the rate of the step just taken
      CHECK(same_bits(scheduled, manual));
    }
    CHECK(with.steps() == 5);
    // The learning rates differ from step to step: the schedule did something.
    CHECK(sched.at(0) != sched.at(3));
  }
  {
    SgdConfig cfg;
    cfg.momentum = 0.9;
    Tensor scheduled = make(), manual = make();
    Sgd with({{"p", scheduled}}, cfg);
    Sgd without({{"p", manual}}, cfg);
    with.set_schedule(sched);
    with.set_lr(123.0);  // overwritten by the schedule at the next step
    for (int step = 0; step < 5; ++step) {
      scheduled.set_grad(grad(step));
      manual.set_grad(grad(step));
      with.step();
      without.set_lr(sched.at(step));
      without.step();
      CAPTURE(step);
      CHECK(same_bits(scheduled, manual));
    }
  }
}

TEST_CASE("Adam and Sgd driven through an Optimizer& follow the schedule and equal the concrete-type loop bit for bit") {
  LrSchedule sched{.kind = LrSchedule::Kind::WarmupLinear, .base_lr = 0.05, .warmup_steps = 2, .total_steps = 5, .min_lr = 0.005};
  const auto make = scheduled_param;
  const auto grad = scheduled_grad;
  // A training loop that knows only the base class; the learning rate each step used.
  auto train = [&](Optimizer& opt, Tensor& p) {
    opt.set_schedule(sched);
    std::vector<double> lrs;
    for (int step = 0; step < 5; ++step) {
      opt.zero_grad();
      p.set_grad(grad(step));
      opt.step(0.5);
      lrs.push_back(opt.lr());
    }
    return lrs;
  };
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  AdamConfig adam_cfg;
  adam_cfg.weight_decay = 0.1;
  SgdConfig sgd_cfg;
  sgd_cfg.momentum = 0.9;
  sgd_cfg.weight_decay = 0.1;
  for (const bool sgd : {false, true}) {
    CAPTURE(sgd);
    Tensor through_base = make(), concrete = make();
    std::unique_ptr<Optimizer> base;
    if (sgd)
      base = std::make_unique<Sgd>(std::vector<std::pair<std::string, Tensor>>{{"p", through_base}}, sgd_cfg);
    else
      base = std::make_unique<Adam>(std::vector<std::pair<std::string, Tensor>>{{"p", through_base}}, adam_cfg);
    const std::vector<double> lrs = train(*base, through_base);
    REQUIRE(lrs.size() == 5);
    for (std::int64_t step = 0; step < 5; ++step) CHECK(lrs[static_cast<std::size_t>(step)] == sched.at(step));
    CHECK(base->steps() == 5);
    REQUIRE(base->schedule() != nullptr);
    CHECK(base->decayed("p"));
    // The same run on the concrete type.
    auto concrete_loop = [&](auto& opt) {
      opt.set_schedule(sched);
      for (int step = 0; step < 5; ++step) {
        opt.zero_grad();
        concrete.set_grad(grad(step));
        opt.step(0.5);
      }
      CHECK(opt.config().lr == opt.lr());
      CHECK(opt.config().lr == sched.at(4));
      CHECK(base->state_tensors().size() == opt.state_tensors().size());
    };
    if (sgd) {
      Sgd opt({{"p", concrete}}, sgd_cfg);
      concrete_loop(opt);
    } else {
      Adam opt({{"p", concrete}}, adam_cfg);
      concrete_loop(opt);
    }
    CHECK(same_bits(through_base, concrete));
    CHECK_FALSE(same_bits(through_base, make()));  // the steps moved the parameter
  }
}
