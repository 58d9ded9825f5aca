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

namespace CLI { class App; }

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

// Number of lines of a vocabulary file (one token per line; a final line without a
// newline counts, a trailing empty line does not).
std::int64_t count_vocab_lines(const std::string& path);

}  // namespace wedge::tools
