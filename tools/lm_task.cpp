#include "tools/lm_task.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/autograd.h"
#include "engine/distributed.h"
#include "models/sheaf.h"
#include "models/tied_embedding_lm.h"
#include "ops/ops.h"
#include "tools/training_support.h"

namespace wedge::tools {

using Clock = std::chrono::steady_clock;

// ---- evaluation --------------------------------------------------------------------------------

namespace {

// Sums numbers (and arrays of numbers, element by element) of `add` into `total`.
void accumulate_diagnostics(nlohmann::json& total, const nlohmann::json& add) {
  for (const auto& [key, value] : add.items()) {
    if (value.is_number()) {
      total[key] = total.value(key, 0.0) + value.get<double>();
    } else if (value.is_array()) {
      nlohmann::json& sums = total[key];
      if (!sums.is_array()) sums = nlohmann::json::array();
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (sums.size() <= i) sums.push_back(0.0);
        sums[i] = sums[i].get<double>() + value[i].get<double>();
      }
    }
  }
}

void average_diagnostics(nlohmann::json& total, std::size_t batches) {
  if (batches == 0) return;
  for (auto& [key, value] : total.items()) {
    if (value.is_number()) value = value.get<double>() / double(batches);
    if (value.is_array())
      for (auto& v : value) v = v.get<double>() / double(batches);
  }
}

// SheafStateLM reads earlier patches only through its gluing weights a_pq. For every probe
// whose deciding token lies in an earlier patch q of the window: is q in the cover of the
// predicting position's patch p, and if so, what weight (mean over the layers) does p give
// it, against an even share 1/|N(p)| of its cover?
struct GluingTally {
  std::array<std::int64_t, 3> across{}, in_cover{};
  std::array<double, 3> weight{}, even{};

  nlohmann::json to_json() const {
    nlohmann::json j = nlohmann::json::object();
    for (std::size_t t = 0; t < data::kDependencyTypeNames.size(); ++t) {
      if (across[t] == 0) continue;
      auto mean = [&](double v) { return in_cover[t] > 0 ? nlohmann::json(v / double(in_cover[t])) : nlohmann::json(nullptr); };
      j[data::kDependencyTypeNames[t]] = {{"across_patches", across[t]},
                                          {"in_cover", in_cover[t]},
                                          {"weight_on_source_patch", mean(weight[t])},
                                          {"even_share", mean(even[t])}};
    }
    return j;
  }
};

// Scores the probes whose targets lie in batch `b`: is the model's most likely token the target?
void score_probes(const data::LmBatch& b, const Tensor& logits, const std::vector<data::DependencyProbe>& probes,
                  const models::SheafStateLM* sheaf, data::DependencyTally& tally, GluingTally& gluing) {
  const auto L = static_cast<std::int64_t>(b.block);
  const std::vector<float> host = logits.to(Device::cpu()).to_vector<float>();
  const auto V = static_cast<std::int64_t>(host.size()) / (static_cast<std::int64_t>(b.rows) * L);
  std::vector<std::vector<float>> weights;  // per layer, (rows, patches, D)
  std::int64_t patches = 0, D = 0, P = 0;
  if (sheaf != nullptr && !sheaf->gluing_weights().empty()) {
    for (const Tensor& w : sheaf->gluing_weights()) weights.push_back(w.to(Device::cpu()).to(DType::F32).to_vector<float>());
    patches = sheaf->gluing_weights()[0].size(1);
    D = sheaf->gluing_weights()[0].size(2);
    P = sheaf->config().patch;
  }
  for (std::size_t r = 0; r < b.rows; ++r) {
    const auto start = static_cast<std::int64_t>(b.block_ids[r]) * L;  // the window's first input token
    auto it = std::lower_bound(probes.begin(), probes.end(), start + 1,
                               [](const data::DependencyProbe& p, std::int64_t t) { return p.target < t; });
    for (; it != probes.end() && it->target <= start + static_cast<std::int64_t>(b.lengths[r]); ++it) {
      const std::int64_t predict = it->target - 1 - start, source = predict - it->distance;
      if (source < 0) continue;  // the deciding token is outside this window
      const float* row = host.data() + (static_cast<std::int64_t>(r) * L + predict) * V;
      const auto best = std::max_element(row, row + V) - row;
      tally.add(*it, best == b.targets[r * b.block + static_cast<std::size_t>(predict)]);
      if (weights.empty() || source / P == predict / P) continue;
      const std::int64_t p = predict / P, delta = p - source / P;
      const auto t = static_cast<std::size_t>(it->type);
      ++gluing.across[t];
      if (!std::has_single_bit(static_cast<std::uint64_t>(delta)) || std::countr_zero(static_cast<std::uint64_t>(delta)) >= D)
        continue;  // reached only through several hops of the chain
      const std::int64_t slot = std::countr_zero(static_cast<std::uint64_t>(delta));
      double w = 0;
      for (const auto& layer : weights) w += layer[static_cast<std::size_t>((static_cast<std::int64_t>(r) * patches + p) * D + slot)];
      std::int64_t members = 0;
      for (std::int64_t j = 0; j < D && p >= (std::int64_t{1} << j); ++j) ++members;
      ++gluing.in_cover[t];
      gluing.weight[t] += w / double(weights.size());
      gluing.even[t] += 1.0 / double(members);
    }
  }
}

}  // namespace

std::string dependency_summary(const nlohmann::json& d) {
  auto shown = [](const nlohmann::json& a) { return a.is_null() ? std::string("-") : fmt::format("{:.2f}", a.get<double>()); };
  std::string line = "dependencies ";
  for (std::size_t b = 0; b < d.at("buckets").size(); ++b)
    line += fmt::format(" {}: {}", d["buckets"][b].get<std::string>(), shown(d["accuracy"][b]));
  line += "  |";
  for (const char* type : data::kDependencyTypeNames) line += fmt::format("  {} {}", type, shown(d["types"][type]["accuracy"]));
  return line;
}

EvalResult evaluate(models::LanguageModel& model, const std::vector<std::int32_t>& stream, std::int64_t block,
                    std::int64_t batch, const std::vector<data::DependencyProbe>& probes, const dist::Communicator* comm) {
  if (batch < 1) throw std::invalid_argument(fmt::format("evaluation: --batch is {}; it must be at least 1", batch));
  if (block < 1) throw std::invalid_argument(fmt::format("evaluation: the block is {}; it must be at least 1", block));
  if (stream.size() < 2)
    throw std::runtime_error(fmt::format("evaluation: the split holds {} tokens; at least 2 are needed to predict one",
                                         stream.size()));
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  double nll_sum = 0;
  const data::LmBatcher batcher(stream, static_cast<std::size_t>(block), static_cast<std::size_t>(batch), 0);
  const Device device = module_device(model);
  data::DependencyTally tally(block);
  GluingTally gluing;
  const auto* sheaf = dynamic_cast<const models::SheafStateLM*>(&model);
  const bool split = comm != nullptr && comm->distributed() && probes.empty();
  const auto ranks = static_cast<std::size_t>(split ? comm->size() : 1), me = static_cast<std::size_t>(split ? comm->rank() : 0);
  for (std::size_t i = 0; i < batcher.eval_batches(); ++i) {
    if (i % ranks != me) continue;
    const data::LmBatch b = batcher.eval_batch(i);
    const auto rows = static_cast<std::int64_t>(b.rows), L = static_cast<std::int64_t>(b.block);
    const Tensor inputs = Tensor::from_vector(b.inputs, {rows, L}).to(device);
    const Tensor targets = Tensor::from_vector(b.targets, {rows, L}).to(device);
    Tensor loss;
    if (probes.empty()) {
      loss = model.loss(inputs, targets, data::kIgnoreTarget);  // the logits never whole
    } else {  // the probes read the logits
      Tensor logits = model.forward(inputs);
      loss = ops::cross_entropy(ops::reshape(logits, {rows * L, -1}), ops::reshape(targets, {rows * L}), data::kIgnoreTarget);
      score_probes(b, logits, probes, sheaf, tally, gluing);
    }
    nll_sum += loss.item() * static_cast<double>(b.predicted_tokens);
    r.tokens += static_cast<std::int64_t>(b.predicted_tokens);
    accumulate_diagnostics(r.diagnostics, model.diagnostics());
  }
  model.train(was_training);
  if (split) {
    // Each rank's sums, gathered and added in rank order: the same on every rank. The two
    // numbers travel as bytes (JSON would turn a NaN sum into null), the diagnostics as JSON.
    std::string mine(sizeof nll_sum + sizeof r.tokens, '\0');
    std::memcpy(mine.data(), &nll_sum, sizeof nll_sum);
    std::memcpy(mine.data() + sizeof nll_sum, &r.tokens, sizeof r.tokens);
    mine += r.diagnostics.dump();
    nll_sum = 0;
    r.tokens = 0;
    r.diagnostics = nlohmann::json::object();
    for (const std::string& part : comm->all_gather(mine)) {
      double nll = 0;
      std::int64_t tokens = 0;
      std::memcpy(&nll, part.data(), sizeof nll);
      std::memcpy(&tokens, part.data() + sizeof nll, sizeof tokens);
      nll_sum += nll;
      r.tokens += tokens;
      accumulate_diagnostics(r.diagnostics, nlohmann::json::parse(part.substr(sizeof nll + sizeof tokens)));
    }
  }
  average_diagnostics(r.diagnostics, batcher.eval_batches());
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.ppl = std::exp(r.nll);
  if (!probes.empty()) {
    r.dependencies = tally.to_json();
    if (sheaf != nullptr) r.dependencies["gluing"] = gluing.to_json();
  }
  return r;
}

// ---- the task -------------------------------------------------------------------------------------

namespace {

// Rows [first, first + count) of a batch.
data::LmBatch slice_batch(const data::LmBatch& b, std::size_t first, std::size_t count) {
  if (first == 0 && count == b.rows) return b;
  data::LmBatch s;
  s.rows = count;
  s.block = b.block;
  const auto from = static_cast<std::ptrdiff_t>(first * b.block), to = static_cast<std::ptrdiff_t>((first + count) * b.block);
  s.inputs.assign(b.inputs.begin() + from, b.inputs.begin() + to);
  s.targets.assign(b.targets.begin() + from, b.targets.begin() + to);
  for (std::size_t r = first; r < first + count; ++r) {
    s.lengths.push_back(b.lengths[r]);
    s.block_ids.push_back(b.block_ids[r]);
    s.predicted_tokens += b.lengths[r];
  }
  return s;
}

// The diagnostics of an evaluation, one line: "energy 0.123  load 0.250,0.250,...".
std::string diagnostics_line(const nlohmann::json& diagnostics) {
  std::string parts;
  for (const auto& [key, value] : diagnostics.items()) {
    std::string shown;
    if (value.is_array())
      for (const auto& v : value) shown += fmt::format("{}{:.3f}", shown.empty() ? "" : ",", v.get<double>());
    else
      shown = fmt::format("{:.4g}", value.get<double>());
    parts += fmt::format("  {} {}", key, shown);
  }
  return "      " + parts.substr(2);
}

}  // namespace

LmTask::LmTask(models::LanguageModel& model, const Corpus& corpus, std::int64_t block, std::int64_t batch, std::uint64_t seed)
    : model_(model), corpus_(corpus), block_(block), batch_(batch), seed_(seed),
      batcher_(corpus.train, static_cast<std::size_t>(block), static_cast<std::size_t>(batch), 0) {
  if (batcher_.train_batches_per_epoch() < 1)
    throw std::runtime_error(fmt::format("train: the training split ({} tokens) is too small for one batch of {} x {}",
                                         corpus.train.size(), batch, block + 1));
}

Generator* LmTask::dropout_generator() {
  if (auto* t = dynamic_cast<models::TiedEmbeddingLM*>(&model_)) return &t->dropout_generator();
  return nullptr;
}

std::int64_t LmTask::steps_per_epoch() const { return static_cast<std::int64_t>(batcher_.train_batches_per_epoch()); }

std::string LmTask::batch_description() const { return fmt::format("{} x {}", batch_, block_); }

bool LmTask::whole_batch_counts(const PiecePlan& plan) const { return model_.batch_counts_size() > 0 && plan.pieces > 1; }

std::vector<std::string> LmTask::notes(const PiecePlan& plan) const {
  if (!whole_batch_counts(plan) || plan.last - plan.first <= 1) return {};
  return {"pieces: SheafStateLM's balance term weighs each piece by the whole batch's expert counts, so each piece first "
          "runs forward once without gradients to count them"};
}

std::vector<double> LmTask::summed_over_ranks(std::vector<double> counts, const dist::Communicator& comm) const {
  // Every rank sends the same number of counts, rows or none (MPI would not say).
  if (counts.size() != model_.batch_counts_size())
    throw std::logic_error(fmt::format("{} batch counts where the model declares {}", counts.size(), model_.batch_counts_size()));
  if (comm.distributed()) comm.all_reduce_sum(std::span<double>(counts));
  return counts;
}

TrainingTask::Batch LmTask::load_batch(std::int64_t epoch, std::int64_t index) {
  if (epoch != order_epoch_) {
    order_ = batcher_.epoch_order(seed_, static_cast<std::uint64_t>(epoch));
    order_epoch_ = epoch;
  }
  whole_ = batcher_.train_batch(order_, static_cast<std::size_t>(index));
  return {static_cast<std::int64_t>(whole_.rows), static_cast<std::int64_t>(whole_.rows) * block_};
}

// SheafStateLM's balance term weighs each piece by the whole batch's expert counts
// (models/lm.h batch_counts): with one piece per process its forward finds them, and the
// processes add theirs before any backward (train_piece); with several, a forward of each
// piece without gradients finds them first.
void LmTask::before_pieces(const StepContext& ctx) {
  batch_totals_.clear();
  if (!whole_batch_counts(ctx.plan) || ctx.plan.last - ctx.plan.first <= 1) return;
  NoGradGuard no_grad;
  std::vector<double> mine(model_.batch_counts_size(), 0.0);
  const auto rows = static_cast<std::int64_t>(whole_.rows);
  for (std::int64_t k = ctx.plan.first; k < ctx.plan.last; ++k) {
    const std::int64_t begin = ctx.plan.piece_begin(k, rows), n = ctx.plan.piece_end(k, rows) - begin;
    if (n == 0) continue;
    const data::LmBatch b = slice_batch(whole_, static_cast<std::size_t>(begin), static_cast<std::size_t>(n));
    model_.forward(Tensor::from_vector(b.inputs, {n, block_}).to(ctx.device));
    const std::vector<double> counts = model_.batch_counts();
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] += counts[i];
  }
  batch_totals_ = summed_over_ranks(std::move(mine), ctx.comm);
}

Tensor LmTask::train_piece(std::int64_t k, const StepContext& ctx) {
  // The rows of piece k of the batch (an epoch's short last batch may leave a piece none).
  // Its loss is scaled by its share of the batch's predicted tokens, so that the pieces'
  // losses, and so their gradients, sum to the loss of the whole batch at once; a model's
  // auxiliary loss (a mean over rows, given the batch's counts) by its share of the rows.
  const auto rows = static_cast<std::int64_t>(whole_.rows);
  const std::int64_t begin = ctx.plan.piece_begin(k, rows), n = ctx.plan.piece_end(k, rows) - begin;
  const bool counts = whole_batch_counts(ctx.plan), several = ctx.plan.last - ctx.plan.first > 1;
  if (n == 0) {  // no rows: adds nothing to the gradient (nor to the counts)
    if (counts && !several) summed_over_ranks(std::vector<double>(model_.batch_counts_size()), ctx.comm);
    return {};
  }
  const data::LmBatch b = slice_batch(whole_, static_cast<std::size_t>(begin), static_cast<std::size_t>(n));
  const double share = static_cast<double>(b.predicted_tokens) / static_cast<double>(whole_.predicted_tokens);
  const double row_share = static_cast<double>(n) / static_cast<double>(rows);
  // The dropout masks one piece of the whole batch would draw for these rows.
  ctx.dropout.piece(begin, n, rows);
  // The head and the loss in one (the logits of the whole piece never exist at once).
  Tensor loss = model_.loss(Tensor::from_vector(b.inputs, {n, block_}).to(ctx.device),
                            Tensor::from_vector(b.targets, {n, block_}).to(ctx.device), data::kIgnoreTarget);
  if (counts) {
    if (!several) batch_totals_ = summed_over_ranks(model_.batch_counts(), ctx.comm);
    model_.use_batch_counts(batch_totals_);
  }
  // The logged loss is the cross-entropy; a model's auxiliary terms (SheafStateLM's
  // gluing energy and expert balance) join it only in the gradient.
  const Tensor aux = model_.auxiliary_loss();
  Tensor objective = share == 1.0 ? loss : loss * share;
  if (aux.defined()) objective = objective + (row_share == 1.0 ? aux : aux * row_share);
  objective.backward();
  return share == 1.0 ? loss.detach() : loss.detach() * share;
}

TaskEvaluation LmTask::evaluate(const EvalPoint& at) {
  const auto t0 = Clock::now();
  const EvalResult ev =
      tools::evaluate(model_, corpus_.valid, block_, batch_, corpus_.valid_probes, &dist::Communicator::world());
  // A validation perplexity above this is worse than guessing uniformly, by far: the run diverged.
  const double diverged_ppl = kDivergedPerplexityFactor * static_cast<double>(corpus_.vocab_size);
  if (!std::isfinite(ev.ppl) || ev.ppl > diverged_ppl)
    throw std::runtime_error(fmt::format(
        "train: the validation perplexity at step {} is {:.4g}, more than {} x the vocabulary size ({}): the run diverged; "
        "stopping. The last good checkpoint is {} — try a lower --lr",
        at.step, ev.ppl, kDivergedPerplexityFactor, corpus_.vocab_size, at.last_good));
  TaskEvaluation r;
  r.score = ev.ppl;
  r.metrics = {{"eval", "valid"}, {"ppl", ev.ppl}, {"nll", ev.nll}, {"tokens", ev.tokens}};
  for (const auto& [key, value] : ev.diagnostics.items()) r.metrics[key] = value;
  if (!ev.dependencies.is_null()) r.metrics["dependencies"] = ev.dependencies;
  r.lines.push_back(fmt::format("eval  step {:>6}  valid ppl {:.2f}  (nll {:.4f} over {} tokens, {:.1f}s)", at.step, ev.ppl,
                                ev.nll, ev.tokens, std::chrono::duration<double>(Clock::now() - t0).count()));
  if (!ev.diagnostics.empty()) r.lines.push_back(diagnostics_line(ev.diagnostics));
  if (!ev.dependencies.is_null()) r.lines.push_back("      " + dependency_summary(ev.dependencies));
  return r;
}

std::map<std::string, std::string> LmTask::checkpoint_metadata() const {
  return {{"model", model_.config().model}};
}

}  // namespace wedge::tools
