#include "tools/training_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/autograd.h"
#include "engine/distributed.h"
#include "engine/json_field.h"
#include "engine/optim.h"
#include "engine/precision.h"
#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "ops/ops.h"
#include "tools/training_support.h"

namespace wedge::tools {

using Clock = std::chrono::steady_clock;

// ---- settings ---------------------------------------------------------------------------------------

void LoopSettings::write_loop_json(nlohmann::json& j) const {
  j.update({{"epochs", epochs},
            {"batch", batch},
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
            {"zero", zero},
            {"eval_every", eval_every},
            {"device", device},
            {"precision", precision}});
}

void LoopSettings::read_loop_json(const nlohmann::json& j) {
  epochs = json_field(j, "epochs", epochs);
  batch = json_field(j, "batch", batch);
  lr = json_field(j, "lr", lr);
  schedule = json_field(j, "schedule", schedule);
  min_lr_ratio = json_field(j, "min_lr_ratio", min_lr_ratio);
  min_lr = json_field(j, "min_lr", min_lr);
  warmup = json_field(j, "warmup", warmup);
  weight_decay = json_field(j, "weight_decay", weight_decay);
  clip = json_field(j, "clip", clip);
  seed = json_field(j, "seed", seed);
  max_steps = json_field(j, "max_steps", max_steps);
  micro_batch = json_field(j, "micro_batch", micro_batch);
  deterministic = json_field(j, "deterministic", deterministic);
  zero = json_field(j, "zero", zero);
  eval_every = json_field(j, "eval_every", eval_every);
  device = json_field(j, "device", device);
  precision = json_field(j, "precision", precision);
}

std::string LoopSettings::setting_name(const std::string& config_file, const char* flag) {
  return config_file.empty() ? std::string(flag) : fmt::format("{}: train.{}", config_file, flag + 2);
}

void LoopSettings::validate_loop(const std::string& config_file) const {
  const auto name = [&](const char* flag) { return setting_name(config_file, flag); };
  auto bad = [&](const char* flag, const std::string& allowed, const auto& value) {
    throw std::invalid_argument(fmt::format("{} is {}; it must be {}", name(flag), value, allowed));
  };
  const auto finite = [](double v) { return std::isfinite(v); };
  if (out.empty()) throw std::invalid_argument("train: --out RUNDIR is required");
  if (epochs < 1 || epochs > 1'000'000) bad("--epochs", "in [1, 1000000]", epochs);
  if (batch < 1 || batch > (1 << 20)) bad("--batch", "in [1, 1048576]", batch);
  if (!finite(lr) || lr <= 0) bad("--lr", "a finite number > 0", lr);
  if (!finite(min_lr_ratio) || min_lr_ratio < 0 || min_lr_ratio > 1) bad("--min-lr-ratio", "in [0, 1]", min_lr_ratio);
  if (warmup < -1) bad("--warmup", "-1 (5 % of the run) or a number of steps >= 0", warmup);
  if (!finite(weight_decay) || weight_decay < 0) bad("--weight-decay", "a finite number >= 0", weight_decay);
  if (!finite(clip) || clip <= 0) bad("--clip", "a finite number > 0 (a large one clips nothing)", clip);
  if (log_every < 1) bad("--log-every", "at least 1", log_every);
  if (threads < 0 || threads > 4096) bad("--threads", "0 (all cores) or a count up to 4096", threads);
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

std::int64_t planned_steps(std::int64_t per_epoch, std::int64_t epochs, std::int64_t max_steps) {
  return max_steps >= 0 ? max_steps : per_epoch * std::max<std::int64_t>(epochs, 1);
}

// ---- the run folder, the recorded run, the parent -----------------------------------------------------

TrainingLoop::TrainingLoop(const LoopSettings& st, std::string task)
    : comm_(dist::Communicator::world()), out_(st.out), task_(std::move(task)), json_(st.json), given_(st.given) {
  if (st.threads > 0) set_num_threads(st.threads);
  if (st.comm_timeout >= 0) dist::Communicator::set_timeout(st.comm_timeout);
  // How each batch is cut into pieces and shared among the ranks, checked before the run
  // folder is made (a resumed run's own settings are checked again in run()).
  (void)PiecePlan::make(st.batch, st.micro_batch, st.deterministic, comm_, "");
  share_cores_among_ranks(comm_, st.threads);
  if (comm_.is_root())
    run_.emplace(st.resume ? RunFolder::resume(out_)
                           : RunFolder::create(out_, st.overwrite, ", or continue it with `wedge train --resume --out " + out_ + "`"));
  if (st.resume) {
    std::string text = run_ ? run_->read_config().dump() : std::string();
    comm_.broadcast(text);
    recorded_ = nlohmann::json::parse(text);
    if (!recorded_.is_object() || !recorded_.contains("model") || !recorded_.contains("train"))
      throw std::runtime_error("train --resume: cannot read " + config_path() + ": it has no \"model\" and \"train\"");
    if (json_field(recorded_, "task", std::string("lm")) != task_)
      throw std::runtime_error(fmt::format("train --resume: {} holds a run of the {} task, not {}", config_path(),
                                           json_field(recorded_, "task", std::string("lm")), task_));
  }
  // --init-from: rank 0 reads the parent run and shares its config.json (its checkpoint
  // reaches the other ranks with the first broadcast of the parameters).
  if (!st.init_from.empty()) {
    std::string text;
    if (comm_.is_root()) text = ParentRun::open(st.init_from, task_).config.dump();
    comm_.broadcast(text);
    parent_ = ParentRun::from(st.init_from, nlohmann::json::parse(text));
  }
}

void TrainingLoop::say(const std::string& line) const {
  if (!comm_.is_root()) return;  // the other ranks print only errors
  std::FILE* f = json_ ? stderr : stdout;
  std::fputs((line + "\n").c_str(), f);
  std::fflush(f);
}

// In an error message the other ranks name the checkpoint as rank 0 would.
std::string TrainingLoop::last_good() const { return run_ ? run_->last_good() : out_ + "/last.safetensors"; }

void TrainingLoop::refuse_changed(const nlohmann::json& wanted) const {
  // ZeRO-1 only changes where the optimizer's moments live (a checkpoint holds them all).
  static const std::set<std::string> free = {"--data-dir",  "--vocab",     "--epochs",     "--max-steps", "--eval-every",
                                             "--device",    "--threads",   "--log-every",  "--stop-after",
                                             "--comm-timeout", "--zero"};
  const std::string hint = fmt::format(
      "; a resumed run keeps its settings (only --epochs and --max-steps may make it longer). To train with other "
      "settings, start a new run from its weights: `wedge train --init-from {} --out NEW ...`",
      out_);
  for (const char* section : {"model", "train"})
    refuse_changed_flags(given_, free, wanted, recorded_, section, config_path(), "train --resume", hint);
}

nlohmann::json TrainingLoop::model_config_json(const nlohmann::json& given) const {
  if (!recorded_.is_null()) return recorded_.at("model");
  if (parent_) return parent_->model_config(given, given_);
  return given;
}

std::string TrainingLoop::model_config_error(const std::string& what) const {
  if (!recorded_.is_null()) return fmt::format("train --resume: cannot read {}: {}", config_path(), what);
  if (parent_) return fmt::format("--init-from: cannot read {}/config.json: {}", parent_->dir, what);
  return what;
}

void TrainingLoop::keep_invocation_settings(LoopSettings& st, const LoopSettings& given) {
  if (given.given.count("--epochs") > 0) st.epochs = given.epochs;
  if (given.given.count("--max-steps") > 0) st.max_steps = given.max_steps;
  if (given.given.count("--eval-every") > 0) st.eval_every = given.eval_every;
  st.log_every = given.log_every;
  st.stop_after = given.stop_after;
  st.threads = given.threads;
  st.device = given.device;  // where it runs now
  st.json = given.json;
  st.comm_timeout = given.comm_timeout;
  st.zero = given.zero;
  st.out = given.out;
  st.resume = true;
}

// ---- one run ------------------------------------------------------------------------------------------

namespace {

// The state of one invocation of a run: the optimizer, the gradient's way over the ranks,
// the schedule, the counters a checkpoint keeps, and the losses not read yet.
class Invocation {
 public:
  Invocation(TrainingLoop& loop, TrainingTask& task, const LoopSettings& st)
      : loop_(loop), task_(task), st_(st), comm_(loop.comm()), run_(loop.folder()), device_(Device::parse(st.device)),
        plan_(PiecePlan::make(st.batch, st.micro_batch, st.deterministic, comm_, st.resume ? loop.config_path() : "")),
        opt_(make_adamw(task.model(), st.lr, st.weight_decay)),
        // The gradient's way from the pieces of a batch over the ranks to the update (under
        // ZeRO-1 this shards the optimizer's moments at once).
        sync_(comm_, task.model().named_parameters(), opt_, st.deterministic, st.zero == 1),
        dropout_gen_(task.dropout_generator()), piece_dropout_(dropout_gen_, plan_.pieces),
        per_epoch_(task.steps_per_epoch()), total_steps_(planned_steps(per_epoch_, st.epochs, st.max_steps)),
        best_(task.higher_is_better() ? -INFINITY : INFINITY) {
    if (per_epoch_ < 1) throw std::logic_error("a training task with no batch per epoch");
  }

  // Starts a new run in its folder, or takes a resumed run's state; shares it with every rank.
  // False when a resumed run is finished already.
  bool start(nlohmann::json config, std::string_view vocab_text);
  void train();
  LoopResult result() const;

 private:
  void save_checkpoint(const std::string& name, bool with_optimizer);
  void evaluate(std::int64_t epoch);
  double step();  // returns the step's learning rate
  void flush_losses();
  void log_progress(double lr);

  TrainingLoop& loop_;
  TrainingTask& task_;
  const LoopSettings& st_;
  const dist::Communicator& comm_;
  RunFolder* run_;
  Device device_;
  PiecePlan plan_;
  Adam opt_;
  GradientSync sync_;
  Generator* dropout_gen_;
  PieceDropout piece_dropout_;
  std::int64_t per_epoch_, total_steps_, warmup_ = 0;
  LrSchedule sched_;

  std::int64_t step_ = 0, epoch_ = 0, best_step_ = -1;
  double best_, last_score_ = NAN, elapsed_before_ = 0;
  // Each step's loss is read on the host to log it and to stop on NaN/Inf. On the CPU that
  // is free; on a GPU every read waits for the device, so there the reads are collected
  // and done once per log interval (and before any evaluation or checkpoint, so a
  // non-finite loss is still caught before anything is saved).
  struct PendingLoss {
    std::int64_t step, epoch;
    double lr;
    Tensor loss;  // this rank's part of the batch's mean loss (undefined: it had no rows)
  };
  std::vector<PendingLoss> pending_;
  double loss_value_ = NAN;
  // This invocation's throughput, over the log window and over the whole invocation.
  double window_tokens_ = 0, window_time_ = 0, window_flops_ = 0, window_comm_from_ = 0;
  double run_tokens_ = 0, run_time_ = 0, peak_gflops_ = 0;
  std::int64_t run_steps_ = 0;
  bool interrupted_ = false;
};

bool Invocation::start(nlohmann::json config, std::string_view vocab_text) {
  // The warm-up in steps, fixed when the run began: a resumed run that grows keeps it, and
  // its schedule stretches over the new length.
  warmup_ = resolve_warmup(st_.warmup, total_steps_);
  std::int64_t recorded_total = total_steps_;
  const double min_lr = st_.min_lr >= 0 ? st_.min_lr : st_.lr * st_.min_lr_ratio;
  std::map<std::string, Tensor> resumed_moments;  // rank 0's, from the checkpoint
  if (st_.resume) {
    const nlohmann::json& t = loop_.recorded().at("train");
    recorded_total = planned_steps(per_epoch_, json_field(t, "epochs", std::int64_t{1}), json_field(t, "max_steps", std::int64_t{-1}));
    warmup_ = json_field(t, "warmup_steps", resolve_warmup(st_.warmup, recorded_total));
    if (total_steps_ < recorded_total)
      throw std::invalid_argument(fmt::format(
          "train --resume: --epochs {} / --max-steps {} would end the run at step {}, before the {} steps it was planned "
          "for ({}); a resumed run may only grow (to stop it early, --stop-after N)",
          st_.epochs, st_.max_steps, total_steps_, recorded_total, loop_.config_path()));
  }
  sched_ = make_schedule(st_.schedule, st_.lr, warmup_, total_steps_, min_lr);
  if (st_.resume && run_ != nullptr) {
    const std::string last = "last.safetensors";
    const SafeTensors ck = run_->load_checkpoint(last);
    const std::string path = run_->file(last);
    load_parameters(task_.model(), ck, path);
    step_ = metadata_int(ck, "step", path);
    resumed_moments = ck.tensors;
    best_ = metadata_double(ck, task_.best_score_key(), path);
    best_step_ = ck.metadata.count("best_step") > 0 ? metadata_int(ck, "best_step", path, -1) : -1;
    elapsed_before_ = metadata_double(ck, "elapsed_s", path);
    if (dropout_gen_ != nullptr)
      dropout_gen_->set_state(metadata_uint(ck, "dropout_seed", path), metadata_uint(ck, "dropout_offset", path));
    run_->resume_metrics(step_);
    loop_.say(fmt::format("resumed from {} at step {}", path, step_));
  } else if (run_ != nullptr) {
    config["train"]["warmup_steps"] = warmup_;
    if (ParentRun* parent = loop_.parent()) {
      config["train"]["init_from"] = parent->load_weights(task_.model());
      loop_.say(fmt::format("init: the weights of {} (step {}); a fresh optimizer and schedule", parent->file(),
                            config["train"]["init_from"]["step"].get<std::int64_t>()));
    }
    run_->begin(config, vocab_text);
  }
  if (comm_.distributed()) {
    // Every rank starts from rank 0's state: its parameters (a fresh run's are the same on
    // every rank already, from the seed; sending them costs little and rules out any
    // difference), and a resumed run's counters and dropout stream (and moments, below).
    for (Tensor& t : task_.model().parameters()) broadcast_tensor(comm_, t);
    for (std::int64_t* v : {&step_, &best_step_}) comm_.broadcast(v, sizeof *v);
    for (double* v : {&best_, &elapsed_before_}) comm_.broadcast(v, sizeof *v);
    if (dropout_gen_ != nullptr) broadcast_generator(comm_, *dropout_gen_);
    loop_.say(ranks_line(comm_, st_.batch, device_, sync_, st_.zero == 1));
  }
  if (st_.resume && step_ >= total_steps_) {
    loop_.say(fmt::format("{} is finished: {} of {} steps done, nothing to train (a larger --epochs or --max-steps trains "
                          "it longer)",
                          st_.out, step_, total_steps_));
    return false;
  }
  if (st_.resume && total_steps_ > recorded_total) {
    loop_.say(fmt::format("the run grows from {} to {} steps: its {} schedule now ends at step {} (lr at step {}: {:.3g}, "
                          "was {:.3g})",
                          recorded_total, total_steps_, st_.schedule, total_steps_, step_, sched_.at(step_),
                          make_schedule(st_.schedule, st_.lr, warmup_, recorded_total, min_lr).at(step_)));
    if (run_ != nullptr) {
      nlohmann::json recorded = loop_.recorded();
      recorded["train"]["epochs"] = st_.epochs;
      recorded["train"]["max_steps"] = st_.max_steps;
      recorded["train"]["warmup_steps"] = warmup_;
      run_->write_config(recorded);
    }
  }
  if (st_.resume) sync_.scatter_moments(resumed_moments, step_);
  if (plan_.pieces > comm_.size() || st_.deterministic) loop_.say(pieces_line(plan_, st_.deterministic));
  for (const std::string& note : task_.notes(plan_)) loop_.say(note);
  return true;
}

void Invocation::save_checkpoint(const std::string& name, bool with_optimizer) {
  // Every rank takes part: under ZeRO-1 each holds a shard of the optimizer's moments.
  std::map<std::string, Tensor> moments = with_optimizer ? sync_.gather_moments() : std::map<std::string, Tensor>{};
  if (run_ == nullptr) return;  // rank 0 writes the run's checkpoints
  std::map<std::string, Tensor> tensors = parameter_map(task_.model());
  std::map<std::string, std::string> meta = task_.checkpoint_metadata();
  meta[task_.best_score_key()] = fmt::format("{}", best_);
  meta["best_step"] = std::to_string(best_step_);
  meta["epoch"] = std::to_string(epoch_);
  meta["elapsed_s"] = fmt::format("{}", elapsed_before_);
  if (dropout_gen_ != nullptr) {
    meta["dropout_seed"] = std::to_string(dropout_gen_->seed());
    meta["dropout_offset"] = std::to_string(dropout_gen_->offset());
  }
  tensors.merge(moments);
  run_->save_checkpoint(name, tensors, meta, step_);
}

void Invocation::evaluate(std::int64_t epoch) {
  TaskEvaluation ev = task_.evaluate({step_, epoch, loop_.last_good()});
  last_score_ = ev.score;
  const bool best = task_.higher_is_better() ? ev.score > best_ : ev.score < best_;
  if (best) {
    best_ = ev.score;
    best_step_ = step_;
  }
  ev.metrics["step"] = step_;
  if (!ev.metrics.contains("epoch")) ev.metrics["epoch"] = epoch;
  ev.metrics["time"] = elapsed_before_;
  if (run_ != nullptr) run_->append_metrics(ev.metrics);
  for (std::size_t i = 0; i < ev.lines.size(); ++i) loop_.say(ev.lines[i] + (i == 0 && best ? "  best" : ""));
  if (best) save_checkpoint("best.safetensors", false);
  save_checkpoint("last.safetensors", true);
}

void Invocation::flush_losses() {
  for (const PendingLoss& p : pending_) {
    loss_value_ = p.loss.defined() ? p.loss.item() : 0.0;
    // The batch's loss: the sum of the ranks' parts.
    if (comm_.distributed()) comm_.all_reduce_sum(std::span<double>(&loss_value_, 1));
    if (!std::isfinite(loss_value_))
      throw std::runtime_error(fmt::format(
          "train: the loss became {} at step {} (lr {:.3g}); stopping. The last good checkpoint is {} — try a lower --lr "
          "or a stronger --clip",
          loss_value_, p.step, p.lr, loop_.last_good()));
    if (run_ != nullptr)
      run_->append_metrics({{"step", p.step}, {"epoch", p.epoch}, {"loss", loss_value_}, {"lr", p.lr}, {"time", elapsed_before_}});
  }
  pending_.clear();
}

// One step: the batch's pieces (forward, loss and backward each), their gradient summed over
// the pieces and ranks, clipped, the AdamW update.
double Invocation::step() {
  epoch_ = step_ / per_epoch_;
  const auto t0 = Clock::now();
  const std::uint64_t flops0 = ops::matmul_flops();
  const TrainingTask::Batch batch = task_.load_batch(epoch_, step_ % per_epoch_);
  const double lr = sched_.at(step_);
  opt_.set_lr(lr);
  piece_dropout_.begin_step();
  const StepContext ctx{plan_, piece_dropout_, comm_, device_};
  task_.before_pieces(ctx);
  Tensor weighted_loss;  // this rank's pieces' losses, each weighted by its share
  // course 21 begin: one training step: forward, the loss and backward of each piece of the batch, clip the gradient's norm, the AdamW update
  const double norm = sync_.accumulate(plan_.first, plan_.last, [&](std::int64_t k) {
    const Tensor part = task_.train_piece(k, ctx);
    if (part.defined()) weighted_loss = weighted_loss.defined() ? weighted_loss + part : part;
  });
  // Clipping is folded into the update: one norm, then one pass over the parameters.
  opt_.step(clip_scale(norm, st_.clip));
  sync_.share_updated_parameters();
  opt_.zero_grad();
  // course 21 end
  pending_.push_back({step_ + 1, epoch_, lr, weighted_loss});
  piece_dropout_.end_step(comm_, batch.rows < st_.batch);
  ++step_;
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  elapsed_before_ += dt;
  window_time_ += dt;
  window_tokens_ += static_cast<double>(batch.tokens);
  window_flops_ += static_cast<double>(ops::matmul_flops() - flops0);
  run_tokens_ += static_cast<double>(batch.tokens);
  run_time_ += dt;
  ++run_steps_;
  return lr;
}

void Invocation::log_progress(double lr) {
  const double tps = window_tokens_ / std::max(window_time_, 1e-9);
  const double eta = static_cast<double>(total_steps_ - step_) * (run_time_ / static_cast<double>(run_steps_));
  const double gflops = window_flops_ / std::max(window_time_, 1e-9) / 1e9;
  const std::string mfu = peak_gflops_ > 0 ? fmt::format(" ({:.0f} % of peak)", 100 * gflops / peak_gflops_) : "";
  // Several processes: the share of the steps rank 0 spent summing gradients over them.
  const std::string comm_part =
      comm_.distributed() ? fmt::format("  comm {:.0f} %", 100 * (sync_.comm_seconds() - window_comm_from_) / std::max(window_time_, 1e-9))
                          : "";
  loop_.say(fmt::format("step {:>6}/{}  epoch {}  loss {:.4f}  lr {:.2e}  {:.0f} tok/s  {:.0f} GFLOP/s{}{}  ETA {}", step_,
                        total_steps_, epoch_ + 1, loss_value_, lr, tps, gflops, mfu, comm_part, fmt_duration(eta)));
  window_time_ = window_tokens_ = window_flops_ = 0;
  window_comm_from_ = sync_.comm_seconds();
}

void Invocation::train() {
  epoch_ = step_ / per_epoch_;
  loop_.say(fmt::format("training: {} steps ({} per epoch), batch {}, lr {} (warm-up {}, then {}{}), AdamW wd {}", total_steps_,
                        per_epoch_, task_.batch_description(), st_.lr, warmup_, st_.schedule,
                        st_.schedule == "constant" ? std::string() : fmt::format(" down to {:.3g}", sched_.min_lr),
                        st_.weight_decay));
  // The denominator of the progress line's "% of peak" (an MFU figure over the GEMMs'
  // flops): the measured peak of the instruction this run's GEMMs use, on its threads.
  const Precision precision = matmul_precision();
  peak_gflops_ = device_.is_cpu() && comm_.is_root() ? kernels::measured_gemm_peak_gflops(precision, num_threads(), 2'000'000) : 0;
  if (peak_gflops_ > 0)
    loop_.say(fmt::format("peak: {:.0f} GFLOP/s measured for {} GEMMs on {} threads", peak_gflops_, precision_name(precision),
                          num_threads()));
  // A fine-tune starts by scoring the parent's weights on its own held-out split.
  if (loop_.parent() != nullptr && step_ == 0) evaluate(0);
  InterruptScope sigint;
  const bool defer_loss_reads = !device_.is_cpu();
  while (step_ < total_steps_) {
    const double lr = step();
    const bool epoch_end = step_ % per_epoch_ == 0;
    const bool periodic = st_.eval_every > 0 && step_ % st_.eval_every == 0;
    // The ranks stop together: a Ctrl-C that reached one of them stops them all.
    const bool interrupted = on_any_rank(comm_, interrupt_requested());
    const bool stopping = interrupted || (st_.stop_after > 0 && run_steps_ >= st_.stop_after && step_ < total_steps_);
    const bool log_now = step_ % st_.log_every == 0 || step_ == total_steps_ || step_ == 1;
    if (!defer_loss_reads || log_now || epoch_end || periodic || stopping) flush_losses();
    if (log_now) log_progress(lr);
    if (epoch_end || periodic || step_ == total_steps_) evaluate(epoch_);
    if (stopping) {
      save_checkpoint("last.safetensors", true);
      loop_.say(fmt::format("interrupted: checkpoint written at step {} to {}; continue with `wedge train --resume --out {}`",
                            step_, st_.out + "/last.safetensors", st_.out));
      interrupted_ = true;
      break;
    }
  }
}

LoopResult Invocation::result() const {
  LoopResult r;
  r.steps = step_;
  r.final_loss = loss_value_;
  r.last_score = last_score_;
  r.best_score = best_;
  r.best_step = best_step_;
  r.tokens_per_s = run_time_ > 0 ? run_tokens_ / run_time_ : 0;
  r.seconds = run_time_;
  r.comm_share = run_time_ > 0 ? sync_.comm_seconds() / run_time_ : 0;
  r.comm_bytes_per_step = sync_.bytes_received_per_step();
  r.comm_overlap = sync_.overlap_share();
  r.collectives = sync_.collectives();
  r.parameters = task_.model().num_parameters();
  r.interrupted = interrupted_;
  return r;
}

}  // namespace

LoopResult TrainingLoop::run(TrainingTask& task, const LoopSettings& settings, nlohmann::json config,
                             std::string_view vocab_text) {
  Invocation invocation(*this, task, settings);
  if (!invocation.start(std::move(config), vocab_text)) {
    LoopResult done = invocation.result();
    done.already_finished = true;
    return done;
  }
  invocation.train();
  return invocation.result();
}

}  // namespace wedge::tools
