// Generation through streams (tools/generation.h): the sampler on hand-computed cases, and
// the streamed generation token for token equal to the plain loop that runs the whole
// forward over the context for every new token — the windows past the block included.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "ops/ops.h"

#include "models/lm.h"
#include "tools/generation.h"

using namespace wedge;
using namespace wedge::tools;

namespace {

models::LMConfig tiny(const std::string& model) {
  models::LMConfig c;
  c.model = model;
  c.vocab_size = 31;
  c.layers = 2;
  c.d_model = 16;
  c.d_ff = 24;
  c.heads = 2;
  c.block = 12;
  c.rank = 4;
  c.windows = {1, 3};
  c.patch = 4;
  c.cover_depth = 2;
  c.types = 2;
  c.state_size = 4;
  c.section_dim = 8;
  c.expert_d_ff = 8;
  c.seed = 3;
  return c;
}

// The plain loop: the whole forward over the context for every new token. The context
// is the latest tokens since the window last moved; when it would pass the block, it
// moves to the latest block / 2 tokens (what generate() documents).
std::vector<std::int32_t> reference_generation(models::LanguageModel& model, std::vector<std::int32_t> tokens,
                                               std::int64_t max_new, const SamplingOptions& o) {
  NoGradGuard no_grad;
  model.eval();
  const std::int64_t block = model.config().block, V = model.config().vocab_size;
  Generator draw(o.seed);
  std::int64_t start = std::max<std::int64_t>(0, static_cast<std::int64_t>(tokens.size()) - block);
  for (std::int64_t i = 0; i < max_new; ++i) {
    const std::int64_t len = static_cast<std::int64_t>(tokens.size()) - start;
    const std::vector<std::int32_t> ctx(tokens.begin() + start, tokens.end());
    const Tensor logits = model.forward(Tensor::from_vector(ctx, {1, len}));
    const std::vector<double> all = logits.to(DType::F64).to_vector<double>();
    const std::vector<double> last(all.end() - V, all.end());
    tokens.push_back(sample_token(last, o, draw.uniform()));
    if (static_cast<std::int64_t>(tokens.size()) - start > block)
      start = static_cast<std::int64_t>(tokens.size()) - std::max<std::int64_t>(1, block / 2);
  }
  return tokens;
}

// Stream evaluation done by hand: for every token of each piece of `context` tokens (0:
// one piece) but the first, the whole forward of `reference` over its context — the
// piece's tokens before it since the window last moved, where a window of `capacity`
// tokens moves to the latest capacity / 2 when it would overflow — and the mean of
// -log p(token). Returns (mean NLL, predicted tokens).
std::pair<double, std::int64_t> reference_stream_nll(models::LanguageModel& reference, const std::vector<std::int32_t>& tokens,
                                                     std::int64_t context, std::int64_t capacity) {
  NoGradGuard no_grad;
  reference.eval();
  const auto total = static_cast<std::int64_t>(tokens.size());
  const std::int64_t piece = context == 0 ? total : context, V = reference.config().vocab_size;
  double sum = 0;
  std::int64_t count = 0;
  for (std::int64_t begin = 0; begin < total; begin += piece) {
    const std::int64_t end = std::min(total, begin + piece);
    std::int64_t start = begin;
    for (std::int64_t t = begin; t + 1 < end; ++t) {
      if (t - start + 1 > capacity) start = t - capacity / 2;
      const std::vector<std::int32_t> ctx(tokens.begin() + start, tokens.begin() + t + 1);
      const std::vector<double> all =
          reference.forward(Tensor::from_vector(ctx, {1, t + 1 - start})).to(DType::F64).to_vector<double>();
      const std::vector<double> last(all.end() - V, all.end());
      const double top = *std::max_element(last.begin(), last.end());
      double z = 0;
      for (double v : last) z += std::exp(v - top);
      sum += top + std::log(z) - last[static_cast<std::size_t>(tokens[static_cast<std::size_t>(t + 1)])];
      ++count;
    }
  }
  return {sum / static_cast<double>(count), count};
}

}  // namespace

TEST_CASE("sample_token: greedy, top-k, top-p and never-sampled ids on hand-computed cases") {
  // Probabilities 0.5, 0.3, 0.2 at temperature 1.
  const std::vector<double> logits = {std::log(0.5), std::log(0.3), std::log(0.2)};
  SamplingOptions o;
  o.top_k = 0;
  o.temperature = 0;
  CHECK(sample_token(logits, o, 0.99) == 0);
  o.never = {0};
  CHECK(sample_token(logits, o, 0.0) == 1);  // the most likely allowed token
  o.never = {};
  o.temperature = 1;
  // Cumulative 0.5, 0.8, 1.0: u in [0, .5) -> 0, [.5, .8) -> 1, [.8, 1) -> 2.
  CHECK(sample_token(logits, o, 0.49) == 0);
  CHECK(sample_token(logits, o, 0.51) == 1);
  CHECK(sample_token(logits, o, 0.81) == 2);
  o.top_k = 2;  // renormalised over 0.5 and 0.3: 0 below 0.625
  CHECK(sample_token(logits, o, 0.6) == 0);
  CHECK(sample_token(logits, o, 0.65) == 1);
  CHECK(sample_token(logits, o, 0.999) == 1);
  o.top_k = 0;
  o.top_p = 0.6;  // 0.5 < 0.6 <= 0.8: tokens 0 and 1 kept
  CHECK(sample_token(logits, o, 0.999) == 1);
  CHECK(sample_token(logits, o, 0.6) == 0);
  o.top_p = 0.5;  // the first token alone reaches it
  CHECK(sample_token(logits, o, 0.999) == 0);
  o.top_p = 1;
  o.never = {0, 1};
  CHECK(sample_token(logits, o, 0.0) == 2);
  o.never = {0, 1, 2};
  CHECK_THROWS_AS(sample_token(logits, o, 0.5), std::invalid_argument);
  // Equal logits: the draw is in id order, whatever the sort does.
  o.never = {};
  CHECK(sample_token({1.0, 1.0, 1.0, 1.0}, o, 0.3) == 1);
}

TEST_CASE("streamed generation equals the whole-forward loop for every model, past the block too") {
  for (const char* name : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(name);
    auto model = models::make_model(tiny(name));
    SamplingOptions o;
    o.temperature = 0.9;
    o.top_k = 8;
    o.seed = 5;
    o.never = {0, 1};
    for (const std::vector<std::int32_t>& prompt :
         {std::vector<std::int32_t>{7}, std::vector<std::int32_t>{3, 9, 4, 2, 8}, std::vector<std::int32_t>(20, 6)}) {
      CAPTURE(prompt.size());
      GenerationStats stats;
      const auto streamed = generate(*model, prompt, 30, 1, o, {}, &stats).front();
      CHECK(streamed == reference_generation(*model, prompt, 30, o));
      CHECK(stats.refills > 0);  // 30 new tokens pass the block of 12
      CHECK(stats.context_tokens == std::min<std::int64_t>(12, static_cast<std::int64_t>(prompt.size())));
      CHECK(std::none_of(streamed.begin() + static_cast<std::ptrdiff_t>(prompt.size()), streamed.end(),
                         [](std::int32_t id) { return id == 0 || id == 1; }));
    }
  }
}

TEST_CASE("a batch of samples equals each sample drawn alone with its seed") {
  for (const char* name : {"transformer", "sheaf"}) {
    CAPTURE(name);
    auto model = models::make_model(tiny(name));
    SamplingOptions o;
    o.seed = 40;
    o.top_k = 0;
    std::vector<std::vector<std::int32_t>> seen(3);
    const auto batch = generate(*model, {4, 5}, 16, 3, o, [&](std::int64_t i, std::int32_t id) { seen[i].push_back(id); });
    REQUIRE(batch.size() == 3);
    for (std::int64_t i = 0; i < 3; ++i) {
      SamplingOptions alone = o;
      alone.seed = o.seed + static_cast<std::uint64_t>(i);
      CHECK(batch[i] == generate(*model, {4, 5}, 16, 1, alone).front());
      CHECK(std::vector<std::int32_t>(batch[i].begin() + 2, batch[i].end()) == seen[i]);  // every token reported, in order
    }
    CHECK(batch[0] != batch[1]);
  }
}

TEST_CASE("stream_mismatch is float rounding for every model and every prefill") {
  for (const char* name : {"transformer", "grassmann", "sheaf"}) {
    CAPTURE(name);
    auto model = models::make_model(tiny(name));
    const std::vector<std::int32_t> tokens = {1, 5, 9, 2, 30, 4, 4, 17, 8, 11, 3};
    for (std::int64_t prefill : {1, 4, 11}) CHECK(stream_mismatch(*model, tokens, prefill) < 1e-5);
    CHECK_THROWS_AS(stream_mismatch(*model, std::vector<std::int32_t>(13, 1), 1), std::invalid_argument);
  }
}

TEST_CASE("--positions none: generation reads the whole prompt and never slides") {
  for (const char* name : {"grassmann", "sheaf"}) {
    CAPTURE(name);
    models::LMConfig c = tiny(name);
    c.positions = "none";
    models::LMConfig longer = c;
    longer.block = 64;  // the same parameters (no position table): the plain loop's model
    auto model = models::make_model(c);
    auto reference = models::make_model(longer);
    SamplingOptions o;
    o.seed = 9;
    o.top_k = 5;
    const std::vector<std::int32_t> prompt(20, 6);  // longer than the block of 12
    GenerationStats stats;
    const auto streamed = generate(*model, prompt, 30, 1, o, {}, &stats).front();
    CHECK(stats.context_tokens == 20);
    CHECK(stats.refills == 0);
    CHECK(streamed == reference_generation(*reference, prompt, 30, o));
  }
}

TEST_CASE("evaluate_stream equals the whole forward over each token's context: pieces, one stream, windows that slide") {
  const std::vector<std::int32_t> tokens = [] {
    Generator g(21);
    std::vector<std::int32_t> t(50);
    for (auto& id : t) id = static_cast<std::int32_t>(g.uniform() * 31.0) % 31;
    return t;
  }();
  for (const char* name : {"transformer", "grassmann", "sheaf"}) {
    for (const char* positions : {"learned", "none"}) {
      if (std::string(name) == "transformer" && std::string(positions) == "none") continue;
      CAPTURE(name);
      CAPTURE(positions);
      models::LMConfig c = tiny(name);
      c.positions = positions;
      models::LMConfig longer = c;
      longer.block = 64;
      auto model = models::make_model(c);
      const bool learned = std::string(positions) == "learned";
      auto reference = learned ? nullptr : models::make_model(longer);
      const std::int64_t capacity = learned ? 12 : 1000;
      for (std::int64_t context : {0, 20, 7}) {
        for (std::int64_t chunk : {1, 5, 12}) {
          CAPTURE(context);
          CAPTURE(chunk);
          const StreamEvalResult r = evaluate_stream(*model, tokens, context, chunk);
          const auto [nll, count] = reference_stream_nll(learned ? *model : *reference, tokens, context, capacity);
          CHECK(r.tokens == count);
          CHECK(r.nll == doctest::Approx(nll).epsilon(1e-5));
          CHECK(r.ppl == doctest::Approx(std::exp(nll)).epsilon(1e-5));
          CHECK((r.slides > 0) == (learned && context != 7));  // pieces of 7 fit in a block of 12
          CHECK(r.state_bytes > 0);
        }
      }
    }
  }
  auto model = models::make_model(tiny("grassmann"));
  CHECK_THROWS_AS(evaluate_stream(*model, tokens, 1, 4), std::invalid_argument);
  CHECK_THROWS_AS(evaluate_stream(*model, {3}, 0, 4), std::runtime_error);
}
