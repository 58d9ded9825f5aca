// `wedge train` of a language model: its settings, and the setup that hands a Corpus and a
// model from models/make_model to the training loop (tools/training_loop.h) as an LmTask
// (tools/lm_task.h); and load_run, which `eval` and `generate` use.
//
// A run directory holds:
//   config.json          the model config and the training settings (eval/generate read it),
//                        with the sha256 of the token ids of each split trained on, and the
//                        parent run of a fine-tune (tools/run_continuation.h)
//   vocab.txt            the vocabulary (generate reads text through it, never the corpus)
//   last.safetensors     parameters + AdamW moments + step/epoch/RNG state (for --resume)
//   best.safetensors     parameters of the best validation perplexity so far
//   metrics.jsonl        one JSON object per step ({"step","epoch","loss","lr","time"})
//                        and per evaluation ({"eval":"valid","ppl",...})
//   .lock                held while a training writes to the folder (tools/run_folder.h)
//
// Under `mpirun -np N` (engine/distributed.h) the run is data-parallel: every rank holds the
// whole model, takes its contiguous run of the pieces of every batch (--batch is the global
// batch, --micro-batch the rows of a piece, by default one piece per rank), and the gradients
// are summed across pieces and ranks before clipping and the AdamW update, so every rank
// applies the same update; tools/data_parallel.h has the step, with --deterministic and
// ZeRO-1. Rank 0 alone owns the run directory and prints; the others print only errors. A
// checkpoint holds the full state (under ZeRO-1 gathered from the ranks' shards), so a run
// saved with N ranks resumes with any number.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "models/lm.h"
#include "tools/corpus.h"
#include "tools/lm_task.h"
#include "tools/training_loop.h"

namespace wedge::dist {
class Communicator;
}

namespace wedge::tools {

// The settings of a language-model run: the loop's (tools/training_loop.h), its data and
// its window length.
struct TrainSettings : LoopSettings {
  CorpusSpec corpus;
  std::int64_t block = 128;  // L: tokens of context per training sequence
  bool quiet_samples = false;

  nlohmann::json to_json() const;
  // Sets each setting to_json() names that `j` holds (the data files through
  // CorpusSpec::read_from when "data" is there); the others stay as they are.
  void read_json(const nlohmann::json& j);
  // Range checks, each naming the flag, or the field of `config_file` for a resumed run.
  void validate(const std::string& config_file) const;
};

// The loop's result (steps, losses, throughput, communication), and in a language model's terms.
struct TrainResult : LoopResult {
  double final_val_ppl = 0;  // the last evaluation's (LoopResult::last_score)
  double best_val_ppl = 0;   // LoopResult::best_score
  std::string corpus;        // the corpus trained on (synthetic | wikitext2 | text | depsim)
};

// Runs (or resumes) a training run in its RunFolder (tools/run_folder.h). Throws on bad
// settings, and when the run diverges (a non-finite loss or weights, or a validation
// perplexity past kDivergedPerplexityFactor x the vocabulary), naming the last good checkpoint.
TrainResult train(const models::LMConfig& model_config, const TrainSettings& settings);

// A model restored from a run directory (config.json + best or last checkpoint).
struct LoadedRun {
  models::LMConfig config;
  nlohmann::json settings;
  std::unique_ptr<models::LanguageModel> model;
};
LoadedRun load_run(const std::string& run_dir, const std::string& which = "best", Device device = Device::cpu());

}  // namespace wedge::tools
