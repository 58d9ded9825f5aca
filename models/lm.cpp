// LMConfig: the offsets each Grassmann layer uses, the consistency checks (whose messages
// name the command-line flag a user would change), the JSON form stored beside every
// checkpoint, and make_model(), the one place that knows every model class.
#include "models/lm.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/json_field.h"
#include "ops/ops.h"

#include "models/grassmann.h"
#include "models/param_count.h"
#include "models/sheaf.h"
#include "models/transformer.h"

namespace wedge::models {

std::vector<std::int32_t> LMConfig::offsets_for_layer(std::int64_t i) const {
  if (i < 0 || i >= layers)
    throw std::invalid_argument(fmt::format("layer {} is out of range for --layers {}", i, layers));
  if (!window_schedule.empty()) {
    if (static_cast<std::int64_t>(window_schedule.size()) != layers)
      throw std::invalid_argument(fmt::format(
          "--window-schedule has {} offsets but --layers is {} (one offset per layer)",
          window_schedule.size(), layers));
    return {window_schedule[static_cast<std::size_t>(i)]};
  }
  return windows;
}

void LMConfig::validate() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  auto at_most = [&](const char* flag, std::int64_t value, std::int64_t limit) {
    if (value > limit) bad(fmt::format("{} {} must be at most {}", flag, value, limit));
  };
  if (model != "transformer" && model != "grassmann" && model != "sheaf")
    bad(fmt::format("--model '{}' is unknown (transformer | grassmann | sheaf)", model));
  if (vocab_size < 2)
    bad(fmt::format("--vocab-size {} is too small (a language model needs at least 2 tokens)",
                    vocab_size));
  if (vocab_size > kMaxVocabulary)
    bad(fmt::format("--vocab-size {} must be at most {} (token ids are int32)", vocab_size, kMaxVocabulary));
  if (layers < 1) bad(fmt::format("--layers {} must be at least 1", layers));
  at_most("--layers", layers, kMaxLayers);
  if (d_model < 1) bad(fmt::format("--d-model {} must be at least 1", d_model));
  at_most("--d-model", d_model, kMaxWidth);
  if (d_ff < 1) bad(fmt::format("--d-ff {} must be at least 1", d_ff));
  at_most("--d-ff", d_ff, kMaxWidth);
  if (block < 1) bad(fmt::format("--block {} must be at least 1", block));
  at_most("--block", block, kMaxLength);
  if (positions != "learned" && positions != "none")
    bad(fmt::format("--positions '{}' is unknown (learned | none)", positions));
  if (positions == "none" && model == "transformer")
    bad("--positions none exists only for --model grassmann and sheaf, whose stream state is constant "
        "(TransformerLM keeps the learned table; its stream slides a window past --block)");
  if (!(dropout >= 0.0 && dropout < 1.0))
    bad(fmt::format("--dropout {} must lie in [0, 1)", dropout));
  // Stored in every run's config.json whatever the model, so finite for every model (JSON
  // has no NaN or infinity).
  if (!(energy_weight >= 0.0) || !std::isfinite(energy_weight))
    bad(fmt::format("--energy-weight {} must be a finite number >= 0", energy_weight));
  if (!(balance_weight >= 0.0) || !std::isfinite(balance_weight))
    bad(fmt::format("--balance-weight {} must be a finite number >= 0", balance_weight));
  if (model == "transformer") {
    if (heads < 1) bad(fmt::format("--heads {} must be at least 1", heads));
    if (d_model % heads != 0)
      bad(fmt::format("--heads {} does not divide --d-model {}", heads, d_model));
  }
  if (model == "grassmann") {
    if (rank < 2)
      bad(fmt::format("--rank {} must be at least 2 (a Plücker vector needs a pair of axes)",
                      rank));
    if (rank > d_model)
      bad(fmt::format("--rank {} must be at most --d-model {} (W_red reduces d to r)", rank, d_model));
    if (window_schedule.empty()) {
      if (windows.empty()) bad("--windows is empty (give at least one offset, e.g. 1,2,4,8,12,16)");
      for (std::int32_t w : windows)
        if (w < 1)
          bad(fmt::format("--windows {} contains {}: offsets must be >= 1 (pairing with the "
                          "token itself or a future token is not causal)",
                          fmt::join(windows, ","), w));
    } else {
      if (static_cast<std::int64_t>(window_schedule.size()) != layers)
        bad(fmt::format("--window-schedule has {} offsets but --layers is {} (one offset per layer)",
                        window_schedule.size(), layers));
      for (std::int32_t w : window_schedule)
        if (w < 1)
          bad(fmt::format("--window-schedule {} contains {}: offsets must be >= 1",
                          fmt::join(window_schedule, ","), w));
    }
  }
  if (model == "sheaf") {
    if (patch < 1) bad(fmt::format("--patch {} must be at least 1", patch));
    at_most("--patch", patch, kMaxLength);
    if (cover_depth < 1 || cover_depth > 6)
      bad(fmt::format("--cover-depth {} must lie in [1, 6] (the cover p-1, p-2, ..., p-2^(D-1))", cover_depth));
    if (types < 1) bad(fmt::format("--types {} must be at least 1", types));
    at_most("--types", types, kMaxTypes);
    if (state_size < 1) bad(fmt::format("--state-size {} must be at least 1", state_size));
    at_most("--state-size", state_size, kMaxWidth);
    if (section_dim < 1) bad(fmt::format("--section-dim {} must be at least 1", section_dim));
    at_most("--section-dim", section_dim, kMaxWidth);
    if (expert_d_ff < 1) bad(fmt::format("--expert-d-ff {} must be at least 1", expert_d_ff));
    at_most("--expert-d-ff", expert_d_ff, kMaxWidth);
  }
  if (leaky && model == "transformer")
    bad("--leaky exists only for --model grassmann and sheaf (a test of the causality audit)");
  // Offsets larger than --block are allowed on purpose: such a pair never exists, the
  // offset is skipped everywhere, exactly as at the start of any sequence.

  // Every size is within its bounds; their products may still overflow (throws, naming them).
  detail::count_parameters(*this);
}

void to_json(nlohmann::json& j, const LMConfig& c) {
  j = nlohmann::json{{"model", c.model},
                     {"vocab_size", c.vocab_size},
                     {"layers", c.layers},
                     {"d_model", c.d_model},
                     {"d_ff", c.d_ff},
                     {"heads", c.heads},
                     {"block", c.block},
                     {"positions", c.positions},
                     {"dropout", c.dropout},
                     {"rank", c.rank},
                     {"windows", c.windows},
                     {"window_schedule", c.window_schedule},
                     {"mix_out_proj", c.mix_out_proj},
                     {"patch", c.patch},
                     {"cover_depth", c.cover_depth},
                     {"types", c.types},
                     {"state_size", c.state_size},
                     {"section_dim", c.section_dim},
                     {"expert_d_ff", c.expert_d_ff},
                     {"energy_weight", c.energy_weight},
                     {"balance_weight", c.balance_weight},
                     {"leaky", c.leaky},
                     {"seed", c.seed}};
}

// Missing keys keep their defaults, so a config written by an older wedge still loads;
// a key of the wrong type is an error (nlohmann throws with the key's value).
void from_json(const nlohmann::json& j, LMConfig& c) {
  const LMConfig d;
  c.model = json_field(j, "model", d.model);
  c.vocab_size = json_field(j, "vocab_size", d.vocab_size);
  c.layers = json_field(j, "layers", d.layers);
  c.d_model = json_field(j, "d_model", d.d_model);
  c.d_ff = json_field(j, "d_ff", d.d_ff);
  c.heads = json_field(j, "heads", d.heads);
  c.block = json_field(j, "block", d.block);
  c.positions = json_field(j, "positions", d.positions);
  c.dropout = json_field(j, "dropout", d.dropout);
  c.rank = json_field(j, "rank", d.rank);
  c.windows = json_field(j, "windows", d.windows);
  c.window_schedule = json_field(j, "window_schedule", d.window_schedule);
  c.mix_out_proj = json_field(j, "mix_out_proj", d.mix_out_proj);
  c.patch = json_field(j, "patch", d.patch);
  c.cover_depth = json_field(j, "cover_depth", d.cover_depth);
  c.types = json_field(j, "types", d.types);
  c.state_size = json_field(j, "state_size", d.state_size);
  c.section_dim = json_field(j, "section_dim", d.section_dim);
  c.expert_d_ff = json_field(j, "expert_d_ff", d.expert_d_ff);
  c.energy_weight = json_field(j, "energy_weight", d.energy_weight);
  c.balance_weight = json_field(j, "balance_weight", d.balance_weight);
  c.leaky = json_field(j, "leaky", d.leaky);
  c.seed = json_field(j, "seed", d.seed);
}

std::unique_ptr<LanguageModel> make_model(const LMConfig& config) {
  config.validate();
  if (config.model == "transformer") return std::make_unique<TransformerLM>(config);
  if (config.model == "grassmann") return std::make_unique<GrassmannLM>(config);
  if (config.model == "sheaf") return std::make_unique<SheafStateLM>(config);
  throw std::invalid_argument(fmt::format("--model '{}' is unknown", config.model));
}

Tensor LanguageModel::loss(const Tensor& ids, const Tensor& targets, int ignore_index) {
  const Tensor logits = forward(ids);
  return ops::cross_entropy(ops::reshape(logits, {-1, logits.size(-1)}), ops::reshape(targets, {-1}), ignore_index);
}

}  // namespace wedge::models
