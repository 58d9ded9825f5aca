// The causality audit over many model configurations, and the leaky Grassmann and
// SheafState variants that it must catch.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/precision.h"
#include "ops/ops.h"

#include "models/audit.h"
#include "models/lm.h"

using namespace wedge;
using models::LMConfig;

namespace {

LMConfig small(const std::string& model) {
  LMConfig c;
  c.model = model;
  c.vocab_size = 23;
  c.layers = 2;
  c.d_model = 16;
  c.d_ff = 24;
  c.heads = 2;
  c.block = 24;
  c.dropout = 0.1;  // the audit must switch it off itself
  c.rank = 5;
  c.seed = 11;
  return c;
}

models::AuditResult audit(const LMConfig& c, std::int64_t L, std::vector<std::int64_t> positions = {}) {
  auto model = models::make_model(c);
  return models::audit_causal(*model, L, 1234, std::move(positions));
}

}  // namespace

TEST_CASE("default audit positions: 0, middle, L-2 and around the largest offset") {
  LMConfig c = small("grassmann");
  CHECK(models::default_audit_positions(c, 24) == std::vector<std::int64_t>{0, 12, 15, 16, 17, 22});
  c.block = 10;
  CHECK(models::default_audit_positions(c, 10) == std::vector<std::int64_t>{0, 5, 8});
  CHECK(models::default_audit_positions(small("transformer"), 24) ==
        std::vector<std::int64_t>{0, 12, 22});
  c.window_schedule = {3, 7};
  CHECK(models::default_audit_positions(c, 10) == std::vector<std::int64_t>{0, 5, 6, 7, 8});
}

TEST_CASE("TransformerLM passes the causality audit") {
  for (std::int64_t layers : {1, 3})
    for (std::int64_t heads : {1, 2, 4}) {
      LMConfig c = small("transformer");
      c.layers = layers;
      c.heads = heads;
      CAPTURE(layers);
      CAPTURE(heads);
      const auto r = audit(c, 24);
      CHECK_MESSAGE(r.passed, r.summary());
      CHECK(r.logits_compared > 0);
      CHECK(r.gradients_checked > 0);
    }
  // a sequence shorter than the block, every position probed
  LMConfig c = small("transformer");
  std::vector<std::int64_t> every;
  for (std::int64_t t = 0; t <= 9; ++t) every.push_back(t);
  const auto r = audit(c, 11, every);
  CHECK_MESSAGE(r.passed, r.summary());
  CHECK(r.positions == every);
}

TEST_CASE("GrassmannLM passes the causality audit in every kind of configuration") {
  struct Case {
    const char* name;
    LMConfig config;
    std::int64_t L;
  };
  std::vector<Case> cases;
  {
    LMConfig c = small("grassmann");
    c.layers = 1;
    c.windows = {1};
    cases.push_back({"1 layer, window {1}", c, 24});
  }
  cases.push_back({"2 layers, the paper's windows", small("grassmann"), 24});
  {
    LMConfig c = small("grassmann");
    c.block = 12;  // smaller than the largest window (16)
    cases.push_back({"block smaller than the largest window", c, 12});
  }
  {
    LMConfig c = small("grassmann");
    c.layers = 6;
    c.window_schedule = {1, 1, 2, 4, 8, 16};
    cases.push_back({"window schedule", c, 24});
  }
  {
    LMConfig c = small("grassmann");
    c.mix_out_proj = false;
    cases.push_back({"no mixing output projection", c, 24});
  }
  {
    LMConfig c = small("grassmann");
    c.windows = {3, 5};
    c.rank = 2;
    cases.push_back({"rank 2, smallest offset 3", c, 24});
  }
  {
    LMConfig c = small("grassmann");
    cases.push_back({"shorter sequence than the block", c, 9});
  }
  {
    LMConfig c = small("grassmann");
    c.positions = "none";
    cases.push_back({"no position table", c, 24});
  }
  for (const Case& k : cases) {
    CAPTURE(k.name);
    const auto r = audit(k.config, k.L);
    CHECK_MESSAGE(r.passed, r.summary());
  }
}

TEST_CASE("the leaky Grassmann variant (pairs with t + delta) is caught, with its position") {
  SUBCASE("one layer, offset 1: the output at t depends on the token at t + 1") {
    LMConfig c = small("grassmann");
    c.layers = 1;
    c.windows = {1};
    c.leaky = true;
    const auto r = audit(c, 24);
    REQUIRE_FALSE(r.passed);
    // every probed t leaks, in both checks
    std::size_t outputs = 0, gradients = 0;
    for (const auto& v : r.violations) {
      if (v.check == "output") {
        ++outputs;
        CHECK(v.position == v.t);  // the changed logits: at t itself (it sees t + 1)
      }
      if (v.check == "gradient") {
        ++gradients;
        CHECK(v.position == v.t + 1);  // the input that leaked
        CHECK(v.magnitude > 0);
      }
    }
    CHECK(outputs == r.positions.size());
    CHECK(gradients == r.positions.size());
    CHECK(r.summary().find("NOT causal") == 0);
    CHECK(r.summary().find("t=0") != std::string::npos);
  }
  SUBCASE("the paper's windows, 2 layers") {
    LMConfig c = small("grassmann");
    c.leaky = true;
    const auto r = audit(c, 24);
    CHECK_FALSE(r.passed);
  }
  SUBCASE("only a large offset: the leak is still found") {
    LMConfig c = small("grassmann");
    c.layers = 1;
    c.windows = {16};
    c.leaky = true;
    const auto r = audit(c, 20);
    REQUIRE_FALSE(r.passed);
    CHECK(r.violations.front().t == 0);
    bool gradient_at_16 = false;
    for (const auto& v : r.violations)
      if (v.check == "gradient" && v.t == 0 && v.position == 16) gradient_at_16 = true;
    CHECK(gradient_at_16);
  }
  SUBCASE("window schedule") {
    LMConfig c = small("grassmann");
    c.layers = 4;
    c.window_schedule = {1, 2, 4, 8};
    c.leaky = true;
    CHECK_FALSE(audit(c, 24).passed);
  }
  SUBCASE("no position table") {
    LMConfig c = small("grassmann");
    c.positions = "none";
    c.leaky = true;
    CHECK_FALSE(audit(c, 24).passed);
  }
}

LMConfig small_sheaf() {
  LMConfig c = small("sheaf");
  c.patch = 4;
  c.cover_depth = 3;
  c.types = 3;
  c.state_size = 3;
  c.section_dim = 6;
  c.expert_d_ff = 8;
  return c;
}

TEST_CASE("SheafStateLM passes the causality audit in every shape of patch and cover") {
  struct Case {
    const char* name;
    std::int64_t patch, depth, L;
  };
  for (const Case k : {Case{"L a multiple of P", 4, 3, 24}, Case{"L not a multiple of P", 5, 3, 23},
                       Case{"P = 1: every token its own patch", 1, 4, 13}, Case{"P > L: one patch", 32, 2, 17},
                       Case{"cover depth 1 (the previous patch only)", 3, 1, 20},
                       Case{"cover depth 6, deeper than the sequence", 2, 6, 24}}) {
    for (const char* positions : {"learned", "none"}) {
      CAPTURE(k.name);
      CAPTURE(positions);
      LMConfig c = small_sheaf();
      c.patch = k.patch;
      c.cover_depth = k.depth;
      c.positions = positions;
      // Every position, so each patch boundary is probed on both sides.
      std::vector<std::int64_t> all;
      for (std::int64_t t = 0; t <= k.L - 2; ++t) all.push_back(t);
      const auto r = audit(c, k.L, all);
      CHECK_MESSAGE(r.passed, r.summary());
      CHECK(r.gradients_checked > 0);
    }
  }
}

TEST_CASE("the leaky SheafState variant (c_p sees its own patch) is caught inside a patch") {
  LMConfig c = small_sheaf();
  c.leaky = true;
  const auto r = audit(c, 24);
  REQUIRE_FALSE(r.passed);
  // The leak is within a patch: the output at t sees a later token of t's own patch.
  bool within_patch = false;
  for (const auto& v : r.violations)
    if (v.check == "gradient" && v.position / c.patch == v.t / c.patch) within_patch = true;
  CHECK(within_patch);
  SUBCASE("one layer") {
    c.layers = 1;
    CHECK_FALSE(audit(c, 24).passed);
  }
  SUBCASE("no position table") {
    c.positions = "none";
    CHECK_FALSE(audit(c, 24).passed);
  }
}

TEST_CASE("default audit positions of SheafStateLM straddle the first patch boundaries") {
  LMConfig c = small_sheaf();
  CHECK(models::default_audit_positions(c, 24) == std::vector<std::int64_t>{0, 2, 3, 4, 7, 8, 12, 22});
}

TEST_CASE("the audit restores the model's mode and leaves parameter gradients alone") {
  auto model = models::make_model(small("transformer"));
  model->train();
  const auto r = models::audit_causal(*model, 10, 1);
  CHECK(r.passed);
  CHECK(model->is_training());
  for (const auto& [name, p] : model->named_parameters()) {
    CHECK(p.requires_grad());
    CHECK_FALSE(p.grad().defined());
  }
}

TEST_CASE("the audit rejects lengths and positions it cannot probe") {
  auto model = models::make_model(small("grassmann"));
  CHECK_THROWS_AS(models::audit_causal(*model, 25, 1), std::invalid_argument);
  CHECK_THROWS_AS(models::audit_causal(*model, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(models::audit_causal(*model, 10, 1, {9}), std::invalid_argument);
  CHECK(models::audit_causal(*model, 10, 1, {8}).passed);
}

TEST_CASE("SheafStateLM's chain over patches stays finite when its weights are large") {
  // h0 is a product of two maps of the glued section; unless the summaries are normalised,
  // patch after patch squares the values and a long sequence overflows.
  LMConfig c = small_sheaf();
  c.patch = 1;  // 23 patches chained in one sequence
  auto model = models::make_model(c);
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : model->named_parameters()) p.copy_(p * 8.0);
  }
  model->eval();
  std::vector<std::int32_t> ids;
  for (int t = 0; t < 23; ++t) ids.push_back((t * 7) % 23);
  const auto logits = model->forward(Tensor::from_vector(ids, {1, 23})).to_vector<float>();
  for (float v : logits) REQUIRE(std::isfinite(v));
}

TEST_CASE("in bf16 mixed precision every model passes the audit and the leaky variants are still caught") {
  // Rounding the GEMM operands must not open a path from later tokens: the same bit-exact
  // perturbation and zero-gradient checks, every product in bf16 (forward and backward).
  const MatmulPrecisionGuard bf16(Precision::BF16);
  for (const char* kind : {"transformer", "grassmann"}) {
    CAPTURE(kind);
    const auto r = audit(small(kind), 24);
    CHECK_MESSAGE(r.passed, r.summary());
    CHECK(r.gradients_checked > 0);
  }
  LMConfig sheaf = small_sheaf();
  sheaf.patch = 5;  // L not a multiple of P
  std::vector<std::int64_t> all;
  for (std::int64_t t = 0; t <= 21; ++t) all.push_back(t);
  const auto r = audit(sheaf, 23, all);
  CHECK_MESSAGE(r.passed, r.summary());

  LMConfig leaky = small("grassmann");
  leaky.leaky = true;
  CHECK_FALSE(audit(leaky, 24).passed);
  LMConfig leaky_sheaf = small_sheaf();
  leaky_sheaf.leaky = true;
  CHECK_FALSE(audit(leaky_sheaf, 24).passed);
}
