#include "tools/model_flags.h"

#include <fstream>
#include <stdexcept>

#include <CLI/CLI.hpp>

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

void add_model_flags(CLI::App& app, ModelFlags& f) {
  models::LMConfig& v = f.values;
  app.add_option("--model", v.model, "transformer | grassmann | sheaf")
      ->check(CLI::IsMember({"transformer", "grassmann", "sheaf"}))
      ->capture_default_str();
  app.add_option("--layers", v.layers, "number of blocks")->capture_default_str();
  app.add_option("--d-model", v.d_model, "model width d")->capture_default_str();
  app.add_option("--d-ff", v.d_ff, "feed-forward width")->capture_default_str();
  app.add_option("--heads", v.heads, "attention heads (transformer)")->capture_default_str();
  app.add_option("--block", v.block, "context length: rows of the position table")
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
      ->capture_default_str();
}

}  // namespace wedge::tools
