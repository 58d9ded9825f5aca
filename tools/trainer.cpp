#include "tools/trainer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/autograd.h"
#include "engine/cuda_allocator.h"
#include "engine/distributed.h"
#include "engine/json_field.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "data/wikitext.h"
#include "models/memory_check.h"
#include "models/sheaf.h"
#include "models/tied_embedding_lm.h"
#include "ops/ops.h"
#include "tools/data_parallel.h"
#include "tools/run_continuation.h"
#include "tools/run_folder.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

Generator* dropout_generator(models::LanguageModel& m) {
  if (auto* t = dynamic_cast<models::TiedEmbeddingLM*>(&m)) return &t->dropout_generator();
  return nullptr;
}

}  // namespace

nlohmann::json TrainSettings::to_json() const {
  nlohmann::json j = {{"epochs", epochs},
          {"batch", batch},
          {"block", block},
          {"lr", lr},
          {"schedule", schedule},
          {"min_lr_ratio", min_lr_ratio},
          {"min_lr", min_lr},
          {"warmup", warmup},
          {"weight_decay", weight_decay},
          {"clip", clip},
          {"seed", seed},
          {"max_steps", max_steps},
          {"micro_batch", micro_batch},
          {"deterministic", deterministic},
          {"eval_every", eval_every},
          {"device", device},
          {"precision", precision}};
  corpus.write_to(j);
  return j;
}

void TrainSettings::read_json(const nlohmann::json& t) {
  if (t.contains("data")) corpus = CorpusSpec::read_from(t);
  epochs = json_field(t, "epochs", epochs);
  batch = json_field(t, "batch", batch);
  block = json_field(t, "block", block);
  lr = json_field(t, "lr", lr);
  schedule = json_field(t, "schedule", schedule);
  min_lr_ratio = json_field(t, "min_lr_ratio", min_lr_ratio);
  min_lr = json_field(t, "min_lr", min_lr);
  warmup = json_field(t, "warmup", warmup);
  weight_decay = json_field(t, "weight_decay", weight_decay);
  clip = json_field(t, "clip", clip);
  seed = json_field(t, "seed", seed);
  max_steps = json_field(t, "max_steps", max_steps);
  micro_batch = json_field(t, "micro_batch", micro_batch);
  deterministic = json_field(t, "deterministic", deterministic);
  eval_every = json_field(t, "eval_every", eval_every);
  device = json_field(t, "device", device);
  precision = json_field(t, "precision", precision);
}

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
    Tensor logits = model.forward(Tensor::from_vector(b.inputs, {rows, L}).to(device));
    Tensor loss = ops::cross_entropy(ops::reshape(logits, {rows * L, -1}),
                                     Tensor::from_vector(b.targets, {rows * L}).to(device), data::kIgnoreTarget);
    nll_sum += loss.item() * static_cast<double>(b.predicted_tokens);
    if (!probes.empty()) score_probes(b, logits, probes, sheaf, tally, gluing);
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

// ---- training -------------------------------------------------------------------------------------

namespace {

// A resumed run is the same run: its config.json wins. A flag given now must name the run's
// own value (tools/run_continuation.h), except where the data files moved (--data-dir,
// --vocab: the token ids are checked once read), the length (--epochs, --max-steps: checked
// once the step is known), and what does not change the training's arithmetic.
void adopt_recorded_settings(TrainSettings& st, const nlohmann::json& j, const TrainSettings& given,
                             const models::LMConfig& given_model, const std::string& config_path) {
  static const std::set<std::string> free = {"--data-dir", "--vocab",  "--epochs", "--max-steps", "--eval-every",
                                             "--device",   "--threads", "--log-every", "--stop-after", "--comm-timeout"};
  const nlohmann::json wanted{{"model", given_model}, {"train", given.to_json()}};
  const std::string hint = fmt::format(
      "; a resumed run keeps its settings (only --epochs and --max-steps may make it longer). To train with other "
      "settings, start a new run from its weights: `wedge train --init-from {} --out NEW ...`",
      given.out);
  for (const char* section : {"model", "train"})
    refuse_changed_flags(given.given, free, wanted, j, section, config_path, "train --resume", hint);
  const nlohmann::json& t = j.at("train");
  // What a run recorded before these settings existed: runs before schedules were chosen
  // were cosine, before mixed precision fp32, before micro-batches one piece per process.
  st.schedule = "cosine";
  st.min_lr = -1;
  st.precision = "fp32";
  st.micro_batch = 0;
  st.deterministic = false;
  st.read_json(t);
  st.corpus = CorpusSpec::read_from(t);
  if (!given.corpus.data_dir.empty()) st.corpus.data_dir = given.corpus.data_dir;
  if (!given.corpus.vocab.empty()) st.corpus.vocab = given.corpus.vocab;
  // The length and the evaluation cadence as given now, if given.
  if (given.given.count("--epochs") > 0) st.epochs = given.epochs;
  if (given.given.count("--max-steps") > 0) st.max_steps = given.max_steps;
  if (given.given.count("--eval-every") > 0) st.eval_every = given.eval_every;
  st.device = given.device;  // where it runs now
}

// The steps a run of these settings takes: its epochs, or --max-steps when given.
std::int64_t planned_steps(std::int64_t per_epoch, std::int64_t epochs, std::int64_t max_steps) {
  return max_steps >= 0 ? max_steps : per_epoch * std::max<std::int64_t>(epochs, 1);
}

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

}  // namespace

void TrainSettings::validate(const std::string& config_file) const {
  // Each setting is named as the user gave it: a flag, or a field of a resumed run's config.
  auto name = [&](const char* flag) {
    return config_file.empty() ? std::string(flag) : fmt::format("{}: train.{}", config_file, flag + 2);
  };
  auto bad = [&](const char* flag, const std::string& allowed, std::int64_t value) {
    throw std::invalid_argument(fmt::format("{} is {}; it must be {}", name(flag), value, allowed));
  };
  if (out.empty()) throw std::invalid_argument("train: --out RUNDIR is required");
  check_train_settings({epochs, batch, lr, min_lr_ratio, warmup, weight_decay, clip, log_every, threads}, name);
  if (block < 2) bad("--block", "at least 2", block);
  if (max_steps == 0 || max_steps < -1) bad("--max-steps", "-1 (no limit) or at least 1", max_steps);
  if (eval_every == 0 || eval_every < -1) bad("--eval-every", "-1 (at epoch ends only) or at least 1", eval_every);
  if (stop_after == 0 || stop_after < -1) bad("--stop-after", "-1 (no limit) or at least 1", stop_after);
  check_data_parallel_settings(micro_batch, zero, comm_timeout, name);
  if (schedule != "cosine" && schedule != "linear" && schedule != "constant" && schedule != "inverse-sqrt")
    throw std::invalid_argument(
        fmt::format("{} is '{}'; it must be cosine, linear, constant or inverse-sqrt", name("--schedule"), schedule));
  if (min_lr != -1 && (!std::isfinite(min_lr) || min_lr < 0 || min_lr > lr))
    throw std::invalid_argument(fmt::format("{} is {}; it must be -1 (lr x --min-lr-ratio) or in [0, --lr {}]",
                                            name("--min-lr"), min_lr, lr));
  if (resume && !init_from.empty()) throw std::invalid_argument("--init-from starts a new run; it cannot be --resume'd into one");
  if (precision != "fp32" && precision != "bf16")
    throw std::invalid_argument(fmt::format("{} is '{}'; it must be fp32 or bf16", name("--precision"), precision));
}

TrainResult train(const models::LMConfig& config_in, const TrainSettings& settings_in) {
  TrainSettings st = settings_in;
  st.validate("");
  if (st.threads > 0) set_num_threads(st.threads);
  const std::string out = st.out;
  // Under mpirun: this process is one rank of a data-parallel run; otherwise the only one.
  const dist::Communicator& comm = dist::Communicator::world();
  if (st.comm_timeout >= 0) dist::Communicator::set_timeout(st.comm_timeout);
  // How each batch is cut into pieces and shared among the ranks (checked before the run
  // folder is made; a resumed run's own settings are checked again once read).
  PiecePlan plan = PiecePlan::make(st.batch, st.micro_batch, st.deterministic, comm, "");
  share_cores_among_ranks(comm, st.threads);

  models::LMConfig config = config_in;
  nlohmann::json recorded;  // a resumed run's config.json
  // Rank 0 alone owns the run folder (its lock, config, metrics and checkpoints); the other
  // ranks learn a resumed run's config and state from rank 0, so they need no shared disk.
  std::optional<RunFolder> run;
  if (comm.is_root())
    run.emplace(st.resume ? RunFolder::resume(out)
                          : RunFolder::create(out, st.overwrite, ", or continue it with `wedge train --resume --out " + out + "`"));
  const std::string config_path = out + "/config.json";
  if (st.resume) {
    std::string text = run ? run->read_config().dump() : std::string();
    comm.broadcast(text);
    recorded = nlohmann::json::parse(text);
    try {
      config = recorded.at("model").get<models::LMConfig>();
      (void)recorded.at("train");
    } catch (const std::exception& e) {
      throw std::runtime_error("train --resume: cannot read " + config_path + ": " + e.what());
    }
    adopt_recorded_settings(st, recorded, settings_in, config_in, config_path);
    st.validate(config_path);
    plan = PiecePlan::make(st.batch, st.micro_batch, st.deterministic, comm, config_path);
  }
  // --init-from: rank 0 reads the parent run and shares its config.json (its checkpoint
  // reaches the other ranks with the first broadcast of the parameters).
  std::optional<ParentRun> parent;
  if (!st.init_from.empty()) {
    std::string text;
    if (comm.is_root()) text = ParentRun::open(st.init_from).config.dump();
    comm.broadcast(text);
    parent = ParentRun::from(st.init_from, nlohmann::json::parse(text));
    const nlohmann::json model = parent->model_config(config_in, settings_in.given);
    try {
      config = model.get<models::LMConfig>();
    } catch (const std::exception& e) {
      throw std::runtime_error("--init-from: cannot read " + parent->dir + "/config.json: " + e.what());
    }
  }
  if (st.corpus.data == "synthetic") st.corpus.data.clear();
  st.corpus.seed = st.seed;
  st.corpus.block = st.block;

  auto say = [&](const std::string& line) {
    if (!comm.is_root()) return;  // the other ranks print only errors
    std::FILE* f = st.json ? stderr : stdout;
    std::fputs((line + "\n").c_str(), f);
    std::fflush(f);
  };

  const auto t_load = Clock::now();
  Corpus corpus = load_corpus(st.corpus);
  config.vocab_size = corpus.vocab_size;
  if (!st.resume) {
    if (!parent) config.block = std::max(config.block, st.block);  // a parent's position table is what it is
    config.seed = st.seed;
  }
  if (parent) parent->check_vocabulary(corpus.codec, corpus.name);
  if (st.resume) check_same_data(recorded.at("train"), corpus, config_path, out);
  if (st.block > config.block)
    throw std::runtime_error(fmt::format("train: --block {} exceeds the model's position table ({})", st.block, config.block));
  try {
    config.validate();
  } catch (const std::invalid_argument& e) {
    if (!st.resume) throw;
    throw std::invalid_argument(config_path + ": " + e.what());
  }
  if (corpus.valid.size() < 2)
    throw std::runtime_error(fmt::format("train: the validation split of {} holds {} tokens; at least 2 are needed to measure "
                                         "a perplexity",
                                         corpus.name, corpus.valid.size()));
  say(fmt::format("data: {} - {} train / {} valid tokens, vocabulary {} ({:.1f}s)", corpus.name, corpus.train.size(),
                  corpus.valid.size(), corpus.vocab_size, std::chrono::duration<double>(Clock::now() - t_load).count()));
  for (const std::string& note : corpus.notes) say("data: " + note);

  const Device device = Device::parse(st.device);
  choose_gpu_of_rank(comm, device);
  // Every product of the run (training and evaluation) in the run's precision.
  const Precision precision = parse_precision(st.precision);
  const MatmulPrecisionGuard precision_scope(precision);
  models::check_model_memory(config, models::ModelUse::training);
  auto model = models::make_model(config);
  model->to(device);
  model->train();
  const std::int64_t n_params = model->num_parameters();
  // SheafStateLM has no feed-forward of width d_ff: its experts' width is expert_d_ff.
  const std::string ff = config.model == "sheaf" ? fmt::format("{} experts of d_ff {}", config.types, config.expert_d_ff)
                                                 : fmt::format("d_ff {}", config.d_ff);
  say(fmt::format("model: {} - {} layers, d {}, {}, {} parameters, on {}, {}", config.model, config.layers,
                  config.d_model, ff, n_params, device.str(), precision_description(precision, device)));

  const data::LmBatcher batcher(corpus.train, static_cast<std::size_t>(st.block), static_cast<std::size_t>(st.batch), 0);
  const auto per_epoch = static_cast<std::int64_t>(batcher.train_batches_per_epoch());
  if (per_epoch < 1)
    throw std::runtime_error(fmt::format("train: the training split ({} tokens) is too small for one batch of {} x {}",
                                         corpus.train.size(), st.batch, st.block + 1));
  const std::int64_t total_steps = planned_steps(per_epoch, st.epochs, st.max_steps);
  // The warm-up in steps, fixed when the run began: a resumed run that grows keeps it, and
  // its schedule stretches over the new length.
  std::int64_t warmup = resolve_warmup(st.warmup, total_steps);
  std::int64_t recorded_total = total_steps;
  if (st.resume) {
    const nlohmann::json& t = recorded.at("train");
    recorded_total = planned_steps(per_epoch, json_field(t, "epochs", std::int64_t{1}), json_field(t, "max_steps", std::int64_t{-1}));
    warmup = json_field(t, "warmup_steps", resolve_warmup(st.warmup, recorded_total));
    if (total_steps < recorded_total)
      throw std::invalid_argument(fmt::format(
          "train --resume: --epochs {} / --max-steps {} would end the run at step {}, before the {} steps it was planned "
          "for ({}); a resumed run may only grow (to stop it early, --stop-after N)",
          st.epochs, st.max_steps, total_steps, recorded_total, config_path));
  }
  Adam opt = make_adamw(*model, st.lr, st.weight_decay);
  // The gradient's way from the pieces of a batch over the ranks to the update (under ZeRO-1
  // this shards the optimizer's moments at once).
  GradientSync sync(comm, model->named_parameters(), opt, st.deterministic, st.zero == 1);
  const LrSchedule sched = make_schedule(st.schedule, st.lr, warmup, total_steps, st.min_lr >= 0 ? st.min_lr : st.lr * st.min_lr_ratio);

  Generator* dropout_gen = dropout_generator(*model);
  PieceDropout piece_dropout(dropout_gen, plan.pieces);
  // Whether a batch in pieces needs the whole batch's counts for the auxiliary loss, and
  // whether this rank runs several pieces (then a forward pass of each finds them first).
  const bool whole_batch_counts = model->batch_counts_size() > 0 && plan.pieces > 1;
  const bool several_pieces_each = plan.last - plan.first > 1;
  const auto summed_over_ranks = [&](std::vector<double> counts) {
    // Every rank sends the same number of counts, rows or none (MPI would not say).
    if (counts.size() != model->batch_counts_size())
      throw std::logic_error(fmt::format("{} batch counts where the model declares {}", counts.size(), model->batch_counts_size()));
    if (comm.distributed()) comm.all_reduce_sum(std::span<double>(counts));
    return counts;
  };
  std::int64_t step = 0;
  double best_ppl = INFINITY, last_ppl = NAN, elapsed_before = 0;
  std::map<std::string, Tensor> resumed_moments;  // rank 0's, from the checkpoint

  if (st.resume && run) {
    const std::string last = "last.safetensors";
    const SafeTensors ck = run->load_checkpoint(last);
    const std::string path = run->file(last);
    load_parameters(*model, ck, path);
    step = metadata_int(ck, "step", path);
    resumed_moments = ck.tensors;
    best_ppl = metadata_double(ck, "best_val_ppl", path);
    elapsed_before = metadata_double(ck, "elapsed_s", path);
    if (dropout_gen != nullptr)
      dropout_gen->set_state(metadata_uint(ck, "dropout_seed", path), metadata_uint(ck, "dropout_offset", path));
    run->resume_metrics(step);
    say(fmt::format("resumed from {} at step {}", path, step));
  } else if (run) {
    nlohmann::json t = st.to_json();
    t["warmup_steps"] = warmup;
    t["data_sha256"] = data_fingerprint(corpus);
    t.update(vocab_record(corpus.codec));
    if (parent) {
      t["init_from"] = parent->load_weights(*model);
      say(fmt::format("init: the weights of {} (step {}); a fresh optimizer and schedule", parent->file(),
                      t["init_from"]["step"].get<std::int64_t>()));
    }
    run->begin(nlohmann::json{{"model", config}, {"train", t}}, corpus.codec.vocab_text);
  }
  if (comm.distributed()) {
    // Every rank starts from rank 0's state: its parameters (a fresh run's are the same on
    // every rank already, from the seed; sending them costs little and rules out any
    // difference), and a resumed run's counters and dropout stream (and moments, below).
    for (Tensor& t : model->parameters()) broadcast_tensor(comm, t);
    comm.broadcast(&step, sizeof step);
    comm.broadcast(&best_ppl, sizeof best_ppl);
    comm.broadcast(&elapsed_before, sizeof elapsed_before);
    if (dropout_gen != nullptr) broadcast_generator(comm, *dropout_gen);
    say(ranks_line(comm, st.batch, device, sync, st.zero == 1));
  }
  if (st.resume && step >= total_steps) {
    say(fmt::format("{} is finished: {} of {} steps done, nothing to train (a larger --epochs or --max-steps trains it "
                    "longer)",
                    out, step, total_steps));
    TrainResult done;
    done.steps = step;
    done.best_val_ppl = best_ppl;
    done.parameters = n_params;
    done.already_finished = true;
    done.corpus = corpus.name;
    return done;
  }
  if (st.resume && total_steps > recorded_total) {
    say(fmt::format("the run grows from {} to {} steps: its {} schedule now ends at step {} (lr at step {}: {:.3g}, was {:.3g})",
                    recorded_total, total_steps, st.schedule, total_steps, step, sched.at(step),
                    make_schedule(st.schedule, st.lr, warmup, recorded_total, sched.min_lr).at(step)));
    if (run) {
      recorded["train"]["epochs"] = st.epochs;
      recorded["train"]["max_steps"] = st.max_steps;
      recorded["train"]["warmup_steps"] = warmup;
      run->write_config(recorded);
    }
  }
  if (st.resume) sync.scatter_moments(resumed_moments, step);
  resumed_moments.clear();
  if (plan.pieces > comm.size() || st.deterministic)
    say(pieces_line(plan, st.deterministic));
  if (whole_batch_counts && several_pieces_each)
    say("pieces: SheafStateLM's balance term weighs each piece by the whole batch's expert counts, so each piece first runs "
        "forward once without gradients to count them");

  auto save_checkpoint = [&](const std::string& name, bool with_optimizer) {
    // Every rank takes part: under ZeRO-1 each holds a shard of the optimizer's moments.
    std::map<std::string, Tensor> moments = with_optimizer ? sync.gather_moments() : std::map<std::string, Tensor>{};
    if (!run) return;  // rank 0 writes the run's checkpoints
    std::map<std::string, Tensor> tensors = parameter_map(*model);
    std::map<std::string, std::string> meta = {
        {"best_val_ppl", fmt::format("{}", best_ppl)},
        {"elapsed_s", fmt::format("{}", elapsed_before)},
        {"model", config.model},
    };
    if (dropout_gen != nullptr) {
      meta["dropout_seed"] = std::to_string(dropout_gen->seed());
      meta["dropout_offset"] = std::to_string(dropout_gen->offset());
    }
    tensors.merge(moments);
    run->save_checkpoint(name, tensors, meta, step);
  };

  // A validation perplexity above this is worse than guessing uniformly, by far: the run diverged.
  // In an error message the other ranks name the checkpoint as rank 0 would.
  auto last_good = [&] { return run ? run->last_good() : out + "/last.safetensors"; };
  const double diverged_ppl = kDivergedPerplexityFactor * static_cast<double>(config.vocab_size);
  auto run_eval = [&](std::int64_t epoch) {
    const auto t0 = Clock::now();
    EvalResult ev = evaluate(*model, corpus.valid, st.block, st.batch, corpus.valid_probes, &comm);
    if (!std::isfinite(ev.ppl) || ev.ppl > diverged_ppl)
      throw std::runtime_error(fmt::format(
          "train: the validation perplexity at step {} is {:.4g}, more than {} x the vocabulary size ({}): the run diverged; "
          "stopping. The last good checkpoint is {} — try a lower --lr",
          step, ev.ppl, kDivergedPerplexityFactor, config.vocab_size, last_good()));
    last_ppl = ev.ppl;
    const bool best = ev.ppl < best_ppl;
    if (best) best_ppl = ev.ppl;
    nlohmann::json line{{"eval", "valid"}, {"step", step}, {"epoch", epoch}, {"ppl", ev.ppl}, {"nll", ev.nll},
                        {"tokens", ev.tokens}, {"time", elapsed_before}};
    for (const auto& [key, value] : ev.diagnostics.items()) line[key] = value;
    if (!ev.dependencies.is_null()) line["dependencies"] = ev.dependencies;
    if (run) run->append_metrics(line);
    say(fmt::format("eval  step {:>6}  valid ppl {:.2f}  (nll {:.4f} over {} tokens, {:.1f}s){}", step, ev.ppl, ev.nll,
                    ev.tokens, std::chrono::duration<double>(Clock::now() - t0).count(), best ? "  best" : ""));
    if (!ev.diagnostics.empty()) {
      std::string parts;
      for (const auto& [key, value] : ev.diagnostics.items()) {
        std::string shown;
        if (value.is_array())
          for (const auto& v : value) shown += fmt::format("{}{:.3f}", shown.empty() ? "" : ",", v.get<double>());
        else
          shown = fmt::format("{:.4g}", value.get<double>());
        parts += fmt::format("  {} {}", key, shown);
      }
      say("      " + parts.substr(2));
    }
    if (!ev.dependencies.is_null()) say("      " + dependency_summary(ev.dependencies));
    if (best) save_checkpoint("best.safetensors", false);
    save_checkpoint("last.safetensors", true);
  };

  InterruptScope sigint;
  TrainResult result;
  result.parameters = n_params;
  double window_tokens = 0, window_time = 0, run_time = 0, run_tokens = 0;
  std::int64_t run_steps = 0;
  double loss_value = NAN;
  // Each step's loss is read on the host to log it and to stop on NaN/Inf. On the CPU that
  // is free; on a GPU every read waits for the device, so there the reads are collected
  // and done once per log interval (and before any evaluation or checkpoint, so a
  // non-finite loss is still caught before anything is saved).
  struct PendingLoss {
    std::int64_t step, epoch;
    double lr;
    Tensor loss;        // this rank's part of the batch's mean loss (undefined: it had no rows)
    double share = 1.0;  // 1, or 0 when it had no rows
  };
  std::vector<PendingLoss> pending;
  const bool defer_loss_reads = !device.is_cpu();
  auto flush_losses = [&] {
    for (const PendingLoss& p : pending) {
      loss_value = p.loss.defined() ? p.loss.item() : 0.0;
      if (comm.distributed()) {
        // The batch's loss: the sum of the ranks' parts.
        double v = p.share > 0 ? loss_value * p.share : 0.0;
        comm.all_reduce_sum(std::span<double>(&v, 1));
        loss_value = v;
      }
      if (!std::isfinite(loss_value)) {
        throw std::runtime_error(fmt::format(
            "train: the loss became {} at step {} (lr {:.3g}); stopping. The last good checkpoint is {} — try a lower --lr "
            "or a stronger --clip",
            loss_value, p.step, p.lr, last_good()));
      }
      if (run) run->append_metrics({{"step", p.step}, {"epoch", p.epoch}, {"loss", loss_value}, {"lr", p.lr}, {"time", elapsed_before}});
    }
    pending.clear();
  };
  std::int64_t epoch = step / per_epoch;
  std::vector<std::uint32_t> order = batcher.epoch_order(st.seed, static_cast<std::uint64_t>(epoch));
  say(fmt::format("training: {} steps ({} per epoch), batch {} x {}, lr {} (warm-up {}, then {}{}), AdamW wd {}",
                  total_steps, per_epoch, st.batch, st.block, st.lr, warmup, st.schedule,
                  st.schedule == "constant" ? std::string() : fmt::format(" down to {:.3g}", sched.min_lr), st.weight_decay));
  // The denominator of the progress line's "% of peak" (an MFU figure over the GEMMs'
  // flops): the measured peak of the instruction this run's GEMMs use, on its threads.
  const double peak_gflops = device.is_cpu() && comm.is_root() ? kernels::measured_gemm_peak_gflops(precision, num_threads(), 2'000'000) : 0;
  if (peak_gflops > 0) say(fmt::format("peak: {:.0f} GFLOP/s measured for {} GEMMs on {} threads", peak_gflops,
                                       precision_name(precision), num_threads()));
  double window_flops = 0, window_comm_from = 0;

  // A fine-tune starts by scoring the parent's weights on its own validation split.
  if (parent && step == 0) run_eval(0);
  while (step < total_steps) {
    const std::int64_t e = step / per_epoch;
    if (e != epoch) {
      epoch = e;
      order = batcher.epoch_order(st.seed, static_cast<std::uint64_t>(epoch));
    }
    const auto t0 = Clock::now();
    const std::uint64_t flops0 = ops::matmul_flops();
    const data::LmBatch whole = batcher.train_batch(order, static_cast<std::size_t>(step % per_epoch));
    const auto batch_tokens = static_cast<std::int64_t>(whole.rows) * st.block;
    const double lr = sched.at(step);
    opt.set_lr(lr);
    piece_dropout.begin_step();
    Tensor weighted_loss;  // this rank's pieces' mean losses, each weighted by its share
    // The rows of piece k of the batch (an epoch's short last batch may leave a piece none),
    // on the device. Its loss is scaled by its share of the batch's predicted tokens, so that
    // the pieces' losses, and so their gradients, sum to the loss of the whole batch at once;
    // a model's auxiliary loss (a mean over rows, given the batch's counts) by its share of
    // the rows.
    struct Piece {
      Tensor x, y;
      std::int64_t tokens = 0;
      double share = 0, row_share = 0;
    };
    auto piece = [&](std::int64_t k) {
      const std::int64_t begin = plan.piece_begin(k, static_cast<std::int64_t>(whole.rows));
      const std::int64_t rows = plan.piece_end(k, static_cast<std::int64_t>(whole.rows)) - begin;
      Piece p;
      if (rows == 0) return p;
      const data::LmBatch b = slice_batch(whole, static_cast<std::size_t>(begin), static_cast<std::size_t>(rows));
      p.x = Tensor::from_vector(b.inputs, {rows, st.block}).to(device);
      p.y = Tensor::from_vector(b.targets, {rows * st.block}).to(device);
      p.tokens = rows * st.block;
      p.share = static_cast<double>(b.predicted_tokens) / static_cast<double>(whole.predicted_tokens);
      p.row_share = static_cast<double>(rows) / static_cast<double>(whole.rows);
      // The dropout masks one piece of the whole batch would draw for these rows.
      piece_dropout.piece(begin, rows, static_cast<std::int64_t>(whole.rows));
      return p;
    };
    // SheafStateLM's balance term weighs each piece by the whole batch's expert counts
    // (models/lm.h batch_counts): with one piece per process its forward finds them, and the
    // processes add theirs before any backward; with several, a forward of each piece
    // without gradients finds them first.
    std::vector<double> batch_totals;
    if (whole_batch_counts && several_pieces_each) {
      NoGradGuard no_grad;
      std::vector<double> mine(model->batch_counts_size(), 0.0);
      for (std::int64_t k = plan.first; k < plan.last; ++k) {
        const Piece p = piece(k);
        if (p.tokens == 0) continue;
        model->forward(p.x);
        const std::vector<double> counts = model->batch_counts();
        for (std::size_t i = 0; i < mine.size(); ++i) mine[i] += counts[i];
      }
      batch_totals = summed_over_ranks(std::move(mine));
    }
    {
      // course 21 begin: one training step: forward, the loss and backward of each piece of the batch, clip the gradient's norm, the AdamW update
      auto run_piece = [&](std::int64_t k) {
        const Piece p = piece(k);
        if (p.tokens == 0) {  // no rows: adds nothing to the gradient (nor to the counts)
          if (whole_batch_counts && !several_pieces_each) summed_over_ranks(std::vector<double>(model->batch_counts_size()));
          return;
        }
        Tensor logits = model->forward(p.x);
        if (whole_batch_counts) {
          if (!several_pieces_each) batch_totals = summed_over_ranks(model->batch_counts());
          model->use_batch_counts(batch_totals);
        }
        Tensor loss = ops::cross_entropy(ops::reshape(logits, {p.tokens, -1}), p.y, data::kIgnoreTarget);
        // The logged loss is the cross-entropy; a model's auxiliary terms (SheafStateLM's
        // gluing energy and expert balance) join it only in the gradient.
        const Tensor aux = model->auxiliary_loss();
        Tensor objective = p.share == 1.0 ? loss : loss * p.share;
        if (aux.defined()) objective = objective + (p.row_share == 1.0 ? aux : aux * p.row_share);
        objective.backward();
        const Tensor part = p.share == 1.0 ? loss.detach() : loss.detach() * p.share;
        weighted_loss = weighted_loss.defined() ? weighted_loss + part : part;
      };
      // The pieces' gradients, summed over this rank's pieces and over the ranks; its norm.
      const double norm = sync.accumulate(plan.first, plan.last, run_piece);
      // Clipping is folded into the update: one norm, then one pass over the parameters.
      opt.step(clip_scale(norm, st.clip));
      sync.share_updated_parameters();
      opt.zero_grad();
      // course 21 end
    }
    pending.push_back({step + 1, epoch, lr, weighted_loss, weighted_loss.defined() ? 1.0 : 0.0});
    piece_dropout.end_step(comm, whole.rows < static_cast<std::size_t>(st.batch));
    ++step;
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    elapsed_before += dt;
    window_time += dt;
    window_tokens += static_cast<double>(batch_tokens);
    window_flops += static_cast<double>(ops::matmul_flops() - flops0);
    run_tokens += static_cast<double>(batch_tokens);
    run_time += dt;
    ++run_steps;
    const bool epoch_end = step % per_epoch == 0;
    const bool periodic = st.eval_every > 0 && step % st.eval_every == 0;
    // The ranks stop together: a Ctrl-C that reached one of them stops them all.
    const bool interrupted = on_any_rank(comm, interrupt_requested());
    const bool stopping = interrupted || (st.stop_after > 0 && run_steps >= st.stop_after && step < total_steps);
    const bool log_now = step % st.log_every == 0 || step == total_steps || step == 1;
    if (!defer_loss_reads || log_now || epoch_end || periodic || stopping) flush_losses();
    if (log_now) {
      const double tps = window_tokens / std::max(window_time, 1e-9);
      const double eta = static_cast<double>(total_steps - step) * (run_time / static_cast<double>(run_steps));
      const double gflops = window_flops / std::max(window_time, 1e-9) / 1e9;
      const std::string mfu = peak_gflops > 0 ? fmt::format(" ({:.0f} % of peak)", 100 * gflops / peak_gflops) : "";
      // Several processes: the share of the steps rank 0 spent summing gradients over them.
      const std::string comm_part =
          comm.distributed() ? fmt::format("  comm {:.0f} %", 100 * (sync.comm_seconds() - window_comm_from) / std::max(window_time, 1e-9))
                             : "";
      say(fmt::format("step {:>6}/{}  epoch {}  loss {:.4f}  lr {:.2e}  {:.0f} tok/s  {:.0f} GFLOP/s{}{}  ETA {}", step,
                      total_steps, epoch + 1, loss_value, lr, tps, gflops, mfu, comm_part, fmt_duration(eta)));
      window_time = window_tokens = window_flops = 0;
      window_comm_from = sync.comm_seconds();
    }
    if (epoch_end || periodic || step == total_steps) run_eval(epoch);
    if (stopping) {
      save_checkpoint("last.safetensors", true);
      say(fmt::format("interrupted: checkpoint written at step {} to {}; continue with `wedge train --resume --out {}`", step,
                      out + "/last.safetensors", out));
      result.interrupted = true;
      break;
    }
  }
  result.steps = step;
  result.corpus = corpus.name;
  result.final_loss = loss_value;
  result.final_val_ppl = last_ppl;
  result.best_val_ppl = best_ppl;
  result.tokens_per_s = run_time > 0 ? run_tokens / run_time : 0;
  result.comm_share = run_time > 0 ? sync.comm_seconds() / run_time : 0;
  result.comm_bytes_per_step = sync.bytes_received_per_step();
  result.comm_overlap = sync.overlap_share();
  result.collectives = sync.collectives();
  return result;
}

// ---- using a trained model --------------------------------------------------------------------------

LoadedRun load_run(const std::string& run_dir, const std::string& which, Device device) {
  const std::string config_path = run_dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) throw std::runtime_error("no run in '" + run_dir + "': " + config_path + " is missing (train one with `wedge train --out " + run_dir + "`)");
  LoadedRun r;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    r.config = j.at("model").get<models::LMConfig>();
    r.settings = j.at("train");
    r.config.validate();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read " + config_path + ": " + e.what());
  }
  std::string path = run_dir + "/" + which + ".safetensors";
  if (which == "best" && !fs::exists(path)) path = run_dir + "/last.safetensors";
  models::check_model_memory(r.config, models::ModelUse::evaluation);
  r.model = models::make_model(r.config);
  SafeTensors st = load_safetensors(path);
  load_parameters(*r.model, st, path);
  r.model->to(device);
  r.model->eval();
  return r;
}

}  // namespace wedge::tools
