// Language modelling as a training task (tools/training_loop.h): windows of a token stream
// (data::LmBatcher), next-token cross-entropy plus a model's auxiliary terms, and the
// validation perplexity as the score, lower being better. Also the evaluation that `wedge
// eval` runs: perplexity, a model's own diagnostics, and with --data depsim the accuracy at
// each dependency probe (with SheafStateLM, the gluing weight on the patch that decides it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dependency_probe.h"
#include "data/wikitext.h"
#include "models/lm.h"
#include "tools/corpus.h"
#include "tools/training_loop.h"

namespace wedge::dist {
class Communicator;
}

namespace wedge::tools {

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

// A validation perplexity above this many times the vocabulary size (a uniform guess scores
// exactly the vocabulary size) stops the run as diverged.
inline constexpr double kDivergedPerplexityFactor = 4.0;

class LmTask final : public TrainingTask {
 public:
  // Trains `model` on `corpus`'s training split in windows of `block` tokens, `batch` rows a
  // batch, in an order drawn from `seed` per epoch; scores it on the validation split.
  LmTask(models::LanguageModel& model, const Corpus& corpus, std::int64_t block, std::int64_t batch, std::uint64_t seed);

  Module& model() override { return model_; }
  Generator* dropout_generator() override;
  std::int64_t steps_per_epoch() const override;
  std::string batch_description() const override;
  std::vector<std::string> notes(const PiecePlan& plan) const override;
  Batch load_batch(std::int64_t epoch, std::int64_t index) override;
  void before_pieces(const StepContext& ctx) override;
  Tensor train_piece(std::int64_t k, const StepContext& ctx) override;
  TaskEvaluation evaluate(const EvalPoint& at) override;
  bool higher_is_better() const override { return false; }
  std::string best_score_key() const override { return "best_val_ppl"; }
  std::map<std::string, std::string> checkpoint_metadata() const override;

 private:
  // Whether a batch in pieces needs the whole batch's counts for the auxiliary loss
  // (SheafStateLM's balance term), and whether this rank runs several pieces (then a
  // forward pass of each finds them first).
  bool whole_batch_counts(const PiecePlan& plan) const;
  std::vector<double> summed_over_ranks(std::vector<double> counts, const dist::Communicator& comm) const;

  models::LanguageModel& model_;
  const Corpus& corpus_;
  std::int64_t block_, batch_;
  std::uint64_t seed_;
  data::LmBatcher batcher_;
  std::int64_t order_epoch_ = -1;
  std::vector<std::uint32_t> order_;
  data::LmBatch whole_;
  std::vector<double> batch_totals_;
};

}  // namespace wedge::tools
