#include "tools/nli_task.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>

#include <fmt/core.h>

#include "data/vocab.h"
#include "data/wikitext.h"
#include "engine/autograd.h"
#include "engine/json_field.h"
#include "engine/optim.h"
#include "engine/safetensors.h"
#include "engine/thread_pool.h"
#include "ops/ops.h"
#include "models/memory_check.h"
#include "tools/data_parallel.h"
#include "tools/run_continuation.h"
#include "tools/run_folder.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kSampleName = "snli_1.0_train_random1pct.jsonl";

std::optional<fs::path> find_train_sample(const fs::path& dir) {
  for (const fs::path& p : {dir / "partial" / kSampleName, dir / kSampleName}) {
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p;
  }
  return std::nullopt;
}

data::SnliFile slice(const data::SnliFile& file, std::size_t begin, std::size_t end) {
  data::SnliFile out;
  out.name = fmt::format("{} pairs [{}, {})", file.name, begin, end);
  out.examples.assign(file.examples.begin() + static_cast<std::ptrdiff_t>(begin),
                      file.examples.begin() + static_cast<std::ptrdiff_t>(end));
  return out;
}

std::string thousands(std::size_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string report_line(const ClassificationReport& r) {
  return fmt::format("accuracy {:.4f} [{:.4f}, {:.4f}]  macro-F1 {:.4f}  ({} of {})", r.accuracy, r.accuracy_low,
                     r.accuracy_high, r.macro_f1, r.correct, r.count);
}

// A vector's bytes at the end of `out`; read_bytes appends the values those bytes hold.
template <typename T> void append_bytes(std::string& out, const std::vector<T>& values) {
  if (!values.empty()) out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}
template <typename T> void read_bytes(std::string_view bytes, std::vector<T>& out) {
  const std::size_t n = bytes.size() / sizeof(T);
  if (n == 0) return;
  out.resize(out.size() + n);
  std::memcpy(out.data() + out.size() - n, bytes.data(), n * sizeof(T));
}

// Rows [first, first + count) of a batch's inputs (on the host), on `device`.
NliInputs rows_of(const NliInputs& whole, std::int64_t first, std::int64_t count, Device device) {
  const auto take = [&](const Tensor& t) {
    const Tensor rows = first == 0 && count == t.shape()[0] ? t : ops::narrow(t, 0, first, count).contiguous();
    return rows.to(device);
  };
  return {take(whole.ids), take(whole.segments), take(whole.mask), take(whole.labels)};
}

}  // namespace

nlohmann::json NliSettings::to_json() const {
  nlohmann::json j = {{"data_dir", data_dir},       {"vocab", vocab},      {"protocol", protocol},
                      {"train_pairs", train_pairs}, {"backbone", backbone}};
  write_loop_json(j);
  return j;
}

void NliSettings::read_json(const nlohmann::json& j) {
  read_loop_json(j);
  data_dir = json_field(j, "data_dir", data_dir);
  vocab = json_field(j, "vocab", vocab);
  protocol = json_field(j, "protocol", protocol);
  train_pairs = json_field(j, "train_pairs", train_pairs);
  backbone = json_field(j, "backbone", backbone);
}

NliSettings NliSettings::from_json(const nlohmann::json& j) {
  // Runs from before schedules, mixed precision and data parallelism: cosine, fp32, one
  // piece per process, no fixed order, no ZeRO (the defaults).
  NliSettings s;
  s.read_json(j);
  return s;
}

NliSplits load_nli_splits(const NliSettings& settings, const data::Tokenizer& tokenizer, std::size_t max_length) {
  if (settings.data_dir.empty()) throw std::runtime_error("--task nli needs --data-dir DIR (the SNLI folder)");
  const fs::path dir = settings.data_dir;
  const auto full = data::find_snli_file(dir, "train");
  const auto sample = find_train_sample(dir);
  NliSplits s;
  s.protocol = settings.protocol == "auto" ? (full ? "standard" : "reduced") : settings.protocol;
  if (s.protocol != "standard" && s.protocol != "reduced")
    throw std::runtime_error(fmt::format("--protocol '{}' is unknown (auto, standard or reduced)", settings.protocol));
  if (s.protocol == "standard" && !full)
    throw std::runtime_error(fmt::format("the standard protocol needs the full training split snli_1.0_train.jsonl in {}{}",
                                         dir.string(), sample ? "; only the 1 % sample is there: use --protocol reduced" : ""));
  if (s.protocol == "reduced" && !sample)
    throw std::runtime_error(fmt::format("the reduced protocol needs the 1 % training sample {} in {} or {}", kSampleName,
                                         (dir / "partial").string(), dir.string()));
  const data::SnliFile dev = data::load_snli_split(dir, "dev");
  const data::SnliFile test = data::load_snli_split(dir, "test");
  data::SnliFile train, select;
  if (s.protocol == "standard") {
    train = data::read_snli_file(*full);
    select = dev;
    s.skipped_unlabelled = train.unlabelled + dev.unlabelled + test.unlabelled;
    s.description = fmt::format("standard: train = {} ({} pairs), select = dev ({}), test = test ({})", full->filename().string(),
                                thousands(train.examples.size()), thousands(dev.examples.size()),
                                thousands(test.examples.size()));
  } else {
    const data::SnliFile part = data::read_snli_file(*sample);
    const std::size_t from_dev = std::min(kReducedTrainFromDev, dev.examples.size());
    train = part;
    train.examples.insert(train.examples.end(), dev.examples.begin(),
                          dev.examples.begin() + static_cast<std::ptrdiff_t>(from_dev));
    select = slice(dev, from_dev, dev.examples.size());
    s.skipped_unlabelled = part.unlabelled + dev.unlabelled + test.unlabelled;
    s.description = fmt::format(
        "reduced (only a 1 % sample of SNLI's training split is present): train = the sample ({}) + dev pairs [0, {}) = {} "
        "pairs, select = dev pairs [{}, {}) ({}), test = test ({})",
        thousands(part.examples.size()), thousands(from_dev), thousands(train.examples.size()), thousands(from_dev),
        thousands(dev.examples.size()), thousands(select.examples.size()), thousands(test.examples.size()));
  }
  if (settings.train_pairs > 0 && static_cast<std::size_t>(settings.train_pairs) < train.examples.size()) {
    // A seeded subset; smaller subsets are prefixes of larger ones (nested, for learning curves).
    const std::vector<std::uint32_t> order = data::seeded_permutation(train.examples.size(), settings.seed, 0x4e4c49);
    std::vector<data::SnliExample> kept;
    for (std::size_t i = 0; i < static_cast<std::size_t>(settings.train_pairs); ++i) kept.push_back(train.examples[order[i]]);
    train.examples = std::move(kept);
    s.description += fmt::format("; training on a seeded subset of {} pairs", thousands(train.examples.size()));
  }
  data::SnliOptions options;
  options.max_length = max_length;
  s.train = std::make_unique<data::SnliDataset>(train, tokenizer, options);
  s.select = std::make_unique<data::SnliDataset>(select, tokenizer, options);
  s.test = std::make_unique<data::SnliDataset>(test, tokenizer, options);
  s.truncated = s.train->truncated_count() + s.select->truncated_count() + s.test->truncated_count();
  return s;
}

NliInputs nli_inputs(const data::SnliBatch& b, bool hypothesis_only, Device device) {
  const auto rows = static_cast<std::int64_t>(b.rows);
  NliInputs in;
  std::vector<float> mask;
  std::vector<std::int32_t> segments;
  std::int64_t width = 0;
  if (hypothesis_only) {
    width = static_cast<std::int64_t>(b.hypothesis_width);
    in.ids = Tensor::from_vector(b.hypothesis_ids, {rows, width});
    mask.assign(b.hypothesis_mask.begin(), b.hypothesis_mask.end());
    segments.assign(b.hypothesis_mask.begin(), b.hypothesis_mask.end());  // segment 1 on every real token
  } else {
    width = static_cast<std::int64_t>(b.pair_width);
    in.ids = Tensor::from_vector(b.pair_ids, {rows, width});
    mask.assign(b.pair_mask.begin(), b.pair_mask.end());
    segments = b.pair_type_ids;
  }
  in.ids = in.ids.to(device);
  in.segments = Tensor::from_vector(segments, {rows, width}).to(device);
  in.mask = Tensor::from_vector(mask, {rows, width}).to(device);
  in.labels = Tensor::from_vector(b.labels, {rows}).to(device);
  return in;
}

NliEvaluation evaluate_nli(models::NliModel& model, const data::SnliDataset& dataset, std::int64_t batch,
                           const dist::Communicator* comm) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = module_device(model);
  const auto rows_per_batch = static_cast<std::size_t>(batch);
  const std::size_t batches = (dataset.size() + rows_per_batch - 1) / rows_per_batch;
  // This rank's batches: the same batches one process evaluates, so the same logits.
  const bool split = comm != nullptr && comm->distributed();
  const auto ranks = static_cast<std::size_t>(split ? comm->size() : 1), me = static_cast<std::size_t>(split ? comm->rank() : 0);
  std::vector<double> batch_losses;  // each batch's summed cross-entropy
  std::vector<std::int32_t> predicted;
  for (std::size_t k = me * batches / ranks; k < (me + 1) * batches / ranks; ++k) {
    std::vector<std::uint32_t> ids;
    for (std::size_t i = k * rows_per_batch; i < std::min(dataset.size(), (k + 1) * rows_per_batch); ++i)
      ids.push_back(static_cast<std::uint32_t>(i));
    const data::SnliBatch b = dataset.make_batch(ids);
    const NliInputs in = nli_inputs(b, model.config().hypothesis_only, device);
    const Tensor logits = model.forward(in.ids, in.segments, in.mask);
    batch_losses.push_back(ops::cross_entropy(logits, in.labels).item() * double(b.rows));
    const std::vector<float> host = logits.to(Device::cpu()).to(DType::F32).to_vector<float>();
    for (std::size_t r = 0; r < b.rows; ++r) {
      const float* row = host.data() + r * models::kNliClasses;
      predicted.push_back(static_cast<std::int32_t>(std::max_element(row, row + models::kNliClasses) - row));
    }
  }
  model.train(was_training);
  NliEvaluation ev;
  if (split) {
    // Every rank's batch losses, then its predictions, in rank (= batch) order. A rank may
    // have no batches (more ranks than batches): empty vectors, no bytes.
    std::string mine;
    append_bytes(mine, batch_losses);
    append_bytes(mine, predicted);
    batch_losses.clear();
    std::size_t rank = 0;
    for (const std::string& part : comm->all_gather(mine)) {
      const std::size_t their_batches = (rank + 1) * batches / ranks - rank * batches / ranks;
      const std::size_t loss_bytes = their_batches * sizeof(double);
      read_bytes(std::string_view(part).substr(0, loss_bytes), batch_losses);
      read_bytes(std::string_view(part).substr(loss_bytes), ev.predicted);
      ++rank;
    }
  } else {
    ev.predicted = std::move(predicted);
  }
  double loss_sum = 0;  // in batch order, as one process adds
  for (const double l : batch_losses) loss_sum += l;
  std::vector<std::int32_t> gold;
  for (std::size_t i = 0; i < dataset.size(); ++i) gold.push_back(dataset[i].label);
  ev.report = classification_report(gold, ev.predicted, static_cast<int>(models::kNliClasses));
  ev.loss = loss_sum / double(dataset.size());
  return ev;
}

ClassificationReport majority_baseline(const data::SnliDataset& train, const data::SnliDataset& test) {
  std::array<std::size_t, models::kNliClasses> counts{};
  for (std::size_t i = 0; i < train.size(); ++i) ++counts[static_cast<std::size_t>(train[i].label)];
  const auto majority = static_cast<std::int32_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
  std::vector<std::int32_t> gold, predicted(test.size(), majority);
  for (std::size_t i = 0; i < test.size(); ++i) gold.push_back(test[i].label);
  return classification_report(gold, predicted, static_cast<int>(models::kNliClasses));
}

namespace {

// The sentence-pair classifier as a training task (tools/training_loop.h): batches of pairs
// in an order drawn from the seed per epoch, cross-entropy over the three labels, and the
// selection split's accuracy as the score, higher being better.
class NliTask final : public TrainingTask {
 public:
  NliTask(models::NliModel& model, const NliSplits& splits, const NliSettings& st, bool hypothesis_only)
      : model_(model), splits_(splits), batch_(st.batch), seed_(st.seed), hypothesis_only_(hypothesis_only) {}

  Module& model() override { return model_; }
  Generator* dropout_generator() override { return &model_.dropout_generator(); }
  std::int64_t steps_per_epoch() const override {
    return static_cast<std::int64_t>(splits_.train->batches(static_cast<std::size_t>(batch_)));
  }
  std::string batch_description() const override { return fmt::format("{} pairs", batch_); }

  Batch load_batch(std::int64_t epoch, std::int64_t index) override {
    if (epoch != order_epoch_) {
      order_ = splits_.train->epoch_order(seed_, static_cast<std::uint64_t>(epoch));
      order_epoch_ = epoch;
    }
    const data::SnliBatch b = splits_.train->batch(order_, static_cast<std::size_t>(index), static_cast<std::size_t>(batch_));
    // The whole batch on the host, padded to its widest pair; each piece takes its rows, at
    // that width, so that its dropout masks are the whole batch's (PieceDropout).
    whole_ = nli_inputs(b, hypothesis_only_, Device::cpu());
    rows_ = static_cast<std::int64_t>(b.rows);
    return {rows_, whole_.ids.numel()};
  }

  Tensor train_piece(std::int64_t k, const StepContext& ctx) override {
    const std::int64_t begin = ctx.plan.piece_begin(k, rows_), n = ctx.plan.piece_end(k, rows_) - begin;
    if (n == 0) return {};  // an epoch's short last batch: no rows, nothing to add
    ctx.dropout.piece(begin, n, rows_);
    const NliInputs in = rows_of(whole_, begin, n, ctx.device);
    const Tensor loss = ops::cross_entropy(model_.forward(in.ids, in.segments, in.mask), in.labels);
    // Weighted by the piece's share of the rows, the pieces' losses sum to the batch's.
    const double share = static_cast<double>(n) / static_cast<double>(rows_);
    (share == 1.0 ? loss : loss * share).backward();
    return share == 1.0 ? loss.detach() : loss.detach() * share;
  }

  TaskEvaluation evaluate(const EvalPoint& at) override {
    const NliEvaluation ev = evaluate_nli(model_, *splits_.select, batch_, &dist::Communicator::world());
    const std::int64_t epochs_done = at.step / steps_per_epoch();
    reports_[at.step] = ev.report;
    TaskEvaluation r;
    r.score = ev.report.accuracy;
    r.metrics = ev.report.to_json();
    r.metrics["eval"] = "select";
    r.metrics["epoch"] = epochs_done;
    r.metrics["loss"] = ev.loss;
    const bool epoch_end = at.step % steps_per_epoch() == 0;
    r.lines.push_back(fmt::format("{}  select {}", epoch_end ? fmt::format("epoch {}", epochs_done) : fmt::format("step {}", at.step),
                                  report_line(ev.report)));
    return r;
  }
  bool higher_is_better() const override { return true; }
  std::string best_score_key() const override { return "best_select_accuracy"; }
  std::map<std::string, std::string> checkpoint_metadata() const override { return {{"task", "nli"}}; }

  // The selection report of the evaluation after `step` steps, when this invocation made it.
  const ClassificationReport* report_at(std::int64_t step) const {
    const auto it = reports_.find(step);
    return it == reports_.end() ? nullptr : &it->second;
  }

 private:
  models::NliModel& model_;
  const NliSplits& splits_;
  std::int64_t batch_;
  std::uint64_t seed_;
  bool hypothesis_only_;
  std::int64_t order_epoch_ = -1, rows_ = 0;
  std::vector<std::uint32_t> order_;
  NliInputs whole_;
  std::map<std::int64_t, ClassificationReport> reports_;
};

// The sha256 of each split's token ids and labels, pair by pair: what config.json records
// of the data a classifier trained on and was selected with.
nlohmann::json nli_fingerprint(const NliSplits& splits) {
  auto sha = [](const data::SnliDataset& d) {
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < d.size(); ++i) {
      const data::SnliEncoded& e = d[i];
      ids.insert(ids.end(), e.premise.begin(), e.premise.end());
      ids.insert(ids.end(), e.hypothesis.begin(), e.hypothesis.end());
      ids.push_back(-1 - e.label);  // labels as negative numbers: never a token id
    }
    return token_ids_sha256(ids);
  };
  return {{"train", sha(*splits.train)}, {"select", sha(*splits.select)}};
}

// A resumed classifier is the same run: its config.json wins (tools/training_loop.h).
NliSettings adopt_recorded_settings(const TrainingLoop& loop, const NliSettings& given, const models::NliConfig& given_model) {
  loop.refuse_changed(nlohmann::json{{"model", given_model}, {"train", given.to_json()}});
  NliSettings st = NliSettings::from_json(loop.recorded().at("train"));
  if (given.given.count("--data-dir") > 0) st.data_dir = given.data_dir;
  TrainingLoop::keep_invocation_settings(st, given);
  st.given = given.given;
  st.validate(loop.config_path());
  return st;
}

// The best checkpoint on the test split, beside the majority class; into `result` and metrics.jsonl.
void report_test(TrainingLoop& loop, models::NliModel& model, const NliSplits& splits, const NliSettings& st,
                 const NliTask& task, std::int64_t best_step, NliResult& result) {
  // Rank 0 reads the best checkpoint and sends its parameters to the others.
  if (RunFolder* run = loop.folder()) load_parameters(model, run->load_checkpoint("best.safetensors"), run->file("best.safetensors"));
  if (loop.comm().distributed())
    for (Tensor& t : model.parameters()) broadcast_tensor(loop.comm(), t);
  const ClassificationReport* select = task.report_at(best_step);
  result.select = select != nullptr ? *select : evaluate_nli(model, *splits.select, st.batch, &loop.comm()).report;
  result.test = evaluate_nli(model, *splits.test, st.batch, &loop.comm()).report;
  result.majority = majority_baseline(*splits.train, *splits.test);
  nlohmann::json test_line = result.test.to_json();
  test_line.update({{"eval", "test"}, {"epoch", result.best_epoch}, {"step", result.steps}});
  nlohmann::json majority_line = result.majority.to_json();
  majority_line.update({{"eval", "test_majority"}, {"step", result.steps}});
  if (RunFolder* run = loop.folder()) {
    run->append_metrics(test_line);
    run->append_metrics(majority_line);
  }
  loop.say(fmt::format("test (epoch {}): {}", result.best_epoch, report_line(result.test)));
  loop.say(fmt::format("test, majority class: {}", report_line(result.majority)));
}

// The backbone a classifier run recorded in config.json ("backbone_weights"): that
// checkpoint again, refused when its sha256 changed.
std::shared_ptr<models::LanguageModel> open_recorded_backbone(const nlohmann::json& recorded, const std::string& run_dir,
                                                              const TextCodec& codec, const std::string& vocab_name, Device device,
                                                              const dist::Communicator* comm, nlohmann::json& record) {
  auto model = open_backbone(recorded.at("run").get<std::string>() + ":" + recorded.at("checkpoint").get<std::string>(), codec,
                             vocab_name, device, comm, record);
  if (record.at("sha256") != recorded.at("sha256"))
    throw std::runtime_error(fmt::format("the backbone {} of {} changed since the classifier was trained (its sha256 differs "
                                         "from {}/config.json: train.backbone_weights.sha256)",
                                         record.at("file").get<std::string>(), run_dir, run_dir));
  return model;
}

// --backbone: the language model whose token states replace the token table (null without
// one); sets config.backbone_d to its width. A resumed run reads the checkpoint it began
// with; a fine-tune keeps its parent's kind of input.
std::shared_ptr<models::LanguageModel> run_backbone(const TrainingLoop& loop, const NliSettings& st, const TextCodec& codec,
                                                    Device device, models::NliConfig& config, nlohmann::json& record) {
  if (st.backbone.empty()) {
    if (config.backbone_d == 0) return nullptr;
    throw std::invalid_argument(
        loop.parent() != nullptr
            ? fmt::format("--init-from {}: that classifier reads the token states of a backbone language model; give it with "
                          "--backbone RUN",
                          st.init_from)
            : fmt::format("model.backbone_d is {}: a classifier that reads a backbone's token states needs --backbone RUN",
                          config.backbone_d));
  }
  const nlohmann::json recorded = st.resume ? loop.recorded().at("train").value("backbone_weights", nlohmann::json()) : nlohmann::json();
  auto backbone = recorded.is_object() ? open_recorded_backbone(recorded, st.out, codec, st.vocab, device, &loop.comm(), record)
                                       : open_backbone(st.backbone, codec, st.vocab, device, &loop.comm(), record);
  if (loop.parent() != nullptr && config.backbone_d != backbone->config().d_model)
    throw std::invalid_argument(fmt::format("--backbone {}: {} reads {}; a run started from another keeps its inputs", st.backbone,
                                            loop.parent()->dir,
                                            config.backbone_d > 0 ? fmt::format("token states {} wide", config.backbone_d)
                                                                  : std::string("a token table of its own")));
  config.backbone_d = backbone->config().d_model;
  return backbone;
}

}  // namespace

std::shared_ptr<models::LanguageModel> open_backbone(const std::string& arg, const TextCodec& codec,
                                                     const std::string& vocab_name, Device device,
                                                     const dist::Communicator* comm, nlohmann::json& record) {
  const bool root = comm == nullptr || comm->is_root();
  std::string text;
  if (root) text = ParentRun::open(arg, "lm", "--backbone").config.dump();
  if (comm != nullptr) comm->broadcast(text);
  const ParentRun run = ParentRun::from(arg, nlohmann::json::parse(text), "--backbone");
  run.check_vocabulary(codec, vocab_name);
  models::LMConfig config;
  try {
    config = run.config.at("model").get<models::LMConfig>();
    config.validate();
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--backbone {}: cannot read {}/config.json: {}", arg, run.dir, e.what()));
  }
  models::check_model_memory(config, models::ModelUse::evaluation);
  std::shared_ptr<models::LanguageModel> model = models::make_model(config);
  if (root) record = run.load_weights(*model);
  if (comm != nullptr && comm->distributed()) {
    for (Tensor& t : model->parameters()) broadcast_tensor(*comm, t);
    std::string r = record.dump();
    comm->broadcast(r);
    record = nlohmann::json::parse(r);
  }
  model->to(device);
  model->eval();
  return model;
}

void NliSettings::validate(const std::string& config_file) const {
  validate_loop(config_file);
  if (data_dir.empty() && !resume) throw std::invalid_argument("--task nli needs --data-dir DIR (the SNLI folder)");
  if (train_pairs == 0 || train_pairs < -1)
    throw std::invalid_argument(fmt::format("{} is {}; it must be -1 (all) or at least 1",
                                            setting_name(config_file, "--train-pairs"), train_pairs));
}

NliResult train_nli(const models::NliConfig& config_in, const NliSettings& given) {
  given.validate("");
  TrainingLoop loop(given, "nli");
  NliSettings st = given.resume ? adopt_recorded_settings(loop, given, config_in) : given;
  if (st.vocab.empty()) st.vocab = data::find_vocab_near(st.data_dir).string();
  // Recorded as absolute paths, so eval and classify find them from any folder.
  for (std::string* path : {&st.vocab, &st.data_dir})
    if (!path->empty()) *path = fs::absolute(*path).lexically_normal().string();
  // A resumed run reads text through its own copy of the vocabulary.
  const TextCodec codec = st.resume ? run_codec(st.out, loop.recorded().at("train")) : wordpiece_codec(st.vocab);
  models::NliConfig config = loop.model_config(config_in);
  if (loop.parent() != nullptr) config.seed = config_in.seed;  // a fine-tune's own seed
  if (loop.parent() != nullptr) loop.parent()->check_vocabulary(codec, st.vocab);
  config.vocab_size = codec.tokenizer->vocab().size();
  const Device device = Device::parse(st.device);
  choose_gpu_of_rank(loop.comm(), device);
  nlohmann::json backbone_record;
  const std::shared_ptr<models::LanguageModel> backbone = run_backbone(loop, st, codec, device, config, backbone_record);
  config.validate();
  const auto t_load = Clock::now();
  const NliSplits splits = load_nli_splits(st, *codec.tokenizer, static_cast<std::size_t>(config.max_length));
  const nlohmann::json fingerprint = nli_fingerprint(splits);
  if (st.resume)
    check_same_data(loop.recorded().at("train"), fingerprint,
                    [&](const std::string& split) {
                      return fmt::format("{} pairs of {}", (split == "train" ? splits.train : splits.select)->size(), st.data_dir);
                    },
                    loop.config_path(), st.out);
  loop.say("data: " + splits.description);
  loop.say(fmt::format("data: {} pairs without a gold label skipped; {} pairs with a sentence cut to {} tokens ({:.1f}s)",
                       thousands(splits.skipped_unlabelled), thousands(splits.truncated), config.max_length,
                       std::chrono::duration<double>(Clock::now() - t_load).count()));

  const MatmulPrecisionGuard precision_scope(parse_precision(st.precision));
  models::check_model_memory(config, models::ModelUse::training);
  auto model = models::make_nli_model(config);
  model->to(device);
  model->train();
  if (backbone) {
    model->attach_backbone(backbone);
    loop.say(fmt::format("backbone: {} ({} - {} layers, d {}, step {}), frozen: the heads read its token states",
                         backbone_record.at("file").get<std::string>(), backbone->config().model, backbone->config().layers,
                         backbone->config().d_model, backbone_record.at("step").get<std::int64_t>()));
  }
  NliResult result;
  result.protocol = splits.protocol;
  result.description = splits.description;
  result.parameters = model->num_parameters();
  result.train_pairs = static_cast<std::int64_t>(splits.train->size());
  loop.say(fmt::format("model: nli classifier, {} head{}, {} layers, d {}, {} parameters, on {}, {}", config.head,
                       config.hypothesis_only ? " (hypothesis only)" : "", config.layers, config.d_model, result.parameters,
                       device.str(), precision_description(matmul_precision(), device)));

  NliTask task(*model, splits, st, config.hypothesis_only);
  nlohmann::json t = st.to_json();
  t.update(vocab_record(codec));
  t["data_sha256"] = fingerprint;
  if (backbone) t["backbone_weights"] = backbone_record;
  const auto t_start = Clock::now();
  const LoopResult r = loop.run(task, st, nlohmann::json{{"task", "nli"}, {"model", config}, {"train", t}}, codec.vocab_text);
  result.steps = r.steps;
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  result.interrupted = r.interrupted;
  result.already_finished = r.already_finished;
  if (r.best_step >= 0) result.best_epoch = r.best_step / task.steps_per_epoch();
  // The test split is scored once, when the run has done all its steps.
  if (!r.interrupted && !r.already_finished && r.best_step >= 0) report_test(loop, *model, splits, st, task, r.best_step, result);
  return result;
}

bool is_nli_run(const std::string& run_dir) {
  std::ifstream in(run_dir + "/config.json");
  if (!in) return false;
  try {
    return nlohmann::json::parse(in).value("task", std::string()) == "nli";
  } catch (const std::exception&) {
    return false;
  }
}

LoadedNliRun load_nli_run(const std::string& run_dir, const std::string& which, Device device) {
  const std::string config_path = run_dir + "/config.json";
  const nlohmann::json j = read_json_file(config_path);
  LoadedNliRun r;
  try {
    r.config = j.at("model").get<models::NliConfig>();
    r.settings = NliSettings::from_json(j.at("train"));
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read " + config_path + ": " + e.what());
  }
  // The run's own copy of its vocabulary (checked against its sha256), when it keeps one.
  std::optional<TextCodec> codec;
  if (fs::exists(run_dir + "/" + kRunVocabFile)) {
    codec = run_codec(run_dir, j.at("train"));
    r.settings.vocab = run_dir + "/" + kRunVocabFile;
  }
  const std::string path = run_dir + "/" + which + ".safetensors";
  models::check_model_memory(r.config, models::ModelUse::evaluation);
  r.model = models::make_nli_model(r.config);
  load_parameters(*r.model, load_safetensors(path), path);
  r.model->to(device);
  r.model->eval();
  if (r.config.backbone_d > 0) {
    // The backbone it was trained on: the same checkpoint, by its sha256.
    const nlohmann::json recorded = j.at("train").value("backbone_weights", nlohmann::json());
    if (!recorded.is_object() || !codec)
      throw std::runtime_error(config_path + ": the classifier reads a backbone's token states, but train.backbone_weights "
                                             "or the run's vocab.txt is missing");
    nlohmann::json now;
    r.model->attach_backbone(open_recorded_backbone(recorded, run_dir, *codec, r.settings.vocab, device, nullptr, now));
  }
  return r;
}

}  // namespace wedge::tools
