// The models' forward passes against the plain double-precision reference of
// model_reference.h, their shapes and argument checks, the tied head, and dropout.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "model_reference.h"
#include "parameter_gradients.h"
#include "models/lm.h"
#include "models/sheaf.h"
#include "models/tied_embedding_lm.h"
#include "ops/ops.h"

using namespace wedge;
using models::LMConfig;

namespace {

LMConfig tiny(const std::string& model) {
  LMConfig c;
  c.model = model;
  c.vocab_size = 11;
  c.layers = 2;
  c.d_model = 8;
  c.d_ff = 12;
  c.heads = 2;
  c.block = 9;
  c.dropout = 0.0;
  c.rank = 4;
  c.windows = {1, 3};
  c.patch = 4;  // SheafStateLM: 9 tokens are two full patches and one of a single token
  c.cover_depth = 3;
  c.types = 2;
  c.state_size = 3;
  c.section_dim = 4;
  c.expert_d_ff = 6;
  c.seed = 7;
  return c;
}

std::vector<std::int32_t> random_ids(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& id : ids) id = static_cast<std::int32_t>(gen.integer(static_cast<std::uint64_t>(vocab)));
  return ids;
}

// Runs the model on a batch of 2 sequences of length L and compares every logit with the
// reference; returns the largest absolute difference.
double max_error_against_reference(const LMConfig& c, std::int64_t L) {
  auto model = models::make_model(c);
  models::testing::randomize_parameters(*model, c.seed + 100);
  model->eval();
  const std::int64_t B = 2;
  const std::vector<std::int32_t> ids = random_ids(B * L, c.vocab_size, c.seed + 5);
  std::vector<float> logits;
  {
    NoGradGuard no_grad;
    const Tensor out = model->forward(Tensor::from_vector(ids, {B, L}));
    REQUIRE(out.shape() == Shape{B, L, c.vocab_size});
    logits = out.to_vector<float>();
  }
  const models::testing::ReferenceLM ref(c, models::testing::host_parameters(*model));
  double worst = 0, scale = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::vector<std::int32_t> row(ids.begin() + b * L, ids.begin() + (b + 1) * L);
    const auto expected = ref.logits(row);
    for (std::int64_t t = 0; t < L; ++t)
      for (std::int64_t v = 0; v < c.vocab_size; ++v) {
        const double e = expected[t][v];
        worst = std::max(worst, std::fabs(e - logits[static_cast<std::size_t>((b * L + t) * c.vocab_size + v)]));
        scale = std::max(scale, std::fabs(e));
      }
  }
  // Randomised weights make logits of order 1; anything structural is off by far more.
  REQUIRE(scale > 0.1);
  return worst;
}

}  // namespace

TEST_CASE("TransformerLM matches the reference equations") {
  for (std::int64_t heads : {1, 2, 4}) {
    LMConfig c = tiny("transformer");
    c.heads = heads;
    CAPTURE(heads);
    CHECK(max_error_against_reference(c, 9) < 2e-4);
    CHECK(max_error_against_reference(c, 4) < 2e-4);  // shorter than the block
  }
}

TEST_CASE("GrassmannLM matches the reference equations") {
  LMConfig c = tiny("grassmann");
  SUBCASE("window set") { CHECK(max_error_against_reference(c, 9) < 2e-4); }
  SUBCASE("offsets beyond the sequence, several positions without a partner") {
    c.windows = {3, 5, 12};
    CHECK(max_error_against_reference(c, 7) < 2e-4);
  }
  SUBCASE("window schedule") {
    c.layers = 3;
    c.window_schedule = {1, 4, 2};
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
  SUBCASE("no mixing output projection") {
    c.mix_out_proj = false;
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
  SUBCASE("rank 2 (one Plücker coordinate)") {
    c.rank = 2;
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
  SUBCASE("leaky variant pairs with t + delta") {
    c.leaky = true;
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
}

TEST_CASE("SheafStateLM matches the reference equations (each patch scanned from its glued state)") {
  LMConfig c = tiny("sheaf");
  SUBCASE("L not a multiple of P") { CHECK(max_error_against_reference(c, 9) < 2e-4); }
  SUBCASE("shorter than one patch") { CHECK(max_error_against_reference(c, 3) < 2e-4); }
  SUBCASE("P = 1: every token its own patch, the cover reaching 4 back") {
    c.patch = 1;
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
  SUBCASE("cover depth 1, one type, one state") {
    c.cover_depth = 1;
    c.types = 1;
    c.state_size = 1;
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
  SUBCASE("leaky variant: the patch's own summary in its cover") {
    c.leaky = true;
    CHECK(max_error_against_reference(c, 9) < 2e-4);
  }
}

TEST_CASE("SheafStateLM reports its gluing weights in eval mode: a distribution over each patch's cover") {
  LMConfig c = tiny("sheaf");
  c.patch = 2;  // 9 tokens: 5 patches, so patch 4 has the full cover {3, 2, 0}
  auto model = models::make_model(c);
  auto& sheaf = dynamic_cast<models::SheafStateLM&>(*model);
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>{1, 5, 2, 7, 3, 3, 9, 0, 4, 6, 6, 1, 2, 8, 10, 5, 4, 2}, {2, 9});
  model->train();
  model->forward(ids);
  CHECK(sheaf.gluing_weights().empty());  // nothing kept while training
  model->eval();
  model->forward(ids);
  REQUIRE(sheaf.gluing_weights().size() == 2);
  for (const Tensor& w : sheaf.gluing_weights()) {
    REQUIRE(w.shape() == std::vector<std::int64_t>{2, 5, 3});
    const std::vector<float> a = w.to_vector<float>();
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t p = 0; p < 5; ++p) {
        double sum = 0;
        for (std::int64_t j = 0; j < 3; ++j) {
          const float v = a[static_cast<std::size_t>((b * 5 + p) * 3 + j)];
          if (p < (1 << j)) CHECK(v == 0.0f);  // no patch p - 2^j
          CHECK(v >= 0.0f);
          sum += v;
        }
        CHECK(sum == doctest::Approx(p == 0 ? 0.0 : 1.0).epsilon(1e-5));
      }
  }
  const auto by_distance = model->diagnostics().at("gluing_weight_by_distance");
  REQUIRE(by_distance.size() == 3);
  CHECK(by_distance[0].get<double>() > 0);  // patch 1 has only its neighbour: weight 1 there
  CHECK(by_distance[2].get<double>() < 1);
  // Five tokens are three patches: the last reaches 2 back, none 4 back, so two slots.
  model->forward(ops::narrow(ids, 1, 0, 5));
  CHECK(model->diagnostics().at("gluing_weight_by_distance").size() == 2);
}

TEST_CASE("SheafStateLM in pieces: with the batch's expert counts its auxiliary terms add up to the whole batch's") {
  LMConfig c = tiny("sheaf");
  c.types = 3;
  c.balance_weight = 0.5;
  c.energy_weight = 0.1;
  auto model = models::make_model(c);
  model->train();
  REQUIRE(model->batch_counts_size() == 2 * 3);  // layers x experts
  Generator gen(11);
  std::vector<std::int32_t> tokens(5 * 9);
  for (auto& t : tokens) t = static_cast<std::int32_t>(gen.integer(11));
  const Tensor ids = Tensor::from_vector(tokens, {5, 9});
  // The gradient of every parameter (zeros where none) after `run`'s backward passes.
  const auto gradients = [&](const std::function<double()>& run) {
    model->zero_grad();
    const double value = run();
    std::vector<std::vector<float>> g;
    for (const auto& [name, p] : model->named_parameters())
      g.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>(static_cast<std::size_t>(p.numel())));
    return std::make_pair(value, g);
  };
  std::vector<double> whole_counts;
  const auto whole = gradients([&] {
    model->forward(ids);
    whole_counts = model->batch_counts();
    const Tensor aux = model->auxiliary_loss();
    aux.backward();
    return aux.item();
  });
  // Rows [0, 2) and [2, 5): each piece's term weighted by its share of the rows.
  const std::vector<std::pair<std::int64_t, std::int64_t>> pieces = {{0, 2}, {2, 3}};
  std::vector<double> totals(model->batch_counts_size(), 0.0);
  std::vector<std::vector<double>> piece_counts;
  for (const auto& [first, rows] : pieces) {
    NoGradGuard no_grad;
    model->forward(ops::narrow(ids, 0, first, rows));
    piece_counts.push_back(model->batch_counts());
    for (std::size_t i = 0; i < totals.size(); ++i) totals[i] += piece_counts.back()[i];
  }
  CHECK(totals == whole_counts);
  const auto in_pieces = [&](bool with_totals) {
    return gradients([&] {
      double value = 0;
      for (const auto& [first, rows] : pieces) {
        model->forward(ops::narrow(ids, 0, first, rows));
        if (with_totals) model->use_batch_counts(totals);
        const Tensor aux = model->auxiliary_loss() * (double(rows) / 5.0);
        aux.backward();
        value += aux.item();
      }
      return value;
    });
  };
  const auto split = in_pieces(true);
  CHECK(split.first == doctest::Approx(whole.first).epsilon(1e-6));
  // Each gradient to float32 rounding of its tensor's scale: the sums run in other orders.
  for (std::size_t t = 0; t < whole.second.size(); ++t) {
    float scale = 0;
    for (const float g : whole.second[t]) scale = std::max(scale, std::abs(g));
    for (std::size_t i = 0; i < whole.second[t].size(); ++i)
      CHECK(std::abs(split.second[t][i] - whole.second[t][i]) <= 1e-5f * scale);
  }
  // With each piece's own counts the balance term is another function: the pieces of this
  // (seeded) batch route in other shares than the whole.
  bool shares_differ = false;
  for (std::size_t l = 0; l < 2; ++l)
    for (std::size_t k = 0; k < 3; ++k)
      shares_differ |= piece_counts[0][l * 3 + k] / 2.0 != totals[l * 3 + k] / 5.0;
  REQUIRE(shares_differ);
  CHECK(std::abs(in_pieces(false).first - whole.first) > 1e-6 * std::abs(whole.first));
  // Totals of another shape are refused; a forward forgets the totals given before it.
  CHECK_THROWS_AS(model->use_batch_counts({1.0, 2.0}), std::invalid_argument);
  model->forward(ids);
  CHECK(model->auxiliary_loss().item() == doctest::Approx(whole.first).epsilon(1e-6));
}

TEST_CASE("forward checks its input") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    auto model = models::make_model(tiny(kind));
    CHECK_THROWS_AS(model->forward(Tensor::zeros({2, 10}, DType::I32)), std::invalid_argument);
    CHECK_THROWS_AS(model->forward(Tensor::zeros({2, 4}, DType::F32)), std::invalid_argument);
    CHECK_THROWS_AS(model->forward(Tensor::zeros({8}, DType::I32)), std::invalid_argument);
    CHECK(model->forward(Tensor::zeros({3, 1}, DType::I32)).shape() == Shape{3, 1, 11});
  }
}

TEST_CASE("the same seed builds the same model; another seed a different one") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    LMConfig c = tiny(kind);
    auto a = models::make_model(c), b = models::make_model(c);
    c.seed += 1;
    auto other = models::make_model(c);
    const auto pa = a->named_parameters(), pb = b->named_parameters(), po = other->named_parameters();
    REQUIRE(pa.size() == pb.size());
    bool any_difference = false;
    for (std::size_t i = 0; i < pa.size(); ++i) {
      CHECK(pa[i].first == pb[i].first);
      CHECK(pa[i].second.to_vector<float>() == pb[i].second.to_vector<float>());
      if (pa[i].second.to_vector<float>() != po[i].second.to_vector<float>()) any_difference = true;
    }
    CHECK(any_difference);
  }
}

TEST_CASE("the output head is the token table: gradient reaches rows of unseen tokens") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(kind);
    LMConfig c = tiny(kind);
    auto model = models::make_model(c);
    auto& lm = dynamic_cast<models::TiedEmbeddingLM&>(*model);
    // Only tokens 0..3 appear in the input and as targets: rows 4..10 of E can only get a
    // gradient through the head's softmax.
    const std::vector<std::int32_t> ids = {0, 1, 2, 3, 2, 1, 0, 3};
    const std::vector<std::int32_t> targets = {1, 2, 3, 2, 1, 0, 3, 0};
    auto loss_value = [&] {
      NoGradGuard no_grad;
      return ops::cross_entropy(model->forward(Tensor::from_vector(ids, {1, 8})),
                                Tensor::from_vector(targets, {1, 8}))
          .item();
    };
    model->zero_grad();
    ops::cross_entropy(model->forward(Tensor::from_vector(ids, {1, 8})),
                       Tensor::from_vector(targets, {1, 8}))
        .backward();
    const Tensor E = lm.token_table();
    const std::vector<float> grad = E.grad().to_vector<float>();
    const std::int64_t d = c.d_model;
    for (std::int64_t v = 4; v < c.vocab_size; ++v) {
      double norm = 0;
      for (std::int64_t i = 0; i < d; ++i) norm += std::fabs(grad[static_cast<std::size_t>(v * d + i)]);
      CHECK(norm > 0);
    }
    // ... and that gradient is the true derivative (central difference on E[7][2]).
    const std::size_t k = 7 * static_cast<std::size_t>(d) + 2;
    std::vector<float> table = E.to_vector<float>();
    const float original = table[k], h = 1e-2f;
    auto loss_at = [&](float value) {
      table[k] = value;
      NoGradGuard no_grad;
      E.detach().copy_(Tensor::from_vector(table, E.shape()));
      return loss_value();
    };
    const double numeric = (loss_at(original + h) - loss_at(original - h)) / (2.0 * h);
    loss_at(original);
    CHECK(grad[k] == doctest::Approx(numeric).epsilon(0.02));
    // No separate head weight anywhere.
    for (const auto& [name, p] : model->named_parameters())
      CHECK((p.shape() != Shape{c.vocab_size, c.d_model} || name == "token_embedding.weight"));
  }
}

TEST_CASE("gradients of every parameter tensor match central differences (all three models)") {
  // In particular GrassmannLM's mixing output: it folds W_o W_plü into one matrix before
  // the token GEMM, so W_o, b_o, W_plü and b_plü get their gradients through that fold;
  // and SheafStateLM's A_log, D, dt_bias and restriction bank, which reach the loss only
  // through the scans and the chain over patches.
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(kind);
    LMConfig c = tiny(kind);
    auto model = models::make_model(c);
    models::testing::randomize_parameters(*model, 21);
    const std::vector<std::int32_t> ids = random_ids(2 * 9, c.vocab_size, 3);
    const std::vector<std::int32_t> targets = random_ids(2 * 9, c.vocab_size, 4);
    auto loss = [&] {
      return ops::cross_entropy(ops::reshape(model->forward(Tensor::from_vector(ids, {2, 9})), {18, c.vocab_size}),
                                Tensor::from_vector(targets, {18}));
    };
    models::testing::check_parameter_gradients(*model, loss, 1e-2f);
  }
}

TEST_CASE("dropout: active in training, off in eval, reproducible from the seed") {
  for (const char* kind : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(kind);
    LMConfig c = tiny(kind);
    c.dropout = 0.3;
    auto a = models::make_model(c), b = models::make_model(c);
    const Tensor ids = Tensor::from_vector(random_ids(18, c.vocab_size, 3), {2, 9});
    NoGradGuard no_grad;
    const auto a1 = a->forward(ids).to_vector<float>();
    const auto a2 = a->forward(ids).to_vector<float>();
    const auto b1 = b->forward(ids).to_vector<float>();
    CHECK(a1 != a2);  // fresh masks each step
    CHECK(a1 == b1);  // same seed, same masks
    a->eval();
    b->eval();
    const auto e1 = a->forward(ids).to_vector<float>();
    CHECK(e1 == a->forward(ids).to_vector<float>());
    CHECK(e1 == b->forward(ids).to_vector<float>());
    CHECK(e1 != a1);
  }
}

TEST_CASE("loss: the fused head and loss equal cross_entropy of the logits, with the same gradients, for every model") {
  for (const std::string name : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(name);
    LMConfig c = tiny(name);
    auto model = models::make_model(c);
    const std::int64_t B = 3, L = c.block;
    const Tensor ids = Tensor::from_vector(random_ids(B * L, c.vocab_size, 5), {B, L});
    std::vector<std::int32_t> t = random_ids(B * L, c.vocab_size, 6);
    t[4] = t[17] = -100;  // ignored positions
    const Tensor targets = Tensor::from_vector(t, {B, L});
    auto gradients = [&](const Tensor& loss) {
      model->zero_grad();
      loss.backward();
      std::vector<std::vector<float>> g;
      for (const auto& [pname, p] : model->named_parameters())
        g.push_back(p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>());
      return g;
    };
    const Tensor logits = model->forward(ids);
    const Tensor plain = ops::cross_entropy(ops::reshape(logits, {B * L, c.vocab_size}), ops::reshape(targets, {B * L}));
    const auto g_plain = gradients(plain);
    const Tensor fused = model->loss(ids, targets);
    const auto g_fused = gradients(fused);
    CHECK(fused.item() == doctest::Approx(plain.item()).epsilon(1e-6));
    REQUIRE(g_fused.size() == g_plain.size());
    for (std::size_t i = 0; i < g_plain.size(); ++i) {
      REQUIRE(g_fused[i].size() == g_plain[i].size());
      for (std::size_t k = 0; k < g_plain[i].size(); ++k)
        CHECK(g_fused[i][k] == doctest::Approx(g_plain[i][k]).epsilon(1e-4).scale(1e-6));
    }
  }
}
