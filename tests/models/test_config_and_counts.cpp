// LMConfig checks, its JSON form, and the parameter counts PAPERS.md pins down.
#include <doctest/doctest.h>

#include <cmath>

#include <stdexcept>
#include <string>

#include "models/lm.h"
#include "models/param_count.h"

using namespace wedge;
using models::LMConfig;

namespace {

std::string validate_message(const LMConfig& c) {
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

LMConfig paper(const std::string& model, int layers) {
  LMConfig c;
  c.model = model;
  c.layers = layers;
  c.block = layers == 6 ? 128 : 256;
  if (layers == 12 && model == "grassmann")
    c.window_schedule = {1, 1, 2, 2, 4, 4, 8, 8, 12, 12, 16, 16};
  return c;
}

// The count written out from the architecture, independently of the model classes:
// embeddings + per block (mixer + 2 LayerNorms + FFN); tied head, no final LayerNorm.
std::int64_t expected_count(const LMConfig& c) {
  const std::int64_t d = c.d_model, linear_dd = d * d + d;
  const std::int64_t ffn = (d * c.d_ff + c.d_ff) + (c.d_ff * d + d);
  std::int64_t mixer;
  if (c.model == "transformer") {
    mixer = (d * 3 * d + 3 * d) + linear_dd;
  } else {
    const std::int64_t P = c.rank * (c.rank - 1) / 2;
    mixer = (d * c.rank + c.rank) + (P * d + d) + (2 * d * d + d) + (c.mix_out_proj ? linear_dd : 0);
  }
  return c.vocab_size * d + (c.positions == "learned" ? c.block * d : 0) + c.layers * (mixer + 4 * d + ffn);
}

}  // namespace

TEST_CASE("LMConfig::validate names the flag to change") {
  LMConfig c;
  CHECK(validate_message(c) == "");
  c.heads = 3;
  CHECK(validate_message(c) == "--heads 3 does not divide --d-model 256");

  c = LMConfig{};
  c.model = "grassmann";
  c.window_schedule = {1, 2, 4};
  CHECK(validate_message(c).find("--window-schedule has 3 offsets but --layers is 6") == 0);
  c.window_schedule = {1, 2, 4, 8, 0, 16};
  CHECK(validate_message(c).find("--window-schedule") == 0);
  c.window_schedule.clear();
  c.windows = {1, -2};
  CHECK(validate_message(c).find("--windows 1,-2 contains -2") == 0);
  c.windows = {};
  CHECK(validate_message(c).find("--windows is empty") == 0);
  c.windows = {1};
  c.rank = 1;
  CHECK(validate_message(c).find("--rank 1") == 0);

  c = LMConfig{};
  c.dropout = 1.0;
  CHECK(validate_message(c).find("--dropout") == 0);
  c = LMConfig{};
  c.vocab_size = 1;
  CHECK(validate_message(c).find("--vocab-size") == 0);
  c = LMConfig{};
  c.model = "rnn";
  CHECK(validate_message(c).find("--model 'rnn'") == 0);
  c = LMConfig{};
  c.leaky = true;  // only Grassmann has a leaky variant
  CHECK(validate_message(c).find("--leaky") == 0);
  // The heads only matter to the Transformer.
  c = LMConfig{};
  c.model = "grassmann";
  c.heads = 3;
  CHECK(validate_message(c) == "");
  CHECK_THROWS_AS(models::make_model([] { LMConfig b; b.heads = 5; return b; }()),
                  std::invalid_argument);
}

TEST_CASE("offsets_for_layer: the window set, or one scheduled offset per layer") {
  LMConfig c;
  c.model = "grassmann";
  CHECK(c.offsets_for_layer(0) == std::vector<std::int32_t>{1, 2, 4, 8, 12, 16});
  CHECK(c.offsets_for_layer(5) == std::vector<std::int32_t>{1, 2, 4, 8, 12, 16});
  CHECK_THROWS_AS(c.offsets_for_layer(6), std::invalid_argument);
  c = paper("grassmann", 12);
  CHECK(c.offsets_for_layer(0) == std::vector<std::int32_t>{1});
  CHECK(c.offsets_for_layer(5) == std::vector<std::int32_t>{4});
  CHECK(c.offsets_for_layer(11) == std::vector<std::int32_t>{16});
}

TEST_CASE("LMConfig JSON round trip, and missing keys keep their defaults") {
  LMConfig c = paper("grassmann", 12);
  c.vocab_size = 1234;
  c.dropout = 0.25;
  c.rank = 8;
  c.windows = {3, 5};
  c.mix_out_proj = false;
  c.seed = 0xfeedfacecafeULL;
  const nlohmann::json j = c;
  const LMConfig back = nlohmann::json::parse(j.dump()).get<LMConfig>();
  CHECK(nlohmann::json(back) == j);
  CHECK(back.window_schedule == c.window_schedule);
  CHECK(back.seed == c.seed);
  CHECK(back.mix_out_proj == false);

  const LMConfig partial = nlohmann::json{{"model", "grassmann"}, {"layers", 2}}.get<LMConfig>();
  CHECK(partial.layers == 2);
  CHECK(partial.d_model == 256);
  CHECK(partial.windows == std::vector<std::int32_t>{1, 2, 4, 8, 12, 16});
  CHECK(partial.positions == "learned");  // a config written before --positions existed

  LMConfig none = paper("grassmann", 12);
  none.positions = "none";
  CHECK(nlohmann::json(none).get<LMConfig>().positions == "none");
}

TEST_CASE("parameter counts of the four paper configurations (PAPERS.md)") {
  struct Case {
    LMConfig config;
    std::int64_t total;
  };
  LMConfig g6_888 = paper("grassmann", 6);
  g6_888.windows = {1, 2, 4, 8, 8, 8};
  LMConfig g6_no_out = paper("grassmann", 6);
  g6_no_out.mix_out_proj = false;
  const Case cases[] = {
      {paper("transformer", 6), 12'584'960},
      {paper("grassmann", 6), 13'001'408},
      {paper("transformer", 12), 17'356'288},
      {paper("grassmann", 12), 18'189'184},
      {g6_888, 13'001'408},     // the second 6-layer row of the paper's table
      {g6_no_out, 12'606'656},  // "the Grassmann block as described", 394 k short
  };
  for (const Case& k : cases) {
    CAPTURE(nlohmann::json(k.config).dump());
    const auto model = models::make_model(k.config);
    CHECK(model->num_parameters() == k.total);
    CHECK(expected_count(k.config) == k.total);
    std::int64_t sum = 0;
    for (const auto& [part, n] : model->parameter_breakdown()) sum += n;
    CHECK(sum == k.total);
  }
}

TEST_CASE("parameter breakdown names the paper's parts") {
  const auto t = models::make_model(paper("transformer", 6));
  const std::vector<std::pair<std::string, std::int64_t>> expected_t = {
      {"token_embedding", 30522 * 256},
      {"position_embedding", 128 * 256},
      {"attention.qkv", 6 * (256 * 768 + 768)},
      {"attention.out", 6 * (256 * 256 + 256)},
      {"norm1", 6 * 512},
      {"ffn.w1", 6 * (256 * 1024 + 1024)},
      {"ffn.w2", 6 * (1024 * 256 + 256)},
      {"norm2", 6 * 512},
  };
  CHECK(t->parameter_breakdown() == expected_t);

  const auto g = models::make_model(paper("grassmann", 12));
  const std::vector<std::pair<std::string, std::int64_t>> expected_g = {
      {"token_embedding", 30522 * 256},
      {"position_embedding", 256 * 256},
      {"mixing.reduce", 12 * (256 * 32 + 32)},
      {"mixing.plucker", 12 * (496 * 256 + 256)},
      {"mixing.out", 12 * (256 * 256 + 256)},
      {"gate", 12 * (512 * 256 + 256)},
      {"norm1", 12 * 512},
      {"ffn.w1", 12 * (256 * 1024 + 1024)},
      {"ffn.w2", 12 * (1024 * 256 + 256)},
      {"norm2", 12 * 512},
  };
  CHECK(g->parameter_breakdown() == expected_g);
}

TEST_CASE("parameter counts of small configurations follow the same formula") {
  for (const char* kind : {"transformer", "grassmann"})
    for (int layers : {1, 3})
      for (bool out_proj : {true, false}) {
        LMConfig c;
        c.model = kind;
        c.vocab_size = 37;
        c.layers = layers;
        c.d_model = 12;
        c.d_ff = 20;
        c.heads = 3;
        c.block = 9;
        c.rank = 5;
        c.mix_out_proj = out_proj;
        CAPTURE(nlohmann::json(c).dump());
        CHECK(models::make_model(c)->num_parameters() == expected_count(c));
        if (c.model == "grassmann") {
          c.positions = "none";
          CHECK(models::make_model(c)->num_parameters() == expected_count(c));
          CHECK(models::detail::count_parameters(c).total == expected_count(c));
        }
      }
}

// SheafStateLM's count written out part by part (models/sheaf.h), E = 2d.
std::int64_t sheaf_count(const LMConfig& c) {
  const std::int64_t d = c.d_model, E = 2 * d, R = (d + 15) / 16, N = c.state_size, ds = c.section_dim,
                     K = c.types, f = c.expert_d_ff;
  const std::int64_t mixer = d * 2 * E                    // W_in
                             + E * R + R * E              // step-size projections
                             + 2 * E * N                  // W_B, W_C
                             + E * N + 2 * E              // A_log, D, dt_bias
                             + E * ds + ds                // summary
                             + ds * K + K                 // soft type
                             + c.cover_depth * K * ds * ds  // restriction bank
                             + ds * ds                    // query
                             + ds * E + ds * N            // state maps
                             + E * d;                     // W_out
  const std::int64_t block = mixer + 4 * d + ds * K + K + K * (d * f + f + f * d + d);
  const std::int64_t positions = c.positions == "learned" ? c.block * d : 0;
  return c.vocab_size * d + positions + c.layers * block + 2 * d;  // + the final LayerNorm
}

TEST_CASE("SheafStateLM's parameter count: part by part, and within 10 % of TransformerLM's") {
  LMConfig c;
  c.model = "sheaf";
  CHECK(models::make_model(c)->num_parameters() == sheaf_count(c));
  CHECK(sheaf_count(c) == 13'260'976);
  CHECK(std::abs(double(sheaf_count(c)) / 12'584'960.0 - 1.0) < 0.10);
  c.vocab_size = 41;
  c.layers = 2;
  c.d_model = 20;
  c.block = 11;
  c.state_size = 3;
  c.section_dim = 5;
  c.types = 3;
  c.cover_depth = 2;
  c.expert_d_ff = 7;
  CHECK(models::make_model(c)->num_parameters() == sheaf_count(c));
  c.positions = "none";  // no position table
  CHECK(models::make_model(c)->num_parameters() == sheaf_count(c));
  CHECK(sheaf_count(c) == models::detail::count_parameters(c).total);
}
