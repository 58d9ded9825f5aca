// A tiny model of each kind memorises one batch: the whole training path (forward,
// cross-entropy and the model's auxiliary losses, backward through every op of the model,
// AdamW) works together.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "engine/optim.h"
#include "engine/rng.h"
#include "models/lm.h"
#include "ops/ops.h"

using namespace wedge;

namespace {

// Trains until the loss is below 0.02 or `steps` steps have run; returns the last loss.
double train_on_one_batch(const std::string& kind, int steps, double* first_loss) {
  models::LMConfig c;
  c.model = kind;
  c.vocab_size = 24;
  c.layers = 2;
  c.d_model = 32;
  c.d_ff = 64;
  c.heads = 2;
  c.block = 16;
  c.dropout = 0.0;
  c.rank = 6;
  c.windows = {1, 2, 4};
  c.patch = 4;  // SheafStateLM: four patches per sequence
  c.types = 2;
  c.state_size = 4;
  c.section_dim = 8;
  c.expert_d_ff = 32;
  c.seed = 3;
  auto model = models::make_model(c);

  const std::int64_t B = 4, L = 16;
  Generator gen(99);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * (L + 1)));
  for (auto& t : tokens) t = static_cast<std::int32_t>(gen.integer(24));
  std::vector<std::int32_t> inputs, targets;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < L; ++t) {
      inputs.push_back(tokens[static_cast<std::size_t>(b * (L + 1) + t)]);
      targets.push_back(tokens[static_cast<std::size_t>(b * (L + 1) + t + 1)]);
    }
  const Tensor x = Tensor::from_vector(inputs, {B, L});
  const Tensor y = Tensor::from_vector(targets, {B, L});

  AdamConfig adam;
  adam.lr = 1e-2;
  adam.weight_decay = 0.01;
  Adam opt(model->named_parameters(), adam);
  double loss = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    const Tensor l = ops::cross_entropy(model->forward(x), y);
    loss = l.item();
    if (step == 0) *first_loss = loss;
    REQUIRE(std::isfinite(loss));
    const Tensor aux = model->auxiliary_loss();  // SheafStateLM's gluing and balance terms
    (aux.defined() ? l + aux : l).backward();
    opt.step();
    if (loss < 0.02) {
      MESSAGE(kind << ": loss " << loss << " after " << step + 1 << " steps");
      break;
    }
  }
  return loss;
}

}  // namespace

TEST_CASE("a tiny TransformerLM memorises one batch") {
  double first = 0;
  const double last = train_on_one_batch("transformer", 300, &first);
  CHECK(first == doctest::Approx(std::log(24.0)).epsilon(0.05));  // uniform at init
  CHECK(last < 0.05);
}

TEST_CASE("a tiny GrassmannLM memorises one batch") {
  double first = 0;
  const double last = train_on_one_batch("grassmann", 300, &first);
  CHECK(first == doctest::Approx(std::log(24.0)).epsilon(0.05));
  CHECK(last < 0.05);
}

TEST_CASE("a tiny SheafStateLM memorises one batch") {
  double first = 0;
  const double last = train_on_one_batch("sheaf", 300, &first);
  CHECK(first == doctest::Approx(std::log(24.0)).epsilon(0.05));
  CHECK(last < 0.05);
}
