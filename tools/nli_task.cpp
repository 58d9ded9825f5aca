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

nlohmann::json report_json(const ClassificationReport& r) { return r.to_json(); }

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
  return {{"data_dir", data_dir}, {"vocab", vocab},   {"protocol", protocol}, {"train_pairs", train_pairs},
          {"epochs", epochs},     {"batch", batch},   {"lr", lr},             {"min_lr_ratio", min_lr_ratio},
          {"warmup", warmup},     {"weight_decay", weight_decay},             {"clip", clip},
          {"seed", seed},         {"device", device},   {"precision", precision},
          {"micro_batch", micro_batch}, {"deterministic", deterministic}, {"zero", zero}};
}

NliSettings NliSettings::from_json(const nlohmann::json& j) {
  NliSettings s;
  s.data_dir = json_field(j, "data_dir", s.data_dir);
  s.vocab = json_field(j, "vocab", s.vocab);
  s.protocol = json_field(j, "protocol", s.protocol);
  s.train_pairs = json_field(j, "train_pairs", s.train_pairs);
  s.epochs = json_field(j, "epochs", s.epochs);
  s.batch = json_field(j, "batch", s.batch);
  s.lr = json_field(j, "lr", s.lr);
  s.min_lr_ratio = json_field(j, "min_lr_ratio", s.min_lr_ratio);
  s.warmup = json_field(j, "warmup", s.warmup);
  s.weight_decay = json_field(j, "weight_decay", s.weight_decay);
  s.clip = json_field(j, "clip", s.clip);
  s.seed = json_field(j, "seed", s.seed);
  s.device = json_field(j, "device", s.device);
  s.precision = json_field(j, "precision", s.precision);  // runs from before mixed precision: fp32
  // runs from before data parallelism: one piece per process, no fixed order, no ZeRO
  s.micro_batch = json_field(j, "micro_batch", s.micro_batch);
  s.deterministic = json_field(j, "deterministic", s.deterministic);
  s.zero = json_field(j, "zero", s.zero);
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

NliResult train_nli(const models::NliConfig& config_in, const NliSettings& st) {
  if (st.out.empty()) throw std::runtime_error("train: --out RUNDIR is required");
  if (st.data_dir.empty()) throw std::runtime_error("--task nli needs --data-dir DIR (the SNLI folder)");
  const auto flag_name = [](const char* flag) { return std::string(flag); };
  check_train_settings({st.epochs, st.batch, st.lr, st.min_lr_ratio, st.warmup, st.weight_decay, st.clip, st.log_every, st.threads},
                       flag_name);
  check_data_parallel_settings(st.micro_batch, st.zero, st.comm_timeout, flag_name);
  if (st.train_pairs == 0 || st.train_pairs < -1)
    throw std::invalid_argument(fmt::format("--train-pairs is {}; it must be -1 (all) or at least 1", st.train_pairs));
  if (st.threads > 0) set_num_threads(st.threads);
  // Under mpirun: this process is one rank of a data-parallel run (tools/data_parallel.h),
  // each computing its pieces of every batch; otherwise the only one.
  const dist::Communicator& comm = dist::Communicator::world();
  if (st.comm_timeout >= 0) dist::Communicator::set_timeout(st.comm_timeout);
  const PiecePlan plan = PiecePlan::make(st.batch, st.micro_batch, st.deterministic, comm, "");
  share_cores_among_ranks(comm, st.threads);
  auto say = [&](const std::string& line) {
    if (!comm.is_root()) return;  // the other ranks print only errors
    std::FILE* f = st.json ? stderr : stdout;
    std::fputs((line + "\n").c_str(), f);
    std::fflush(f);
  };
  const std::string out = st.out;

  NliSettings settings = st;
  if (settings.vocab.empty()) settings.vocab = data::find_vocab_near(settings.data_dir).string();
  // Recorded as absolute paths, so eval and classify find them from any folder.
  for (std::string* path : {&settings.vocab, &settings.data_dir})
    if (!path->empty()) *path = fs::absolute(*path).lexically_normal().string();
  const TextCodec codec = wordpiece_codec(settings.vocab);
  const data::Tokenizer& tokenizer = *codec.tokenizer;
  models::NliConfig config = config_in;
  // --init-from: rank 0 reads the parent classifier and shares its config.json; its sizes
  // and vocabulary are the fine-tune's.
  std::optional<ParentRun> parent;
  if (!st.init_from.empty()) {
    std::string text;
    if (comm.is_root()) text = ParentRun::open(st.init_from, "nli").config.dump();
    comm.broadcast(text);
    parent = ParentRun::from(st.init_from, nlohmann::json::parse(text));
    const nlohmann::json model = parent->model_config(nlohmann::json(config_in), st.given);
    try {
      config = model.get<models::NliConfig>();
    } catch (const std::exception& e) {
      throw std::runtime_error("--init-from: cannot read " + parent->dir + "/config.json: " + e.what());
    }
    config.seed = config_in.seed;
    parent->check_vocabulary(codec, settings.vocab);
  }
  config.vocab_size = tokenizer.vocab().size();
  config.validate();
  const auto t_load = Clock::now();
  const NliSplits splits = load_nli_splits(settings, tokenizer, static_cast<std::size_t>(config.max_length));
  say("data: " + splits.description);
  say(fmt::format("data: {} pairs without a gold label skipped; {} pairs with a sentence cut to {} tokens ({:.1f}s)",
                  thousands(splits.skipped_unlabelled), thousands(splits.truncated), config.max_length,
                  std::chrono::duration<double>(Clock::now() - t_load).count()));

  const Device device = Device::parse(settings.device);
  choose_gpu_of_rank(comm, device);
  const MatmulPrecisionGuard precision_scope(parse_precision(settings.precision));
  models::check_model_memory(config, models::ModelUse::training);
  auto model = models::make_nli_model(config);
  model->to(device);
  model->train();
  NliResult result;
  result.protocol = splits.protocol;
  result.description = splits.description;
  result.parameters = model->num_parameters();
  result.train_pairs = static_cast<std::int64_t>(splits.train->size());
  say(fmt::format("model: nli classifier, {} head{}, {} layers, d {}, {} parameters, on {}, {}", config.head,
                  config.hypothesis_only ? " (hypothesis only)" : "", config.layers, config.d_model, result.parameters,
                  device.str(), precision_description(matmul_precision(), device)));

  const auto per_epoch = static_cast<std::int64_t>(splits.train->batches(static_cast<std::size_t>(settings.batch)));
  const std::int64_t total_steps = per_epoch * settings.epochs;
  Adam opt = make_adamw(*model, settings.lr, settings.weight_decay);
  // The gradient's way from the pieces of a batch over the ranks to the update.
  GradientSync sync(comm, model->named_parameters(), opt, settings.deterministic, settings.zero == 1);
  const LrSchedule sched = warmup_cosine(settings.lr, settings.warmup, total_steps, settings.min_lr_ratio);
  const std::int64_t warmup = sched.warmup_steps;

  // Rank 0 alone owns the run folder; the other ranks need no shared disk.
  std::optional<RunFolder> run;
  if (comm.is_root()) {
    run.emplace(RunFolder::create(out, st.overwrite, " (a classifier run cannot be resumed yet)"));
    nlohmann::json t = settings.to_json();
    t.update(vocab_record(codec));
    if (parent) {
      t["init_from"] = parent->load_weights(*model);
      say(fmt::format("init: the weights of {} (step {}); a fresh optimizer and schedule", parent->file(),
                      t["init_from"]["step"].get<std::int64_t>()));
    }
    run->begin(nlohmann::json{{"task", "nli"}, {"model", config}, {"train", t}}, codec.vocab_text);
  }
  auto save = [&](const std::string& name, std::int64_t epoch, double select_accuracy) {
    if (!run) return;
    run->save_checkpoint(name, parameter_map(*model),
                         {{"task", "nli"}, {"epoch", std::to_string(epoch)}, {"select_accuracy", fmt::format("{}", select_accuracy)}},
                         result.steps);
  };
  if (comm.distributed()) {
    // Every rank starts from rank 0's parameters (the same already, from the seed; sending
    // them rules out any difference).
    for (Tensor& t : model->parameters()) broadcast_tensor(comm, t);
    say(ranks_line(comm, settings.batch, device, sync, settings.zero == 1));
  }
  if (plan.pieces > comm.size() || settings.deterministic) say(pieces_line(plan, settings.deterministic));
  PieceDropout piece_dropout(&model->dropout_generator(), plan.pieces);
  say(fmt::format("training: {} epochs of {} steps, batch {}, lr {:.3g} (warm-up {}, cosine to {:.3g}), AdamW wd {:.3g}", settings.epochs,
                  per_epoch, settings.batch, settings.lr, warmup, sched.min_lr, settings.weight_decay));

  InterruptScope sigint;
  const auto t_start = Clock::now();
  double best_accuracy = -1, window_loss = 0;
  std::int64_t window_steps = 0;
  // The selection split's accuracy after `epoch` epochs; the best so far is kept.
  auto select_epoch = [&](std::int64_t epoch) {
    const NliEvaluation ev = evaluate_nli(*model, *splits.select, settings.batch, &comm);
    const bool best = ev.report.accuracy > best_accuracy;
    nlohmann::json line = report_json(ev.report);
    line["eval"] = "select";
    line["epoch"] = epoch;
    line["step"] = result.steps;
    line["loss"] = ev.loss;
    if (run) run->append_metrics(line);
    say(fmt::format("epoch {}  select {}{}", epoch, report_line(ev.report), best ? "  best" : ""));
    if (best) {
      best_accuracy = ev.report.accuracy;
      result.best_epoch = epoch;
      result.select = ev.report;
      save("best.safetensors", epoch, best_accuracy);
    }
    if (epoch > 0) save("last.safetensors", epoch, ev.report.accuracy);
  };
  // A fine-tune starts by scoring the parent's weights (epoch 0) on its selection split.
  if (parent) select_epoch(0);
  for (std::int64_t epoch = 0; epoch < settings.epochs && !result.interrupted; ++epoch) {
    const std::vector<std::uint32_t> order = splits.train->epoch_order(settings.seed, static_cast<std::uint64_t>(epoch));
    for (std::int64_t i = 0; i < per_epoch; ++i) {
      const data::SnliBatch b = splits.train->batch(order, static_cast<std::size_t>(i), static_cast<std::size_t>(settings.batch));
      const auto rows = static_cast<std::int64_t>(b.rows);
      // The whole batch on the host, padded to its widest pair; each piece takes its rows,
      // at that width, so that its dropout masks are the whole batch's (PieceDropout).
      const NliInputs whole = nli_inputs(b, config.hypothesis_only, Device::cpu());
      const double lr = sched.at(result.steps);
      opt.set_lr(lr);
      piece_dropout.begin_step();
      Tensor weighted_loss;  // this rank's pieces' mean losses, each weighted by its share of the rows
      auto run_piece = [&](std::int64_t k) {
        const std::int64_t begin = plan.piece_begin(k, rows), n = plan.piece_end(k, rows) - begin;
        if (n == 0) return;  // an epoch's short last batch: no rows, nothing to add
        piece_dropout.piece(begin, n, rows);
        const NliInputs in = rows_of(whole, begin, n, device);
        const Tensor loss = ops::cross_entropy(model->forward(in.ids, in.segments, in.mask), in.labels);
        const double share = static_cast<double>(n) / static_cast<double>(rows);
        (share == 1.0 ? loss : loss * share).backward();
        const Tensor part = share == 1.0 ? loss.detach() : loss.detach() * share;
        weighted_loss = weighted_loss.defined() ? weighted_loss + part : part;
      };
      const double norm = sync.accumulate(plan.first, plan.last, run_piece);
      // The batch's loss: every rank's weighted piece losses, summed.
      double value = weighted_loss.defined() ? weighted_loss.item() : 0.0;
      if (comm.distributed()) comm.all_reduce_sum(std::span<double>(&value, 1));
      if (!std::isfinite(value))
        throw std::runtime_error(fmt::format("train: the loss became {} at step {} (lr {:.3g}); stopping. The last good "
                                             "checkpoint is {} — try a lower --lr",
                                             value, result.steps + 1, lr,
                                             run ? run->last_good() : "rank 0's, in " + out));
      opt.step(clip_scale(norm, settings.clip));
      sync.share_updated_parameters();
      opt.zero_grad();
      piece_dropout.end_step(comm, rows < settings.batch);
      ++result.steps;
      window_loss += value;
      ++window_steps;
      if (result.steps % settings.log_every == 0 || i + 1 == per_epoch) {
        const double mean = window_loss / double(window_steps);
        if (run) run->append_metrics({{"step", result.steps}, {"epoch", epoch}, {"loss", mean}, {"lr", lr}});
        const double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
        say(fmt::format("step {:>6}/{}  epoch {}  loss {:.4f}  lr {:.2e}  ETA {}", result.steps, total_steps, epoch + 1, mean,
                        lr, fmt_duration(elapsed / double(result.steps) * double(total_steps - result.steps))));
        window_loss = 0;
        window_steps = 0;
      }
      // The ranks stop together: a Ctrl-C that reached one of them stops them all.
      if (on_any_rank(comm, interrupt_requested())) {
        save("last.safetensors", epoch, best_accuracy);
        say(fmt::format("interrupted at step {}: parameters written to {} (this task has no --resume yet)", result.steps,
                        out + "/last.safetensors"));
        result.interrupted = true;
        break;
      }
    }
    if (result.interrupted) break;
    select_epoch(epoch + 1);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (best_accuracy >= 0) {
    // Rank 0 reads the best checkpoint and sends its parameters to the others.
    if (run) load_parameters(*model, run->load_checkpoint("best.safetensors"), run->file("best.safetensors"));
    if (comm.distributed())
      for (Tensor& t : model->parameters()) broadcast_tensor(comm, t);
    result.test = evaluate_nli(*model, *splits.test, settings.batch, &comm).report;
    result.majority = majority_baseline(*splits.train, *splits.test);
    nlohmann::json test_line = report_json(result.test);
    test_line["eval"] = "test";
    test_line["epoch"] = result.best_epoch;
    test_line["step"] = result.steps;
    if (run) run->append_metrics(test_line);
    nlohmann::json majority_line = report_json(result.majority);
    majority_line["eval"] = "test_majority";
    majority_line["step"] = result.steps;
    if (run) run->append_metrics(majority_line);
    say(fmt::format("test (epoch {}): {}", result.best_epoch, report_line(result.test)));
    say(fmt::format("test, majority class: {}", report_line(result.majority)));
  }
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
  if (fs::exists(run_dir + "/" + kRunVocabFile)) {
    run_codec(run_dir, j.at("train"));
    r.settings.vocab = run_dir + "/" + kRunVocabFile;
  }
  const std::string path = run_dir + "/" + which + ".safetensors";
  models::check_model_memory(r.config, models::ModelUse::evaluation);
  r.model = models::make_nli_model(r.config);
  load_parameters(*r.model, load_safetensors(path), path);
  r.model->to(device);
  r.model->eval();
  return r;
}

}  // namespace wedge::tools
