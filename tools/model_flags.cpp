#include "tools/model_flags.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <span>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace wedge::tools {

std::int64_t count_vocab_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("--vocab " + path + ": cannot open the file");
  std::int64_t lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;  // getline yields no extra line after a final '\n'
  return lines;
}

models::LMConfig ModelFlags::config() const {
  models::LMConfig c = values;
  if (!vocab_file.empty()) c.vocab_size = count_vocab_lines(vocab_file);
  c.mix_out_proj = !no_mix_out_proj;
  c.validate();
  return c;
}

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < lo || v > hi)
          return fmt::format("{} is not a finite number in [{}, {}]", text, lo, hi);
        return {};
      },
      fmt::format("FINITE in [{} - {}]", lo, hi));
}

CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size())
          return fmt::format("{} is not an integer in [0, 2^64 - 1]", text);
        return {};
      },
      "UINT");
}

void add_model_flags(CLI::App& app, ModelFlags& f) {
  models::LMConfig& v = f.values;
  app.add_option("--model", v.model, "transformer | grassmann | sheaf")
      ->check(CLI::IsMember({"transformer", "grassmann", "sheaf"}))
      ->capture_default_str();
  app.add_option("--layers", v.layers, "number of blocks")->capture_default_str();
  app.add_option("--d-model", v.d_model, "model width d")->capture_default_str();
  app.add_option("--d-ff", v.d_ff, "feed-forward width")->capture_default_str();
  app.add_option("--heads", v.heads, "attention heads (transformer)")->capture_default_str();
  app.add_option("--block", v.block, "context length: the longest sequence a forward pass takes (rows of the position table)")
      ->capture_default_str();
  app.add_option("--positions", v.positions,
                 "learned: a table of --block position rows added to the input (the papers'); none: no table, "
                 "grassmann and sheaf only, whose streams (generate, eval --stream) then run past --block without limit")
      ->check(CLI::IsMember({"learned", "none"}))
      ->capture_default_str();
  app.add_option("--dropout", v.dropout, "dropout probability")->capture_default_str();
  auto* vocab = app.add_option("--vocab", f.vocab_file,
                               "vocabulary file; the vocabulary size is its number of lines")
                    ->check(CLI::ExistingFile);
  auto* vocab_size = app.add_option("--vocab-size", v.vocab_size,
                                    "vocabulary size (instead of --vocab, e.g. synthetic data)")
                         ->capture_default_str();
  vocab->excludes(vocab_size);
  app.add_option("--rank", v.rank, "Grassmann reduced dimension r")->capture_default_str();
  app.add_option("--windows", v.windows, "Grassmann offsets used by every layer")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--window-schedule", v.window_schedule,
                 "Grassmann: one offset per layer (overrides --windows)")
      ->delimiter(',');
  app.add_flag("--no-mix-out-proj", f.no_mix_out_proj,
               "Grassmann: drop the d x d output projection of the mixing block");
  app.add_option("--patch", v.patch, "SheafState: tokens per patch P")->capture_default_str();
  app.add_option("--cover-depth", v.cover_depth, "SheafState: cover depth D (patches p-1, p-2, ..., p-2^(D-1))")
      ->capture_default_str();
  app.add_option("--types", v.types, "SheafState: patch types K (and experts)")->capture_default_str();
  app.add_option("--state-size", v.state_size, "SheafState: SSM state size N_s per channel")->capture_default_str();
  app.add_option("--section-dim", v.section_dim, "SheafState: dimension d_s of patch summaries and sections")
      ->capture_default_str();
  app.add_option("--expert-d-ff", v.expert_d_ff, "SheafState: hidden width of each expert")->capture_default_str();
  app.add_option("--energy-weight", v.energy_weight, "SheafState: weight λ of the normalised gluing energy loss")
      ->capture_default_str();
  app.add_option("--balance-weight", v.balance_weight, "SheafState: weight of the expert load-balancing loss")
      ->capture_default_str();
  app.add_option("--seed", v.seed, "seed of the weight initialisation and dropout")
      ->check(non_negative_integer())
      ->capture_default_str();
}

void add_nli_flags(CLI::App* cmd, NliFlags& f) {
  cmd->add_option("--task", f.task, "lm: a language model; nli: sentence-pair classification on SNLI (--data-dir the SNLI folder)")
      ->check(CLI::IsMember({"lm", "nli"}))
      ->capture_default_str();
  cmd->add_option("--head", f.config.head,
                  "nli: transformer, grassmann (the Grassmann–Plücker head) or sheaf (local scans glued over a two-sided "
                  "cover; --patch, --cover-depth, --types, --state-size, --section-dim)")
      ->check(CLI::IsMember({"transformer", "grassmann", "sheaf"}))
      ->capture_default_str();
  cmd->add_flag("--hypothesis-only", f.config.hypothesis_only, "nli: the control that reads the hypothesis alone");
  cmd->add_option("--max-length", f.config.max_length, "nli: tokens per sentence, [CLS] and [SEP] included")->capture_default_str();
  cmd->add_option("--d-proj", f.config.d_proj, "nli, grassmann head: reduced dimension of all mixing heads together")->capture_default_str();
  cmd->add_option("--mixing-heads", f.config.mixing_heads, "nli, grassmann head: Plücker heads (rank d-proj / heads each)")->capture_default_str();
  cmd->add_option("--window", f.config.window, "nli, grassmann head: tokens per window of Plücker pairs")->capture_default_str();
  cmd->add_option("--stride", f.config.stride, "nli, grassmann head: distance between window starts (= --window)")->capture_default_str();
  cmd->add_option("--protocol", f.protocol, "nli: auto, standard (full training split) or reduced (its 1 % sample + dev)")
      ->check(CLI::IsMember({"auto", "standard", "reduced"}))
      ->capture_default_str();
  cmd->add_option("--train-pairs", f.train_pairs, "nli: train on a seeded subset of this many pairs (learning curves)");
}

void check_task_flags(const CLI::App* cmd, const std::string& task) {
  static const char* lm_only[] = {"--model", "--block", "--positions", "--rank", "--windows", "--window-schedule", "--no-mix-out-proj",
                                  "--expert-d-ff", "--energy-weight", "--balance-weight", "--leaky", "--train", "--valid",
                                  "--test"};
  static const char* nli_only[] = {"--head", "--hypothesis-only", "--max-length", "--d-proj", "--mixing-heads",
                                   "--window", "--stride", "--protocol", "--train-pairs", "--backbone"};
  for (const char* flag : task == "nli" ? std::span<const char* const>(lm_only) : std::span<const char* const>(nli_only))
    if (const CLI::Option* option = cmd->get_option_no_throw(flag); option != nullptr && option->count() > 0)
      throw CLI::ValidationError(flag, task == "nli" ? "does not apply to --task nli" : "is for --task nli only");
}

models::NliConfig nli_config(const CLI::App* cmd, const ModelFlags& flags, const NliFlags& nf) {
  models::NliConfig config = nf.config;
  if (cmd->count("--layers") > 0) config.layers = flags.values.layers;
  if (cmd->count("--d-model") > 0) config.d_model = flags.values.d_model;
  if (cmd->count("--d-ff") > 0) config.d_ff = flags.values.d_ff;
  if (cmd->count("--heads") > 0) config.heads = flags.values.heads;
  if (cmd->count("--dropout") > 0) config.dropout = flags.values.dropout;
  // The SheafState head's sizes (its own defaults: patches of 8, cover depth 3).
  if (cmd->count("--patch") > 0) config.patch = flags.values.patch;
  if (cmd->count("--cover-depth") > 0) config.cover_depth = flags.values.cover_depth;
  if (cmd->count("--types") > 0) config.types = flags.values.types;
  if (cmd->count("--state-size") > 0) config.state_size = flags.values.state_size;
  if (cmd->count("--section-dim") > 0) config.section_dim = flags.values.section_dim;
  config.seed = flags.values.seed;
  return config;
}

}  // namespace wedge::tools
