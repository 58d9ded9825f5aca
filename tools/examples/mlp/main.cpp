// A two-layer MLP learns the "two moons": two interleaved half-circles in the plane, one
// class each, that no straight line separates.
//
//   logits = W2 tanh(W1 x + b1) + b2          x in R^2, 32 hidden units, 2 classes
//   loss   = cross_entropy(logits, class)     mean over the 256 training points
//
// trained full-batch with AdamW. Everything random (the points, their noise, the initial
// weights) comes from seeded Generators, so every run prints the same numbers.
//
// The program checks its own result: it exits 1 unless the final loss is below half the
// initial one and at least 95% of 256 fresh points (never trained on) are classified right.
#include <wedge/wedge.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <numbers>
#include <vector>

using namespace wedge;

namespace {

struct Points {
  Tensor x;                           // (n, 2) float32
  Tensor y;                           // (n) int32, the class of each point
  std::vector<std::int32_t> classes;  // the same classes, on the host
};

// n points, half on each moon, each moved by Normal(0, noise) in both coordinates.
Points two_moons(std::int64_t n, double noise, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<float> xy;
  std::vector<std::int32_t> cls;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t c = static_cast<std::int32_t>(i % 2);
    const double t = std::numbers::pi * gen.uniform();
    // Upper moon around (0, 0); lower moon around (1, 0.5), flipped; then centred.
    const double px = c == 0 ? std::cos(t) : 1.0 - std::cos(t);
    const double py = c == 0 ? std::sin(t) : 0.5 - std::sin(t);
    xy.push_back(static_cast<float>(px - 0.5 + noise * gen.normal()));
    xy.push_back(static_cast<float>(py - 0.25 + noise * gen.normal()));
    cls.push_back(c);
  }
  return {Tensor::from_vector(xy, {n, 2}), Tensor::from_vector(cls, {n}), cls};
}

class MLP : public Module {
 public:
  MLP(std::int64_t in, std::int64_t hidden, std::int64_t classes, Generator& init)
      // nn::Linear defaults to GPT-style N(0, 0.02) weights; a small MLP wants weights
      // of order 1/sqrt(fan_in) so that tanh starts out of its linear regime.
      : fc1_(register_module("fc1", std::make_shared<nn::Linear>(in, hidden, init, true,
                                                                  1.0 / std::sqrt(double(in))))),
        fc2_(register_module("fc2", std::make_shared<nn::Linear>(
                                        hidden, classes, init, true, 1.0 / std::sqrt(double(hidden))))) {}

  // x (n, in) -> logits (n, classes)
  Tensor forward(const Tensor& x) const { return fc2_.forward(ops::tanh(fc1_.forward(x))); }

 private:
  nn::Linear& fc1_;
  nn::Linear& fc2_;
};

// The fraction of points whose largest logit is their class.
double accuracy(const MLP& model, const Points& data) {
  NoGradGuard no_grad;  // evaluation records no graph
  const Tensor logits = model.forward(data.x);
  const std::vector<float> l = logits.to_vector<float>();
  const std::int64_t classes = logits.size(1);
  std::int64_t right = 0;
  for (std::size_t i = 0; i < data.classes.size(); ++i) {
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c)
      if (l[i * classes + c] > l[i * classes + best]) best = c;
    right += best == data.classes[i];
  }
  return double(right) / double(data.classes.size());
}

int run() {
  const std::int64_t steps = 400, log_every = 50;
  const Points train = two_moons(256, 0.1, /*seed=*/1);
  const Points test = two_moons(256, 0.1, /*seed=*/2);

  Generator init(/*seed=*/0);
  MLP model(2, 32, 2, init);

  AdamConfig config;
  config.lr = 0.02;
  config.weight_decay = 1e-4;  // decoupled: AdamW
  Adam optimizer(model.named_parameters(), config);

  double initial = 0, loss_value = 0;
  for (std::int64_t step = 1; step <= steps; ++step) {
    Tensor loss = ops::cross_entropy(model.forward(train.x), train.y);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();

    loss_value = loss.item();
    if (step == 1) initial = loss_value;
    if (step == 1 || step % log_every == 0)
      std::printf("step %4lld  loss %.4f\n", static_cast<long long>(step), loss_value);
  }

  const double train_acc = accuracy(model, train), test_acc = accuracy(model, test);
  std::printf("final loss %.4f (initial %.4f), accuracy %.1f%% on the training points, "
              "%.1f%% on %lld fresh points\n",
              loss_value, initial, 100 * train_acc, 100 * test_acc,
              static_cast<long long>(test.classes.size()));

  if (!(loss_value < 0.5 * initial)) {
    std::fprintf(stderr, "FAIL: the final loss %.4f is not below half the initial %.4f\n",
                 loss_value, initial);
    return 1;
  }
  if (test_acc < 0.95) {
    std::fprintf(stderr, "FAIL: only %.1f%% of the fresh points are classified right (want 95%%)\n",
                 100 * test_acc);
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
