// The model flags, bound the same way on every command that builds a model (params,
// audit-causal, train, bench-step):
//   --model transformer|grassmann|sheaf --layers --d-model --d-ff --heads --block --dropout
//   --vocab FILE | --vocab-size N   --rank --windows 1,2,4,8,12,16
//   --window-schedule 1,1,2,2,...   --no-mix-out-proj   --patch --cover-depth --types
//   --state-size --section-dim --expert-d-ff --energy-weight --balance-weight   --seed
// Defaults are the paper's 6-layer configuration (models/lm.h LMConfig).
#pragma once

#include <cstdint>
#include <string>

#include "models/lm.h"
#include "models/nli.h"

namespace CLI { class App; class Validator; }

namespace wedge::tools {

struct ModelFlags {
  models::LMConfig values;   // every size flag lands here
  std::string vocab_file;    // --vocab: the vocabulary size is its number of lines
  bool no_mix_out_proj = false;

  // The configuration the flags describe, validated (throws std::invalid_argument with a
  // message naming the flag; std::runtime_error when the vocab file cannot be read).
  models::LMConfig config() const;
};

void add_model_flags(CLI::App& app, ModelFlags& flags);

// A flag check: a finite number in [lo, hi] (CLI11's Range lets NaN through).
CLI::Validator finite_range(double lo, double hi);
// A flag check: an integer >= 0 that fits in 64 bits (CLI11 would wrap "-5" into 2^64 - 5).
CLI::Validator non_negative_integer();

// --task nli: the sentence-pair classifier's own flags (--task --head --hypothesis-only
// --max-length --d-proj --mixing-heads --window --stride --protocol --train-pairs); the
// shared size flags (--layers --d-model --d-ff --heads --dropout --seed and the SheafState
// head's --patch --cover-depth --types --state-size --section-dim) set the classifier's
// sizes when given.
struct NliFlags {
  std::string task = "lm";  // lm | nli
  models::NliConfig config;
  std::string protocol = "auto";
  std::int64_t train_pairs = -1;
  std::string backbone;  // train: RUN[:best|last], a language model whose token states the heads read
};
void add_nli_flags(CLI::App* cmd, NliFlags& flags);
// Flags of one task given to the other are errors, not silently ignored (CLI::ValidationError).
void check_task_flags(const CLI::App* cmd, const std::string& task);
// The classifier's configuration: the paper's head sizes (2 layers, d 256, 4 heads, d_ff
// 512, dropout 0.1) unless the shared size flags are given.
models::NliConfig nli_config(const CLI::App* cmd, const ModelFlags& flags, const NliFlags& nli);

// Number of lines of a vocabulary file (one token per line; a final line without a
// newline counts, a trailing empty line does not).
std::int64_t count_vocab_lines(const std::string& path);

}  // namespace wedge::tools
