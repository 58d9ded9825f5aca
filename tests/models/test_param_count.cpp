// The parameter count worked out from the configuration (models/param_count.h) against the
// built model's named parameters, over many configurations — awkward ones included — so the
// formula and the model classes cannot drift apart; the overflow and bound checks; and the
// memory check that runs before a model is allocated (models/memory_check.h).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/lm.h"
#include "models/memory_check.h"
#include "models/nli.h"
#include "models/param_count.h"
#include "scratch.h"

using namespace wedge;
using models::LMConfig;
using models::NliConfig;

namespace {

// One row per part, so a mismatch shows as readable text.
std::string rows(const std::vector<std::pair<std::string, std::int64_t>>& parts) {
  std::string s;
  for (const auto& [part, n] : parts) s += fmt::format("{} {}\n", part, n);
  return s;
}

template <typename Config, typename Model>
void check_against_model(const Config& c, const Model& model) {
  CAPTURE(nlohmann::json(c).dump());
  const models::ParameterCount count = models::parameter_count(c);
  CHECK(count.total == model.num_parameters());
  CHECK(rows(count.parts) == rows(model.parameter_breakdown()));
  std::int64_t sum = 0;
  for (const auto& [part, n] : count.parts) sum += n;
  CHECK(sum == count.total);
}

void check_lm(const LMConfig& c) { check_against_model(c, *models::make_model(c)); }
void check_nli(const NliConfig& c) { check_against_model(c, *models::make_nli_model(c)); }

LMConfig small(const std::string& model) {
  LMConfig c;
  c.model = model;
  c.vocab_size = 11;
  c.layers = 2;
  c.d_model = 6;
  c.d_ff = 5;
  c.heads = 3;
  c.block = 7;
  c.rank = 3;
  c.patch = 2;
  c.cover_depth = 2;
  c.types = 2;
  c.state_size = 3;
  c.section_dim = 4;
  c.expert_d_ff = 3;
  return c;
}

NliConfig small_nli(const std::string& head) {
  NliConfig c;
  c.head = head;
  c.vocab_size = 9;
  c.layers = 2;
  c.d_model = 6;
  c.heads = 2;
  c.d_ff = 5;
  c.max_length = 4;
  c.d_proj = 6;
  c.mixing_heads = 2;
  c.window = 3;
  c.stride = 3;
  c.patch = 2;
  c.cover_depth = 2;
  c.types = 2;
  c.state_size = 3;
  c.section_dim = 4;
  return c;
}

std::string validate_message(const LMConfig& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string validate_message(const NliConfig& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("parameter_count: TransformerLM, any depth and width") {
  check_lm(LMConfig{});  // the paper's 6 layers
  for (std::int64_t layers : {1, 2, 5})
    for (auto [d, heads] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {6, 3}, {7, 7}, {12, 4}}) {
      LMConfig c = small("transformer");
      c.layers = layers;
      c.d_model = d;
      c.heads = heads;
      c.d_ff = 2 * d + 1;
      check_lm(c);
    }
  LMConfig c = small("transformer");
  c.vocab_size = 2;  // the smallest vocabulary, the shortest context, the narrowest feed-forward
  c.block = 1;
  c.d_ff = 1;
  check_lm(c);
}

TEST_CASE("parameter_count: GrassmannLM with every option") {
  check_lm([] { LMConfig c; c.model = "grassmann"; return c; }());
  for (std::int64_t layers : {1, 3})
    for (std::int64_t rank : {2, 3, 6})  // the smallest rank, an odd one, rank = d
      for (bool out_proj : {true, false})
        for (bool schedule : {false, true}) {
          LMConfig c = small("grassmann");
          c.layers = layers;
          c.rank = rank;
          c.mix_out_proj = out_proj;
          if (schedule) {
            c.window_schedule.clear();
            for (std::int64_t i = 0; i < layers; ++i) c.window_schedule.push_back(static_cast<std::int32_t>(2 * i + 1));
          }
          check_lm(c);
        }
  LMConfig c = small("grassmann");
  c.windows = {1};
  check_lm(c);
  c.windows = {3, 100};  // an offset far beyond the block holds no parameters either
  c.d_model = 5;
  c.rank = 5;
  c.leaky = true;
  check_lm(c);
}

TEST_CASE("parameter_count: SheafStateLM, every size down to 1 and every cover depth") {
  check_lm([] { LMConfig c; c.model = "sheaf"; return c; }());
  for (std::int64_t depth = 1; depth <= 6; ++depth) {
    LMConfig c = small("sheaf");
    c.cover_depth = depth;
    check_lm(c);
  }
  // P = 1, K = 1 (one expert), N_s = 1, d_s = 1, an expert of width 1, one layer.
  LMConfig c = small("sheaf");
  c.patch = 1;
  c.types = 1;
  c.state_size = 1;
  c.section_dim = 1;
  c.expert_d_ff = 1;
  c.layers = 1;
  check_lm(c);
  // The step-size rank ceil(d / 16) on both sides of a multiple of 16, many experts, leaky.
  for (std::int64_t d : {1, 15, 16, 17}) {
    c = small("sheaf");
    c.d_model = d;
    c.types = 5;
    c.leaky = d == 17;
    check_lm(c);
  }
}

TEST_CASE("parameter_count: the sentence-pair classifier, every head, hypothesis-only") {
  for (const char* head : {"transformer", "grassmann", "sheaf"})
    for (bool hypothesis_only : {false, true})
      for (std::int64_t layers : {1, 2}) {
        NliConfig c = small_nli(head);
        c.hypothesis_only = hypothesis_only;
        c.layers = layers;
        check_nli(c);
      }
  NliConfig c;  // the paper's head sizes
  for (const char* head : {"transformer", "grassmann", "sheaf"}) {
    c.head = head;
    c.vocab_size = 300;
    check_nli(c);
  }
  c = small_nli("grassmann");
  c.d_proj = 12;
  c.mixing_heads = 3;  // heads of rank 4: 3 x 6 Plücker coordinates
  c.max_length = 3;
  check_nli(c);
  c.mixing_heads = 6;  // rank 2: one coordinate per head
  check_nli(c);
  for (std::int64_t depth : {1, 3, 5}) {
    c = small_nli("sheaf");
    c.cover_depth = depth;
    c.patch = 1;
    c.types = 1;
    c.state_size = 1;
    c.section_dim = 2;
    c.d_model = 17;
    check_nli(c);
  }
}

TEST_CASE("parameter_count of a model far too large to build: at once, and the same formula") {
  LMConfig c;
  c.d_model = 65536;
  c.layers = 64;
  const std::int64_t d = c.d_model, f = c.d_ff;
  const std::int64_t block = (d * 3 * d + 3 * d) + (d * d + d) + 4 * d + (d * f + f + f * d + d);
  const models::ParameterCount count = models::parameter_count(c);
  CHECK(count.total == c.vocab_size * d + c.block * d + c.layers * block);
  CHECK(count.total == 1'110'148'055'040);
  REQUIRE(count.parts.size() == 8);
  CHECK(count.parts[2] == std::pair<std::string, std::int64_t>{"attention.qkv", 64 * (3 * d * d + 3 * d)});
}

TEST_CASE("checked_product and checked_sum: exact below the limit, a named error above it") {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK(models::checked_product({{"--a", 3}, {"--b", 5}, {"--c", 7}}) == 105);
  CHECK(models::checked_product({{"--a", max}, {"--b", 1}}) == max);
  CHECK(models::checked_product({{"--a", 0}, {"--b", max}}) == 0);
  CHECK(models::checked_product({{"--a", std::int64_t{1} << 31}, {"--b", std::int64_t{1} << 31}}) ==
        (std::int64_t{1} << 62));
  CHECK_THROWS_WITH_AS(models::checked_product({{"--a", std::int64_t{1} << 32}, {"--b", std::int64_t{1} << 31}}),
                       "the parameter count does not fit in 64 bits: --a 4294967296 x --b 2147483648 overflows "
                       "(reduce these sizes)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(models::checked_product({{"--d-model", 3'037'000'500}, {"--d-model", 3'037'000'500}}),
                       doctest::Contains("--d-model 3037000500 x --d-model 3037000500"), std::invalid_argument);
  CHECK(models::checked_sum(max - 1, 1, "x") == max);
  CHECK_THROWS_WITH_AS(models::checked_sum(max, 1, "the total"), doctest::Contains("overflows at the total"),
                       std::invalid_argument);
}

TEST_CASE("a configuration whose parameter count overflows is refused with the sizes named") {
  // Every size within its bound; the restriction banks of 4096 layers overflow.
  LMConfig c;
  c.model = "sheaf";
  c.layers = 4096;
  c.types = 4096;
  c.section_dim = 1 << 20;
  c.cover_depth = 6;
  // The mixer's own tensors per layer: A_log (E x N_s), D and dt_bias (E each), R (D x K x d_s x d_s).
  const std::int64_t E = 2 * 256, mixer = E * 16 + 2 * E + 6 * 4096 * (std::int64_t{1} << 40);
  CHECK(validate_message(c) == fmt::format("the parameter count does not fit in 64 bits: mixer per layer {} x "
                                           "--layers 4096 overflows (reduce these sizes)",
                                           mixer));
  CHECK_THROWS_WITH_AS(models::parameter_count(c), doctest::Contains("does not fit in 64 bits"), std::invalid_argument);
  // make_model refuses it before allocating anything (not std::bad_alloc).
  CHECK_THROWS_AS(models::make_model(c), std::invalid_argument);

  // Grassmann: C(r, 2) x d per layer is 2^59; 4096 layers of it overflow.
  c = LMConfig{};
  c.model = "grassmann";
  c.d_model = 1 << 20;
  c.rank = 1 << 20;
  c.layers = 4096;
  const std::int64_t r = c.rank, plucker = r * (r - 1) / 2 * c.d_model + c.d_model;
  CHECK(validate_message(c) == fmt::format("the parameter count does not fit in 64 bits: mixing.plucker per layer {} x "
                                           "--layers 4096 overflows (reduce these sizes)",
                                           plucker));
  c.layers = 8;  // 8 layers fit: the same widths are fine
  CHECK(validate_message(c) == "");

  NliConfig n;
  n.head = "sheaf";
  n.layers = 4096;
  n.types = 4096;
  n.section_dim = 1 << 20;
  n.cover_depth = 16;
  // Two-sided: 2 D restriction maps per type.
  CHECK(validate_message(n) == fmt::format("the parameter count does not fit in 64 bits: mixing per layer {} x "
                                           "--layers 4096 overflows (reduce these sizes)",
                                           E * 16 + 2 * E + 2 * 16 * 4096 * (std::int64_t{1} << 40)));
  CHECK_THROWS_AS(models::make_nli_model(n), std::invalid_argument);
}

TEST_CASE("LMConfig::validate: --rank at most --d-model, every size bounded, every weight finite") {
  LMConfig c = small("grassmann");
  c.rank = 7;
  CHECK(validate_message(c) == "--rank 7 must be at most --d-model 6 (W_red reduces d to r)");
  c.rank = 6;
  CHECK(validate_message(c) == "");

  c = LMConfig{};
  c.d_model = (1 << 20) + 1;
  CHECK(validate_message(c) == "--d-model 1048577 must be at most 1048576");
  c = LMConfig{};
  c.layers = 4097;
  CHECK(validate_message(c) == "--layers 4097 must be at most 4096");
  c.layers = 4096;
  c.d_model = 8;
  c.heads = 2;
  CHECK(validate_message(c) == "");
  c = LMConfig{};
  c.d_ff = std::int64_t{1} << 40;
  CHECK(validate_message(c) == "--d-ff 1099511627776 must be at most 1048576");
  c = LMConfig{};
  c.block = 2'000'000;
  CHECK(validate_message(c) == "--block 2000000 must be at most 1048576");
  c = LMConfig{};
  c.vocab_size = std::int64_t{1} << 31;
  CHECK(validate_message(c) == "--vocab-size 2147483648 must be at most 2147483647 (token ids are int32)");

  c = small("sheaf");
  c.types = 4097;
  CHECK(validate_message(c) == "--types 4097 must be at most 4096");
  c = small("sheaf");
  c.patch = std::int64_t{1} << 21;
  CHECK(validate_message(c) == "--patch 2097152 must be at most 1048576");
  c = small("sheaf");
  c.state_size = std::int64_t{1} << 21;
  CHECK(validate_message(c) == "--state-size 2097152 must be at most 1048576");
  c = small("sheaf");
  c.section_dim = std::int64_t{1} << 21;
  CHECK(validate_message(c) == "--section-dim 2097152 must be at most 1048576");
  c = small("sheaf");
  c.expert_d_ff = std::int64_t{1} << 21;
  CHECK(validate_message(c) == "--expert-d-ff 2097152 must be at most 1048576");

  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  c = LMConfig{};
  c.dropout = nan;
  CHECK(validate_message(c) == "--dropout nan must lie in [0, 1)");
  c.dropout = -inf;
  CHECK(validate_message(c) == "--dropout -inf must lie in [0, 1)");
  // The gluing weights are stored in config.json for every model, so every model checks them.
  c = LMConfig{};
  c.energy_weight = inf;
  CHECK(validate_message(c) == "--energy-weight inf must be a finite number >= 0");
  c = small("grassmann");
  c.balance_weight = nan;
  CHECK(validate_message(c) == "--balance-weight nan must be a finite number >= 0");
}

TEST_CASE("NliConfig::validate: every size bounded, dropout finite") {
  NliConfig c;
  c.d_model = (1 << 20) + 4;
  CHECK(validate_message(c) == "--d-model must be at most 1048576, got 1048580");
  c = NliConfig{};
  c.layers = 5000;
  CHECK(validate_message(c) == "--layers must be at most 4096, got 5000");
  c = NliConfig{};
  c.vocab_size = std::int64_t{1} << 40;
  CHECK(validate_message(c) == "the vocabulary has 1099511627776 tokens; at most 2147483647 (token ids are int32)");
  c = NliConfig{};
  c.max_length = std::int64_t{1} << 62;  // 2 max_length - 1 positions would overflow
  CHECK(validate_message(c) == "--max-length must be at most 1048576, got 4611686018427387904");
  c = NliConfig{};
  c.dropout = std::nan("");
  CHECK(validate_message(c) == "--dropout must lie in [0, 1), got nan");
  c = small_nli("grassmann");
  c.window = c.stride = 3'000'000;
  CHECK(validate_message(c) == "--window must be at most 1048576, got 3000000");
  c = small_nli("grassmann");
  c.d_proj = std::int64_t{1} << 21;
  CHECK(validate_message(c) == "--d-proj must be at most 1048576, got 2097152");
  c = small_nli("sheaf");
  c.types = 4097;
  CHECK(validate_message(c) == "--types must be at most 4096, got 4097");
  c = small_nli("sheaf");
  c.section_dim = std::int64_t{1} << 30;
  CHECK(validate_message(c) == "--section-dim must be at most 1048576, got 1073741824");
}

TEST_CASE("check_model_memory: 16 bytes a parameter to train, 4 to evaluate, against what is available") {
  CHECK(models::bytes_per_parameter(models::ModelUse::training) == 16);
  CHECK(models::bytes_per_parameter(models::ModelUse::evaluation) == 4);
  const std::int64_t gib = std::int64_t{1} << 30;
  // 10^9 parameters: 14.9 GiB to train, 3.7 GiB to evaluate; 8 GiB available.
  CHECK_THROWS_WITH_AS(models::check_model_memory(1'000'000'000, models::ModelUse::training, 8 * gib),
                       "the model has 1,000,000,000 parameters and needs ~14.9 GiB for weights, gradients and AdamW "
                       "state; this machine has 8.0 GiB available — reduce --d-model/--layers (or the vocabulary)",
                       std::runtime_error);
  CHECK_NOTHROW(models::check_model_memory(1'000'000'000, models::ModelUse::evaluation, 8 * gib));
  CHECK_THROWS_WITH_AS(models::check_model_memory(3'000'000'000, models::ModelUse::evaluation, 8 * gib),
                       doctest::Contains("needs ~11.2 GiB for its weights; this machine has 8.0 GiB available"),
                       std::runtime_error);
  // Exactly at the limit fits; one parameter more does not.
  CHECK_NOTHROW(models::check_model_memory(gib / 2, models::ModelUse::training, 8 * gib));
  CHECK_THROWS_AS(models::check_model_memory(gib / 2 + 1, models::ModelUse::training, 8 * gib), std::runtime_error);
  // A count whose bytes would overflow int64 is too large, not wrapped around to small.
  CHECK_THROWS_AS(models::check_model_memory(std::numeric_limits<std::int64_t>::max() / 4,
                                             models::ModelUse::training, std::numeric_limits<std::int64_t>::max()),
                  std::runtime_error);
  // Unknown available memory: nothing to compare with, no error.
  CHECK_NOTHROW(models::check_model_memory(std::numeric_limits<std::int64_t>::max(), models::ModelUse::training,
                                           std::nullopt));
}

TEST_CASE("available_memory_bytes reads MemAvailable, and nothing from a file without it") {
  wedge::testing::ScratchDir dir("meminfo");
  wedge::testing::write_file(dir.path / "meminfo",
                             "MemTotal:       24683548 kB\nMemFree:        19681188 kB\n"
                             "MemAvailable:   21970652 kB\nBuffers:           21292 kB\n");
  CHECK(models::available_memory_bytes(dir.str("meminfo")) == std::int64_t{21970652} * 1024);
  wedge::testing::write_file(dir.path / "old", "MemTotal:       24683548 kB\nMemFree:        19681188 kB\n");
  CHECK(models::available_memory_bytes(dir.str("old")) == std::nullopt);
  wedge::testing::write_file(dir.path / "garbled", "MemAvailable:   lots\n");
  CHECK(models::available_memory_bytes(dir.str("garbled")) == std::nullopt);
  CHECK(models::available_memory_bytes(dir.str("missing")) == std::nullopt);
  const auto here = models::available_memory_bytes();
  if (here) CHECK(*here > 0);
}

TEST_CASE("check_model_memory(config): the paper's model fits, a 1.8 * 10^16-parameter one never does") {
  if (!models::available_memory_bytes()) {
    MESSAGE("skipped: /proc/meminfo has no MemAvailable here");
    return;
  }
  CHECK_NOTHROW(models::check_model_memory(LMConfig{}, models::ModelUse::training));
  CHECK_NOTHROW(models::check_model_memory(NliConfig{}, models::ModelUse::training));
  LMConfig c;
  c.d_model = 1 << 20;
  c.layers = 4096;
  CHECK_THROWS_WITH_AS(models::check_model_memory(c, models::ModelUse::evaluation),
                       doctest::Contains("parameters and needs ~"), std::runtime_error);
  NliConfig n;
  n.d_model = 1 << 20;
  n.layers = 4096;
  CHECK_THROWS_WITH_AS(models::check_model_memory(n, models::ModelUse::training),
                       doctest::Contains("for weights, gradients and AdamW state"), std::runtime_error);
  c.heads = 3;  // an invalid configuration is named as such first
  CHECK_THROWS_AS(models::check_model_memory(c, models::ModelUse::training), std::invalid_argument);
}
