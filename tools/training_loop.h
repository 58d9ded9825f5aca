// The one training loop behind `wedge train`, for every task. It owns what a run is: the
// run folder (a new run, a resumed one, a fine-tune from a parent), AdamW and the learning
// rate schedule, the pieces of each batch and their gradients over the ranks of a
// data-parallel job (tools/data_parallel.h), losses and progress lines, Ctrl-C and
// --stop-after, divergence, evaluations and the checkpoints that keep the best one. What a
// task is (its batches, its loss, its held-out score and which way that score is better)
// comes through TrainingTask: tools/lm_task.h for language models, tools/nli_task.h for
// the sentence-pair classifier.
//
// Start reading at TrainingLoop::run; a task's setup (tools/trainer.cpp train,
// tools/nli_task.cpp train_nli) is: open the loop, adopt a resumed run's settings, load the
// data, build the model, then run.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/module.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "tools/data_parallel.h"
#include "tools/run_continuation.h"
#include "tools/run_folder.h"

namespace wedge::dist {
class Communicator;
}

namespace wedge::tools {

// The settings of a training that every task shares, under the names of their flags.
struct LoopSettings {
  std::int64_t epochs = 1;
  std::int64_t batch = 32;
  double lr = 5e-4;
  // The schedule after the linear warm-up: cosine | linear | constant | inverse-sqrt
  // (engine/optim.h LrSchedule), decaying to min_lr (-1: lr * min_lr_ratio).
  std::string schedule = "cosine";
  double min_lr_ratio = 0.1;
  double min_lr = -1;
  std::int64_t warmup = -1;  // steps; -1: 5 % of the run (at least 1)
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
  std::string out;  // the run folder
  bool resume = false;
  // A new run from another run's weights: "RUN", "RUN:best" or "RUN:last" (tools/run_continuation.h).
  std::string init_from;
  // The flags the user gave ("--lr", ...). On --resume each must agree with the run (only
  // --epochs and --max-steps may grow it); settings not given are the run's. With
  // --init-from the size flags given must agree with the parent's.
  std::set<std::string> given;
  bool overwrite = false;  // a fresh run may replace the run already in `out`
  bool json = false;       // progress goes to stderr (stdout is for the result)
  std::string device = "cpu";      // cpu | cuda | cuda:N
  std::string precision = "fp32";  // fp32 | bf16 (engine/precision.h); a resumed run keeps its own

  // The keys of config.json "train" these settings fill (the ones that fix the run's arithmetic).
  void write_loop_json(nlohmann::json& j) const;
  // Sets each of those keys that `j` holds; the others stay as they are.
  void read_loop_json(const nlohmann::json& j);
  // How an error names a setting: the flag ("--lr"), or for a resumed run the field of its
  // config.json ("RUN/config.json: train.lr").
  static std::string setting_name(const std::string& config_file, const char* flag);
  // Range checks, std::invalid_argument naming each setting by setting_name.
  void validate_loop(const std::string& config_file) const;
};

// How a step's batch is cut among the pieces and ranks, handed to the task with each piece.
struct StepContext {
  const PiecePlan& plan;
  PieceDropout& dropout;
  const dist::Communicator& comm;
  Device device;
};

// Where an evaluation happens: after `step` steps, in epoch `epoch` (0-based), and the
// checkpoint a diverged run can go back to, in words.
struct EvalPoint {
  std::int64_t step = 0, epoch = 0;
  std::string last_good;
};

// A task's score on its held-out split.
struct TaskEvaluation {
  double score = 0;        // compared by TrainingTask::higher_is_better
  nlohmann::json metrics;  // its metrics.jsonl line; the loop adds "step", "epoch" (when absent) and "time"
  std::vector<std::string> lines;  // printed; the first gets "  best" when the score is the best so far
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  virtual Module& model() = 0;
  // The generator of the model's dropout masks (its state travels in checkpoints), or null.
  virtual Generator* dropout_generator() { return nullptr; }
  virtual std::int64_t steps_per_epoch() const = 0;
  // "32 x 128" or "32 pairs": what one batch is, for the start-up line.
  virtual std::string batch_description() const = 0;
  // Lines the task has to say once the pieces of a batch are known.
  virtual std::vector<std::string> notes(const PiecePlan&) const { return {}; }

  // Loads the whole batch `index` of epoch `epoch` (its order a function of the seed and
  // the epoch only); returns its rows and the tokens it feeds the model (for tok/s).
  struct Batch {
    std::int64_t rows = 0, tokens = 0;
  };
  virtual Batch load_batch(std::int64_t epoch, std::int64_t index) = 0;
  // Before the pieces of a step: what the task must know of the whole batch first.
  virtual void before_pieces(const StepContext&) {}
  // Forward, loss and backward of piece k of the loaded batch. The piece's loss is weighted
  // by its share of the batch, so that the pieces' gradients sum to the whole batch's;
  // returns that weighted loss, detached (undefined when the piece has no rows).
  virtual Tensor train_piece(std::int64_t k, const StepContext& ctx) = 0;

  // Scores the model (in eval mode, without gradients) on the held-out split; every rank
  // calls it. Throws when the score says the run diverged.
  virtual TaskEvaluation evaluate(const EvalPoint& at) = 0;
  virtual bool higher_is_better() const = 0;
  // The checkpoint metadata key of the best score ("best_val_ppl"), and the task's own keys.
  virtual std::string best_score_key() const = 0;
  virtual std::map<std::string, std::string> checkpoint_metadata() const { return {}; }
};

struct LoopResult {
  std::int64_t steps = 0;
  double final_loss = 0;
  double last_score = 0, best_score = 0;
  std::int64_t best_step = -1;  // -1: never evaluated
  double tokens_per_s = 0, seconds = 0;
  double comm_share = 0;                   // of this invocation's step time, rank 0's in gradient collectives
  std::uint64_t comm_bytes_per_step = 0;   // received by each rank (0 in one process)
  double comm_overlap = 0;                 // share of the gradient exchanged during the backward pass
  std::string collectives;                 // GradientSync::collectives()
  std::int64_t parameters = 0;
  bool interrupted = false;
  bool already_finished = false;  // --resume of a run that had done all its steps
};

class TrainingLoop {
 public:
  // Under mpirun every rank opens the loop. Rank 0 creates the run folder (or opens it for
  // --resume) and reads a resumed run's config.json and the parent of --init-from; every
  // other rank receives them, so the ranks need no shared disk. `task` is "lm" or "nli".
  TrainingLoop(const LoopSettings& settings, std::string task);

  const dist::Communicator& comm() const { return comm_; }
  // A resumed run's config.json (null for a new run).
  const nlohmann::json& recorded() const { return recorded_; }
  std::string config_path() const { return out_ + "/config.json"; }
  // The parent of --init-from, or null.
  ParentRun* parent() { return parent_ ? &*parent_ : nullptr; }
  const ParentRun* parent() const { return parent_ ? &*parent_ : nullptr; }
  // Rank 0's run folder; null on the other ranks.
  RunFolder* folder() { return run_ ? &*run_ : nullptr; }
  // One progress line on rank 0 (stderr under --json).
  void say(const std::string& line) const;
  std::string last_good() const;

  // On --resume: every flag given must name the value the run recorded in `wanted`'s
  // sections ("model", "train"); otherwise refused by name, with the way to --init-from
  // instead. Free: where the data files are now (their token ids are checked once read),
  // the length (checked once the step is known), and what does not change the arithmetic.
  void refuse_changed(const nlohmann::json& wanted) const;
  // The run's model configuration: a resumed run's own, a parent's sizes (a size flag given
  // that contradicts them refused by name; the regularisation flags as given), else `given`.
  template <typename Config> Config model_config(const Config& given) const {
    const nlohmann::json j = model_config_json(nlohmann::json(given));
    try {
      return j.template get<Config>();
    } catch (const std::exception& e) {
      throw std::runtime_error(model_config_error(e.what()));
    }
  }
  // A resumed run's `settings` with what this invocation decides: the length and the
  // evaluation cadence when given, and how it runs now (device, threads, ZeRO, logging,
  // --stop-after, --json).
  static void keep_invocation_settings(LoopSettings& settings, const LoopSettings& given);

  // Trains `task` under `settings` (a resumed run's own, after keep_invocation_settings). A new
  // run begins its folder with `config` (its "train" gets "warmup_steps" and "init_from")
  // and `vocab_text`; a resumed one continues from last.safetensors.
  LoopResult run(TrainingTask& task, const LoopSettings& settings, nlohmann::json config, std::string_view vocab_text);

 private:
  nlohmann::json model_config_json(const nlohmann::json& given) const;
  std::string model_config_error(const std::string& what) const;

  const dist::Communicator& comm_;
  std::string out_, task_;
  bool json_ = false;
  std::optional<RunFolder> run_;
  nlohmann::json recorded_;
  std::optional<ParentRun> parent_;
  std::set<std::string> given_;
};

// The steps a run of these settings takes: its epochs, or --max-steps when given.
std::int64_t planned_steps(std::int64_t per_epoch, std::int64_t epochs, std::int64_t max_steps);

}  // namespace wedge::tools
