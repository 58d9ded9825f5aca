// The training loop behind `wedge train`, and the pieces `eval`, `generate` and
// `bench-step` share with it. Thin by design: it wires a Corpus, a model from
// models/make_model, AdamW and a warm-up + decay schedule, and reports.
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

namespace wedge::dist {
class Communicator;
}

namespace wedge::tools {

struct TrainSettings {
  CorpusSpec corpus;
  std::int64_t epochs = 1;
  std::int64_t batch = 32;
  std::int64_t block = 128;  // L: tokens of context per training sequence
  double lr = 5e-4;
  // The schedule after the linear warm-up: cosine | linear | constant | inverse-sqrt
  // (engine/optim.h LrSchedule), decaying to min_lr (-1: lr * min_lr_ratio).
  std::string schedule = "cosine";
  double min_lr_ratio = 0.1;
  double min_lr = -1;
  std::int64_t warmup = -1;   // steps; -1: 5 % of the run (at least 1)
  double weight_decay = 0.01;
  double clip = 1.0;
  std::uint64_t seed = 0;
  std::int64_t max_steps = -1;   // stop after this many steps in total (-1: no limit)
  std::int64_t eval_every = -1;  // also evaluate every N steps (-1: only at epoch ends)
  std::int64_t log_every = 10;
  std::int64_t stop_after = -1;  // end this invocation after N steps, as Ctrl-C would (resumable)
  int threads = 0;               // 0: all cores
  // Data parallelism and gradient accumulation (tools/data_parallel.h): rows per piece of a
  // batch (0: one piece per process); the pieces' gradients summed in a fixed tree order;
  // ZeRO stage 1 (each rank keeps the optimizer's moments for its shard only); seconds a
  // collective waits for the other ranks before ending the job (-1: the default, 0: forever).
  std::int64_t micro_batch = 0;
  bool deterministic = false;
  int zero = 0;
  double comm_timeout = -1;
  std::string out;               // run directory
  bool resume = false;
  // A new run from another run's weights: "RUN", "RUN:best" or "RUN:last" (tools/run_continuation.h).
  std::string init_from;
  // The flags the user gave ("--lr", ...). On --resume each must agree with the run (only
  // --epochs and --max-steps may grow it); settings not given are the run's. With
  // --init-from the size flags given must agree with the parent's.
  std::set<std::string> given;
  bool overwrite = false;  // a fresh run may replace the run already in `out`
  bool json = false;
  bool quiet_samples = false;
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string precision = "fp32";  // fp32 | bf16 (engine/precision.h); a resumed run keeps its own

  nlohmann::json to_json() const;
  // Sets each setting to_json() names that `j` holds (the data files through
  // CorpusSpec::read_from when "data" is there); the others stay as they are.
  void read_json(const nlohmann::json& j);
  // Range checks, each naming the flag, or the field of `config_file` for a resumed run.
  void validate(const std::string& config_file) const;
};

// A validation perplexity above this many times the vocabulary size (a uniform guess scores
// exactly the vocabulary size) stops the run as diverged.
inline constexpr double kDivergedPerplexityFactor = 4.0;

struct TrainResult {
  std::int64_t steps = 0;
  double final_loss = 0;
  double final_val_ppl = 0;
  double best_val_ppl = 0;
  double tokens_per_s = 0;
  double comm_share = 0;  // of this invocation's step time, rank 0's time in gradient collectives
  std::uint64_t comm_bytes_per_step = 0;  // received by each rank (0 in one process)
  double comm_overlap = 0;  // share of the gradient whose exchange started during the backward pass
  std::string collectives;  // what carried the gradients: GradientSync::collectives()
  std::int64_t parameters = 0;
  bool interrupted = false;
  bool already_finished = false;  // --resume of a run that had done all its steps: nothing trained
  std::string corpus;             // the corpus trained on (synthetic | wikitext2 | text | depsim)
};

// Runs (or resumes) a training run in its RunFolder (tools/run_folder.h). Throws on bad
// settings, and when the run diverges (a non-finite loss or weights, or a validation
// perplexity past kDivergedPerplexityFactor x the vocabulary), naming the last good checkpoint.
TrainResult train(const models::LMConfig& model_config, const TrainSettings& settings);

// Mean next-token NLL over every predicted token of `stream` (each token after the first
// is predicted exactly once: the stream is cut into consecutive windows of L+1 tokens that
// overlap by one, the last window shorter). Runs without gradients, in eval mode. A stream
// with nothing to predict (fewer than 2 tokens) or a batch < 1 is an error.
struct EvalResult {
  double nll = 0;
  double ppl = 0;
  std::int64_t tokens = 0;
  // The model's own measurements (models::LanguageModel::diagnostics), each averaged over
  // the evaluation batches: e.g. SheafStateLM's gluing energies and expert loads.
  nlohmann::json diagnostics = nlohmann::json::object();
  // With probes (--data depsim): the accuracy of the model's most likely token at each
  // probe whose deciding token lies inside the evaluation window, by type and distance
  // (data::DependencyTally::to_json); null without probes.
  nlohmann::json dependencies;
};
//
// With a communicator of several ranks (a data-parallel job, engine/distributed.h), every
// rank calls it: evaluation batch i runs on rank i % N and the sums are combined in rank
// order, so every rank gets the same result, equal to one process's up to the order of the
// floating-point sums. (With probes every rank still scores every batch: their tallies are
// not combined across ranks.)
EvalResult evaluate(models::LanguageModel& model, const std::vector<std::int32_t>& stream, std::int64_t block,
                    std::int64_t batch, const std::vector<data::DependencyProbe>& probes = {},
                    const dist::Communicator* comm = nullptr);

// One line for progress output: "dependencies  1: 0.99  2-3: 0.97 ...  |  local 0.99  anchor 0.80  entity 0.41".
std::string dependency_summary(const nlohmann::json& dependencies);

// A model restored from a run directory (config.json + best or last checkpoint).
struct LoadedRun {
  models::LMConfig config;
  nlohmann::json settings;
  std::unique_ptr<models::LanguageModel> model;
};
LoadedRun load_run(const std::string& run_dir, const std::string& which = "best", Device device = Device::cpu());

}  // namespace wedge::tools
