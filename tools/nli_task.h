// The sentence-pair task (SNLI): splits under a stated protocol, training of the classifier
// of models/nli.h, evaluation with the metrics of tools/classification.h, and the majority
// baseline. `wedge train --task nli`, `wedge eval` and `wedge classify` call these.
//
// Protocols. "standard": train on the training split, select the best epoch on dev, report
// test — whenever the full training split (snli_1.0_train.jsonl) is present. "reduced": when
// only the 1 % random sample of the training split is (snli_1.0_train_random1pct.jsonl, in
// the folder or its partial/), train on it plus the first 5,000 dev pairs, select on the
// other 4,842 dev pairs, report test. Both report the same test split; the reduced one
// trains on ~10 k pairs instead of 550 k, and says so in every output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/snli.h"
#include "data/tokenizer.h"
#include "engine/distributed.h"
#include "models/nli.h"
#include "tools/classification.h"
#include "tools/corpus.h"
#include "tools/training_loop.h"

namespace wedge::tools {

// The settings of a classifier run: the loop's (tools/training_loop.h) and its data.
struct NliSettings : LoopSettings {
  NliSettings() {
    epochs = 10;
    log_every = 50;
  }
  std::string data_dir;           // the SNLI folder
  std::string vocab;              // vocab.txt (default: the BERT-uncased one beside the data)
  std::string protocol = "auto";  // auto | standard | reduced
  std::int64_t train_pairs = -1;  // train on this many pairs of the training set only (-1: all)
  // "RUN[:best|last]": the language model whose token states the heads read, frozen
  // (models/nli.h attach_backbone); config.json records its checkpoint and sha256 too.
  std::string backbone;

  nlohmann::json to_json() const;
  // Sets each setting to_json() names that `j` holds; the others stay as they are.
  void read_json(const nlohmann::json& j);
  static NliSettings from_json(const nlohmann::json& j);
  // Range checks, each naming the flag, or the field of `config_file` for a resumed run.
  void validate(const std::string& config_file) const;
};

inline constexpr std::size_t kReducedTrainFromDev = 5000;

// The three splits of a protocol, tokenized.
struct NliSplits {
  std::string protocol;     // "standard" | "reduced"
  std::string description;  // one line: which files and pairs make each split
  std::unique_ptr<data::SnliDataset> train, select, test;
  std::size_t skipped_unlabelled = 0;  // pairs with gold label "-" (over every file read)
  std::size_t truncated = 0;           // pairs with a sentence cut to max_length
};
NliSplits load_nli_splits(const NliSettings& settings, const data::Tokenizer& tokenizer, std::size_t max_length);

// Model inputs of a batch: the pair, or the hypothesis alone for the control.
struct NliInputs {
  Tensor ids, segments, mask, labels;
};
NliInputs nli_inputs(const data::SnliBatch& batch, bool hypothesis_only, Device device);

struct NliEvaluation {
  ClassificationReport report;
  double loss = 0;  // mean cross-entropy
  std::vector<std::int32_t> predicted;
};
// In eval mode, without gradients, over the whole dataset in file order. With `comm`, the
// ranks share the batches (each a contiguous run of them) and every rank gets the whole
// result: the same predictions and the same loss, bit for bit, as one process.
NliEvaluation evaluate_nli(models::NliModel& model, const data::SnliDataset& dataset, std::int64_t batch,
                           const dist::Communicator* comm = nullptr);

// Every pair labelled with the most frequent label of `train`.
ClassificationReport majority_baseline(const data::SnliDataset& train, const data::SnliDataset& test);

struct NliResult {
  std::string protocol, description;
  std::int64_t steps = 0, parameters = 0, best_epoch = 0, train_pairs = 0;
  double seconds = 0;
  ClassificationReport select, test, majority;
  bool interrupted = false;
  bool already_finished = false;  // --resume of a run that had done all its steps
};
// Trains through the loop of tools/training_loop.h (epochs over the training split, scored
// on the selection split after each; the best kept as best.safetensors), then evaluates
// that checkpoint on test — once the run has done all its steps (an interrupted run is
// continued with --resume). Writes config.json, metrics.jsonl and the checkpoints to
// settings.out.
NliResult train_nli(const models::NliConfig& config, const NliSettings& settings);

// The frozen language model of --backbone RUN[:best|last], on `device`, in eval mode: it
// must be a language-model run whose vocabulary is `codec`'s byte for byte. With a
// communicator of several ranks, rank 0 reads it and the others receive it. `record` gets
// what config.json keeps of it: {"run", "checkpoint", "file", "step", "sha256"}.
std::shared_ptr<models::LanguageModel> open_backbone(const std::string& arg, const TextCodec& codec,
                                                     const std::string& vocab_name, Device device,
                                                     const dist::Communicator* comm, nlohmann::json& record);

// A classifier restored from a run folder written by train_nli (with its backbone, checked
// against the sha256 it was trained with).
struct LoadedNliRun {
  models::NliConfig config;
  NliSettings settings;
  std::unique_ptr<models::NliModel> model;
};
LoadedNliRun load_nli_run(const std::string& run_dir, const std::string& which = "best", Device device = Device::cpu());
// Whether a run folder holds a sentence-pair classifier (its config.json says "task": "nli").
bool is_nli_run(const std::string& run_dir);

}  // namespace wedge::tools
