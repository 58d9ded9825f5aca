// `wedge train | eval | classify | plot | bench-step`: training a language model and using
// it. The work happens in tools/trainer.cpp, tools/nli_task.cpp and the loop they share
// (tools/training_loop.cpp); this file binds flags and prints.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <span>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "engine/distributed.h"
#include "engine/json_field.h"
#include "engine/optim.h"
#include "engine/profile.h"
#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "models/memory_check.h"
#include "ops/ops.h"
#include "tools/commands.h"
#include "tools/config_file.h"
#include "tools/generation.h"
#include "tools/model_flags.h"
#include "tools/nli_task.h"
#include "tools/plot.h"
#include "tools/run_continuation.h"
#include "tools/step_profile.h"
#include "tools/trainer.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace fs = std::filesystem;

namespace {

void add_data_flags(CLI::App* cmd, CorpusSpec& spec) {
  cmd->add_option("--data", spec.data,
                  "Dataset: wikitext2, text (your own files: --train, --valid, --test, --vocab), depsim (the dependency "
                  "probe: targets decided only by a dependency of known type and distance, scored by distance at every "
                  "evaluation), or omit for the built-in synthetic corpus; snli with --task nli")
      ->check(CLI::IsMember({"wikitext2", "text", "synthetic", "snli", "depsim"}));
  cmd->add_option("--data-dir", spec.data_dir, "Directory with wiki.{train,valid,test}.raw or .tokens (WikiText-2), or the SNLI folder (--task nli)");
  cmd->add_option("--train", spec.train_file,
                  "--data text: the UTF-8 text file to train on (any size; tokenized once, then cached)");
  cmd->add_option("--valid", spec.valid_file,
                  "--data text: the validation file (default: the last 5 % of the training file's tokens)");
  cmd->add_option("--test", spec.test_file, "--data text: a test file, for `wedge eval --split test`");
}

// The dependency probe's accuracy: one row per distance bucket, one column per edge type.
void print_dependency_table(const nlohmann::json& d) {
  auto cell = [](const nlohmann::json& acc, const nlohmann::json& n) {
    return acc.is_null() ? std::string("-") : fmt::format("{:.3f} ({})", acc.get<double>(), n.get<std::int64_t>());
  };
  fmt::print("accuracy on the dependent targets (probes in parentheses):\n{:>9}  {:>14}", "distance", "all");
  for (const char* type : data::kDependencyTypeNames) fmt::print("  {:>14}", type);
  fmt::print("\n");
  for (std::size_t b = 0; b < d.at("buckets").size(); ++b) {
    fmt::print("{:>9}  {:>14}", d["buckets"][b].get<std::string>(), cell(d["accuracy"][b], d["probes"][b]));
    for (const char* type : data::kDependencyTypeNames)
      fmt::print("  {:>14}", cell(d["types"][type]["by_distance"][b], d["types"][type]["probes_by_distance"][b]));
    fmt::print("\n");
  }
  fmt::print("{:>9}  {:>14}", "all", "");
  for (const char* type : data::kDependencyTypeNames)
    fmt::print("  {:>14}", cell(d["types"][type]["accuracy"], d["types"][type]["probes"]));
  fmt::print("\n");
}


double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void train_nli_task(const CLI::App* cmd, const ModelFlags& flags, const TrainSettings& st, const NliFlags& nf,
                    const std::string& config_file, bool print_config) {
  check_task_flags(cmd, "nli");
  if (cmd->count("--vocab-size") > 0)
    throw CLI::ValidationError("--vocab-size", "--task nli takes its vocabulary from --vocab FILE");
  if (!st.corpus.data.empty() && st.corpus.data != "snli")
    throw CLI::ValidationError("--data", "--task nli reads SNLI (give --data-dir the SNLI folder)");
  models::NliConfig config = nli_config(cmd, flags, nf);
  NliSettings s;
  static_cast<LoopSettings&>(s) = st;  // the loop's settings as given; the task's own defaults where not
  if (cmd->count("--epochs") == 0) s.epochs = NliSettings().epochs;
  if (cmd->count("--log-every") == 0) s.log_every = NliSettings().log_every;
  s.data_dir = st.corpus.data_dir;
  s.vocab = flags.vocab_file;
  s.protocol = nf.protocol;
  s.train_pairs = nf.train_pairs;
  s.backbone = nf.backbone;
  s.seed = flags.values.seed;
  if (!config_file.empty()) apply_config_file(config_file, config, s, s.given);
  if (print_config) {
    fmt::print("{}\n", printable_config(config, s).dump(2));
    return;
  }
  const NliResult r = train_nli(config, s);
  // Rank 0 reports for every rank; a finished run said so.
  if (!dist::Communicator::world().is_root() || r.already_finished) return;
  const nlohmann::json j = {{"task", "nli"},
                            {"protocol", r.protocol},
                            {"head", config.head},
                            {"hypothesis_only", config.hypothesis_only},
                            {"parameters", r.parameters},
                            {"train_pairs", r.train_pairs},
                            {"steps", r.steps},
                            {"seconds", r.seconds},
                            {"best_epoch", r.best_epoch},
                            {"select", r.select.to_json()},
                            {"test", r.test.to_json()},
                            {"majority_test", r.majority.to_json()},
                            {"interrupted", r.interrupted}};
  if (st.json) fmt::print("{}\n", j.dump());
  else if (r.select.count > 0)
    fmt::print("done: {} steps in {}, test accuracy {:.4f} [{:.4f}, {:.4f}] (epoch {}) - run in {}\n", r.steps,
               fmt::format("{:.0f}s", r.seconds), r.test.accuracy, r.test.accuracy_low, r.test.accuracy_high, r.best_epoch,
               st.out);
}

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train a language model (WikiText-2, your own text, or the built-in synthetic corpus), or with --task nli a "
               "sentence-pair classifier on SNLI");
  auto flags = std::make_shared<ModelFlags>();
  auto st = std::make_shared<TrainSettings>();
  auto nli = std::make_shared<NliFlags>();
  add_model_flags(*cmd, *flags);
  add_data_flags(cmd, st->corpus);
  add_nli_flags(cmd, *nli);
  cmd->add_option("--backbone", nli->backbone,
                  "nli: RUN[:best|last] (default best), a language model wedge trained with the classifier's vocabulary: "
                  "the heads read its token states, frozen, instead of a token table of their own");
  cmd->add_option("--epochs", st->epochs, "Passes over the training split (--task nli: 10 unless given)")->capture_default_str();
  cmd->add_option("--batch", st->batch, "Sequences per step")->capture_default_str();
  cmd->add_option("--lr", st->lr, "Peak learning rate (AdamW; linear warm-up, then --schedule)")->capture_default_str();
  cmd->add_option("--schedule", st->schedule,
                  "After the warm-up: cosine or linear decay to the minimum, constant, or inverse-sqrt (lr x "
                  "sqrt(warm-up / step), not below the minimum)")
      ->check(CLI::IsMember({"cosine", "linear", "constant", "inverse-sqrt"}))
      ->capture_default_str();
  auto* min_lr_ratio =
      cmd->add_option("--min-lr-ratio", st->min_lr_ratio, "The schedule's minimum is lr x this")->capture_default_str();
  cmd->add_option("--min-lr", st->min_lr, "The schedule's minimum learning rate (instead of --min-lr-ratio)")
      ->excludes(min_lr_ratio);
  cmd->add_option("--warmup", st->warmup, "Warm-up steps (-1: 5% of the run)")->capture_default_str();
  cmd->add_option("--weight-decay", st->weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--clip", st->clip, "Clip the global gradient norm to this")->capture_default_str();
  cmd->add_option("--max-steps", st->max_steps, "Stop after this many steps in total (-1: no limit)")->capture_default_str();
  cmd->add_option("--eval-every", st->eval_every, "Also evaluate every N steps (-1: at epoch ends only)")->capture_default_str();
  cmd->add_option("--log-every", st->log_every, "Print a progress line every N steps (--task nli: 50 unless given)")
      ->capture_default_str();
  cmd->add_option("--stop-after", st->stop_after, "End this invocation after N steps with a checkpoint, as Ctrl-C would")->capture_default_str();
  cmd->add_option("--threads", st->threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_option("--micro-batch", st->micro_batch,
                  "Rows per piece of a batch: each piece runs forward and backward on its own and the gradients add up "
                  "(gradient accumulation; 0: one piece per process)")
      ->capture_default_str();
  cmd->add_flag("--deterministic", st->deterministic,
                "Sum the pieces' gradients in a fixed tree order: with the same --micro-batch, 1, 2, 4, ... processes "
                "give bit-identical weights");
  cmd->add_option("--zero", st->zero,
                  "Under mpirun: 1 shards the AdamW moments over the processes (ZeRO stage 1), each updating its shard; "
                  "the same weights as 0, with 1/N of the optimizer memory each")
      ->check(CLI::IsMember({0, 1}))
      ->capture_default_str();
  cmd->add_option("--comm-timeout", st->comm_timeout,
                  "Under mpirun: seconds a process waits for the others in a collective before ending the job "
                  "(default 600, or WEDGE_COMM_TIMEOUT; 0: forever)");
  cmd->add_option("--out", st->out, "Run directory (checkpoints, config, vocabulary, metrics); required to train");
  auto config_file = std::make_shared<std::string>();
  auto print_config = std::make_shared<bool>(false);
  cmd->add_option("--config", *config_file,
                  "Settings from a JSON file shaped like a run's config.json ({\"model\": {...}, \"train\": {...}}, "
                  "a run's own config.json included); flags given override it")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--print-config", *print_config,
                "Print the configuration these flags (and --config) resolve to, as --config reads it, and exit");
  cmd->add_option("--device", st->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--precision", st->precision, "Precision of the matrix products: fp32, or bf16 (mixed precision: GEMM operands rounded to bfloat16, fp32 accumulation, fp32 weights, optimizer and every other op)" "; a run keeps the precision it began with")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--resume", st->resume,
                "Continue the run in --out exactly where it stopped, with its own settings (a flag naming another value "
                "is refused; only --epochs and --max-steps may make it longer)");
  cmd->add_option("--init-from", st->init_from,
                  "Start a new run from the weights of RUN[:best|last] (default best): a fresh optimizer and schedule, "
                  "data of its own, the parent's sizes and vocabulary (fine-tuning)")
      ->excludes("--resume");
  cmd->add_flag("--overwrite", st->overwrite, "Replace the run already in --out (without it, such a folder is refused)")
      ->excludes("--resume");
  cmd->add_flag("--json", st->json, "Progress on stderr; last stdout line is one JSON object with the results");
  cmd->callback([flags, st, nli, cmd, config_file, print_config] {
    for (const CLI::Option* o : cmd->get_options())
      if (o->count() > 0 && !o->get_lnames().empty()) st->given.insert("--" + o->get_lnames().front());
    if (*print_config && (st->resume || !st->init_from.empty()))
      throw CLI::ValidationError("--print-config", "shows a new run's configuration; a run's own is its config.json");
    // A resumed classifier run is continued as one, --task nli given or not.
    if (nli->task == "nli" || (st->resume && is_nli_run(st->out))) {
      return train_nli_task(cmd, *flags, *st, *nli, *config_file, *print_config);
    }
    check_task_flags(cmd, "lm");
    if (st->corpus.data == "snli") throw CLI::ValidationError("--data", "snli is read by --task nli");
    models::LMConfig cfg = flags->values;
    if (!flags->vocab_file.empty()) st->corpus.vocab = flags->vocab_file;
    if (st->corpus.data != "text")
      for (const char* flag : {"--train", "--valid", "--test"})
        if (cmd->count(flag) > 0) throw CLI::ValidationError(flag, "is for --data text only");
    if (flags->no_mix_out_proj) cfg.mix_out_proj = false;
    if (!config_file->empty()) apply_config_file(*config_file, cfg, *st, st->given);
    // A setting the user chose: on the command line or in --config.
    const auto chosen = [&](const char* flag) { return st->given.count(flag) > 0; };
    const bool synthetic = st->corpus.data.empty() || st->corpus.data == "synthetic";
    const bool fresh_sizes = !st->resume && st->init_from.empty();  // a resumed or started-from run has its sizes
    if (!st->init_from.empty() && !chosen("--block")) {
      // A fine-tune trains on blocks as long as its parent's, unless told otherwise.
      cfg.block = json_field(ParentRun::open(st->init_from).config.at("train"), "block", cfg.block);
    }
    if (synthetic && !chosen("--block") && fresh_sizes) cfg.block = 64;  // the built-in default job
    if (synthetic && !st->resume) {
      // The built-in job: a small model that visibly learns within a minute on 2 cores,
      // unless the user chose sizes.
      if (fresh_sizes) {
        if (!chosen("--layers")) cfg.layers = 2;
        if (!chosen("--d-model")) cfg.d_model = 64;
        if (!chosen("--d-ff")) cfg.d_ff = 4 * cfg.d_model;
        if (!chosen("--heads")) cfg.heads = 4;
        if (!chosen("--rank")) cfg.rank = 16;
      }
      if (!chosen("--batch")) st->batch = 16;
      if (!chosen("--lr")) st->lr = 2e-3;
      if (!chosen("--dropout")) cfg.dropout = 0.0;
      if (!chosen("--eval-every")) st->eval_every = 100;
      if (!chosen("--max-steps") && !chosen("--epochs")) st->max_steps = 300;
    }
    st->block = cfg.block;
    st->seed = cfg.seed;
    if (*print_config) {
      fmt::print("{}\n", printable_config(cfg, *st).dump(2));
      return;
    }
    TrainResult r = train(cfg, *st);
    if (!dist::Communicator::world().is_root() || r.already_finished) return;  // rank 0 reports; a finished run said so
    if (r.corpus == "synthetic" && !st->json && !r.interrupted) {
      // The built-in job shows what it learnt: a sample through the run's own vocabulary.
      LoadedRun run = load_run(st->out, "best");
      const TextCodec codec = run_codec(st->out, run.settings);
      auto ids = generate_tokens(*run.model, codec.encode("the"), 40, 0.8, 10, json_field(run.settings, "seed", st->seed));
      fmt::print("sample: {}\n", codec.decode(ids));
    }
    const nlohmann::json j = {{"steps", r.steps},
                              {"final_loss", r.final_loss},
                              {"final_val_ppl", r.final_val_ppl},
                              {"best_val_ppl", r.best_val_ppl},
                              {"tokens_per_s", r.tokens_per_s},
                              {"comm_share", r.comm_share},
                              {"comm_bytes_per_step", r.comm_bytes_per_step},
                              {"comm_overlap", r.comm_overlap},
                              {"collectives", r.collectives},
                              {"parameters", r.parameters},
                              {"interrupted", r.interrupted}};
    if (st->json) fmt::print("{}\n", j.dump());
    else fmt::print("done: {} steps, best valid ppl {:.2f}, {:.0f} tok/s - run in {}\n", r.steps, r.best_val_ppl, r.tokens_per_s, st->out);
  });
}

// `wedge eval` of a sentence-pair classifier: accuracy, its interval, macro-F1 and the
// confusion matrix on the selection or test split of the run's protocol.
void eval_nli_run(const std::string& run_dir, const std::string& which, const std::string& split,
                  const std::string& data_dir, std::int64_t batch, bool json, const std::string& device,
                  const std::string& precision) {
  if (split == "train") throw CLI::ValidationError("--split", "a classifier is evaluated on valid (its selection split) or test");
  LoadedNliRun run = load_nli_run(run_dir, which, Device::parse(device));
  NliSettings s = run.settings;
  const MatmulPrecisionGuard precision_scope(parse_precision(precision.empty() ? s.precision : precision));
  if (!data_dir.empty()) s.data_dir = data_dir;
  const data::Tokenizer tokenizer = data::Tokenizer::from_file(s.vocab);
  const NliSplits splits = load_nli_splits(s, tokenizer, static_cast<std::size_t>(run.config.max_length));
  const auto t0 = std::chrono::steady_clock::now();
  const NliEvaluation ev = evaluate_nli(*run.model, split == "test" ? *splits.test : *splits.select, batch);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json) {
    nlohmann::json j = ev.report.to_json();
    j["split"] = split == "test" ? "test" : "select";
    j["protocol"] = splits.protocol;
    j["loss"] = ev.loss;
    j["seconds"] = secs;
    fmt::print("{}\n", j.dump());
    return;
  }
  const ClassificationReport& r = ev.report;
  fmt::print("protocol: {}\n", splits.description);
  fmt::print("snli {} accuracy {:.4f} [{:.4f}, {:.4f}] (95 %), macro-F1 {:.4f}, {} of {} pairs ({:.1f}s)\n",
             split == "test" ? "test" : "select", r.accuracy, r.accuracy_low, r.accuracy_high, r.macro_f1, r.correct, r.count,
             secs);
  fmt::print("confusion (rows gold, columns predicted):\n");
  for (std::size_t g = 0; g < r.confusion.size(); ++g) {
    std::string row = fmt::format("  {:>13}", data::kNliLabelNames[g]);
    for (const std::int64_t n : r.confusion[g]) row += fmt::format(" {:>6}", n);
    fmt::print("{}\n", row);
  }
}

// `wedge eval --stream`: the split through the model's stream (evaluate_stream), in chunks
// of the model's block; progress on stderr every tenth of the split.
void eval_stream(models::LanguageModel& model, const std::string& corpus, const std::string& split,
                 const std::vector<std::int32_t>& tokens, std::int64_t context, std::int64_t block, bool json) {
  const auto total = static_cast<std::int64_t>(tokens.size());
  std::int64_t next_report = total / 10;
  const auto t0 = std::chrono::steady_clock::now();
  auto progress = [&](std::int64_t done, std::int64_t) {
    if (done < next_report || done == total) return;
    next_report += total / 10;
    fmt::print(stderr, "streamed {} of {} tokens ({:.0f} s)\n", done, total,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  const StreamEvalResult r = evaluate_stream(model, tokens, context, block, progress);
  const std::int64_t capacity = r.capacity;
  const bool unbounded = capacity == models::Stream::kUnbounded;
  if (json) {
    nlohmann::json j{{"split", split},         {"stream", true},      {"context", context},
                     {"ppl", r.ppl},           {"nll", r.nll},        {"tokens", r.tokens},
                     {"pieces", r.pieces},     {"slides", r.slides},  {"state_bytes", r.state_bytes},
                     {"seconds", r.seconds},   {"precision", precision_name(matmul_precision())}};
    j["stream_capacity"] = unbounded ? nlohmann::json(nullptr) : nlohmann::json(capacity);
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} {} perplexity {:.3f} (mean NLL {:.4f} over {} predicted tokens) read as {}, {:.1f}s\n", corpus, split,
             r.ppl, r.nll, r.tokens,
             context == 0 ? std::string("one stream") : fmt::format("{} streams of {} tokens", r.pieces, context),
             r.seconds);
  fmt::print("stream state at most {:.1f} KiB; {}\n", static_cast<double>(r.state_bytes) / 1024.0,
             unbounded ? std::string("no position table, so no limit on the context")
                       : fmt::format("the position table holds {} tokens: the stream slid {} times (each re-reading "
                                     "the latest {})",
                                     capacity, r.slides, std::max<std::int64_t>(1, capacity / 2)));
}

void register_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand("eval", "Perplexity of a trained run over a whole split");
  auto run_dir = std::make_shared<std::string>();
  auto split = std::make_shared<std::string>("valid");
  auto which = std::make_shared<std::string>("best");
  auto spec = std::make_shared<CorpusSpec>();
  auto batch = std::make_shared<std::int64_t>(16);
  auto json = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("cpu");
  auto precision = std::make_shared<std::string>();
  cmd->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--precision", *precision, "Precision of the matrix products: fp32, or bf16 (mixed precision: GEMM operands rounded to bfloat16, fp32 accumulation, fp32 weights, optimizer and every other op)" "; default: the precision the run was trained in")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--run", *run_dir, "Run directory written by `wedge train`")->required();
  cmd->add_option("--split", *split, "valid or test (a classifier: valid is its selection split)")
      ->check(CLI::IsMember({"valid", "test", "train"}))
      ->capture_default_str();
  cmd->add_option("--checkpoint", *which, "best or last")->check(CLI::IsMember({"best", "last"}))->capture_default_str();
  cmd->add_option("--data-dir", spec->data_dir, "Dataset directory (default: the one the run was trained on)");
  cmd->add_option("--batch", *batch, "Sequences per forward pass")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  auto stream = std::make_shared<bool>(false);
  auto context = std::make_shared<std::int64_t>(0);
  cmd->add_flag("--stream", *stream,
                "Score the split through the model's stream, token after token with the state kept (generate's "
                "path): as one stream, or in pieces of --context tokens. A model with a learned position table "
                "slides past --block (re-reading the latest half); with --positions none it reads without limit");
  cmd->add_option("--context", *context, "--stream: tokens per stream, each from an empty state (0: the whole split)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->callback([=] {
    if (cmd->count("--context") > 0 && !*stream) throw CLI::ValidationError("--context", "applies to --stream only");
    if (is_nli_run(*run_dir) && *stream) throw CLI::ValidationError("--stream", "is for language-model runs only");
    if (is_nli_run(*run_dir))
      return eval_nli_run(*run_dir, *which, *split, spec->data_dir, *batch, *json, *device, *precision);
    LoadedRun run = load_run(*run_dir, *which, Device::parse(*device));
    const MatmulPrecisionGuard precision_scope(
        parse_precision(precision->empty() ? json_field(run.settings, "precision", std::string("fp32")) : *precision));
    CorpusSpec s = run_corpus_spec(*run_dir, run.settings);
    if (!spec->data_dir.empty()) s.data_dir = spec->data_dir;
    s.only_split = *split;
    Corpus corpus = load_corpus(s);
    const std::int64_t block = json_field(run.settings, "block", run.config.block);
    if (*stream) return eval_stream(*run.model, corpus.name, *split, corpus.split(*split), *context, run.config.block, *json);
    const auto t0 = std::chrono::steady_clock::now();
    EvalResult ev = evaluate(*run.model, corpus.split(*split), block, *batch, corpus.probes(*split));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (*json) {
      nlohmann::json j{{"split", *split},          {"ppl", ev.ppl},   {"nll", ev.nll},
                       {"tokens", ev.tokens},      {"seconds", secs}, {"precision", precision_name(matmul_precision())}};
      if (!ev.dependencies.is_null()) j["dependencies"] = ev.dependencies;
      fmt::print("{}\n", j.dump());
    } else {
      fmt::print("{} {} perplexity {:.3f} (mean NLL {:.4f} over {} predicted tokens, {:.1f}s)\n", corpus.name, *split, ev.ppl, ev.nll,
                 ev.tokens, secs);
      if (!ev.dependencies.is_null()) print_dependency_table(ev.dependencies);
    }
  });
}

// `wedge classify`: premise / hypothesis pairs (one per line, separated by a tab) from a
// file or stdin -> the label and the three probabilities.
void register_classify(CLI::App& app) {
  auto* cmd = app.add_subcommand("classify", "Label sentence pairs with a trained classifier (premise<TAB>hypothesis per line)");
  auto run_dir = std::make_shared<std::string>();
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("cpu");
  cmd->add_option("--run", *run_dir, "Run directory written by `wedge train --task nli`")->required();
  cmd->add_option("--file", *file, "Pairs, one per line as premise<TAB>hypothesis (default: stdin)");
  cmd->add_flag("--json", *json, "One JSON object per pair");
  cmd->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  cmd->callback([=] {
    if (!is_nli_run(*run_dir))
      throw std::runtime_error("no sentence-pair classifier in '" + *run_dir + "' (train one with `wedge train --task nli`)");
    LoadedNliRun run = load_nli_run(*run_dir, "best", Device::parse(*device));
    const MatmulPrecisionGuard precision_scope(parse_precision(run.settings.precision));  // as it was trained
    const data::Tokenizer tokenizer = data::Tokenizer::from_file(run.settings.vocab);
    std::ifstream in_file;
    if (!file->empty()) {
      in_file.open(*file);
      if (!in_file) throw std::runtime_error("cannot open " + *file);
    }
    std::istream& in = file->empty() ? std::cin : in_file;
    const std::string source = file->empty() ? "stdin" : *file;
    data::SnliFile pairs;
    pairs.name = source;
    std::string line;
    for (std::size_t number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      const auto tab = line.find('\t');
      if (tab == std::string::npos)
        throw std::runtime_error(fmt::format("{}:{}: expected premise<TAB>hypothesis", source, number));
      pairs.examples.push_back({line.substr(0, tab), line.substr(tab + 1), 0, number});
    }
    if (pairs.examples.empty()) throw std::runtime_error(source + ": no pairs to classify");
    data::SnliOptions options;
    options.max_length = static_cast<std::size_t>(run.config.max_length);
    const data::SnliDataset dataset(pairs, tokenizer, options);
    if (dataset.truncated_count() > 0 && !*json)
      fmt::print(stderr, "note: {} pairs had a sentence cut to {} tokens\n", dataset.truncated_count(), run.config.max_length);
    NoGradGuard no_grad;
    constexpr std::size_t kBatch = 64;
    for (std::size_t start = 0; start < dataset.size(); start += kBatch) {
      std::vector<std::uint32_t> ids;
      for (std::size_t i = start; i < std::min(dataset.size(), start + kBatch); ++i) ids.push_back(static_cast<std::uint32_t>(i));
      const NliInputs x = nli_inputs(dataset.make_batch(ids), run.config.hypothesis_only, module_device(*run.model));
      const std::vector<float> p =
          ops::softmax(run.model->forward(x.ids, x.segments, x.mask), 1).to(Device::cpu()).to(DType::F32).to_vector<float>();
      for (std::size_t r = 0; r < ids.size(); ++r) {
        const float* row = p.data() + r * models::kNliClasses;
        const auto label = static_cast<std::size_t>(std::max_element(row, row + models::kNliClasses) - row);
        if (*json)
          fmt::print("{}\n", nlohmann::json{{"line", pairs.examples[start + r].line},
                                           {"label", data::kNliLabelNames[label]},
                                           {"probabilities", {{"entailment", row[0]}, {"neutral", row[1]}, {"contradiction", row[2]}}}}
                                  .dump());
        else
          fmt::print("{:<13}  entailment {:.3f}  neutral {:.3f}  contradiction {:.3f}\n", data::kNliLabelNames[label], row[0],
                     row[1], row[2]);
      }
    }
  });
}

void register_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Draw training loss and validation perplexity of runs into one SVG");
  auto runs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>("curves.svg");
  cmd->add_option("runs", *runs, "Run directories")->required();
  cmd->add_option("-o,--out", *out, "SVG file to write")->capture_default_str();
  cmd->callback([=] {
    write_curves_svg(*runs, *out);
    fmt::print("wrote {}\n", *out);
  });
}

// `bench-step --task nli`: training steps of the classifier on random pairs of SNLI's
// typical size, a premise part of 24 tokens and a hypothesis part of 16 (no padding).
void bench_nli_step(models::NliConfig cfg, std::int64_t vocab_size, std::int64_t B, std::int64_t steps, std::int64_t warmup,
                    bool json, Device dev) {
  constexpr std::int64_t kPremise = 24, kHypothesis = 16, T = kPremise + kHypothesis;
  cfg.vocab_size = vocab_size;
  models::check_model_memory(cfg, models::ModelUse::training);
  auto model = models::make_nli_model(cfg);
  model->to(dev);
  model->train();
  Adam opt = make_adamw(*model, 1e-3, 0.01);
  Generator gen(cfg.seed + 1);
  std::vector<std::int32_t> segments(static_cast<std::size_t>(B * T));
  for (std::int64_t i = 0; i < B * T; ++i) segments[static_cast<std::size_t>(i)] = i % T >= kPremise ? 1 : 0;
  const Tensor seg = Tensor::from_vector(segments, {B, T}).to(dev), mask = Tensor::ones({B, T}).to(dev);
  std::vector<double> times;
  for (std::int64_t s = 0; s < warmup + steps; ++s) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T)), labels(static_cast<std::size_t>(B));
    for (auto& v : ids) v = static_cast<std::int32_t>(gen.integer(static_cast<std::uint64_t>(vocab_size)));
    for (auto& v : labels) v = static_cast<std::int32_t>(gen.integer(3));
    const Tensor x = Tensor::from_vector(ids, {B, T}).to(dev), y = Tensor::from_vector(labels, {B}).to(dev);
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor loss = ops::cross_entropy(model->forward(x, seg, mask), y);
    loss.backward();
    opt.step(clip_scale(grad_norm(model->parameters()), 1.0));
    opt.zero_grad();
    const double loss_value = loss.item();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) times.push_back(ms);
    if (!json) fmt::print(stderr, "step {} {:.1f} ms loss {:.4f}\n", s, ms, loss_value);
  }
  std::sort(times.begin(), times.end());
  const double median = times.empty() ? 0 : times[times.size() / 2];
  const double pairs_per_s = median > 0 ? static_cast<double>(B) / (median / 1000.0) : 0;
  const nlohmann::json j = {{"task", "nli"},           {"head", cfg.head},
                            {"parameters", model->num_parameters()},
                            {"batch", B},              {"tokens", T},
                            {"threads", num_threads()}, {"steps", steps},
                            {"device", dev.str()},     {"step_ms", median},
                            {"pairs_per_s", pairs_per_s}, {"tokens_per_s", pairs_per_s * double(T)},
                            {"peak_rss_mb", peak_rss_mb()}};
  if (json) fmt::print("{}\n", j.dump());
  else
    fmt::print("nli {} head: median step {:.1f} ms, {:.0f} pairs/s ({} tokens each), peak RSS {:.0f} MB ({} threads)\n",
               cfg.head, median, pairs_per_s, T, peak_rss_mb(), num_threads());
}

void register_bench_step(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-step", "Time training steps (forward, loss, backward, AdamW) on random tokens "
                                               "(--task nli: the sentence-pair classifier on random pairs of 24 + 16 tokens)");
  auto flags = std::make_shared<ModelFlags>();
  auto batch = std::make_shared<std::int64_t>(32);
  auto steps = std::make_shared<std::int64_t>(5);
  auto warmup = std::make_shared<std::int64_t>(1);
  auto threads = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  auto profile = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("cpu");
  auto precision = std::make_shared<std::string>("fp32");
  auto nli = std::make_shared<NliFlags>();
  add_model_flags(*cmd, *flags);
  add_nli_flags(cmd, *nli);
  cmd->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--precision", *precision, "Precision of the matrix products: fp32, or bf16 (mixed precision: GEMM operands rounded to bfloat16, fp32 accumulation, fp32 weights, optimizer and every other op)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--batch", *batch, "Sequences per step")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--steps", *steps, "Timed steps")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--warmup-steps", *warmup, "Untimed steps first")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  cmd->add_option("--threads", *threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->add_flag("--profile", *profile,
                "Time every kernel call of the timed steps and print where a step's time goes: by kind of work "
                "(GEMM, attention, layer norm, ...), by model part, and the GEMMs by shape, plus the GEMMs' "
                "packing, allocation and the host's share (in --json: \"profile\"). CPU only");
  cmd->callback([=] {
    if (*threads > 0) set_num_threads(*threads);
    const MatmulPrecisionGuard precision_scope(parse_precision(*precision));
    if (nli->task == "nli") {
      check_task_flags(cmd, "nli");
      return bench_nli_step(nli_config(cmd, *flags, *nli), flags->values.vocab_size, *batch, *steps, *warmup, *json,
                            Device::parse(*device));
    }
    check_task_flags(cmd, "lm");
    models::LMConfig cfg = flags->config();
    const Device dev = Device::parse(*device);
    if (*profile && !dev.is_cpu())
      throw CLI::ValidationError("--profile", "times CPU kernels only (CUDA kernels run asynchronously to the host); "
                                              "drop it or use --device cpu");
    models::check_model_memory(cfg, models::ModelUse::training);
    auto model = models::make_model(cfg);
    model->to(dev);
    model->train();
    Adam opt = make_adamw(*model, 1e-3, 0.01);
    const std::int64_t B = *batch, L = cfg.block, V = cfg.vocab_size;
    Generator gen(cfg.seed + 1);
    std::vector<double> times, flops;
    // The instruction peak behind `mfu`, measured before the steps and again after them; the
    // larger counts. On a shared machine a slow spell during one measurement would otherwise
    // lower the peak and overstate the share of it.
    const auto measure_peak = [&] {
      return dev.is_cpu() ? kernels::measured_gemm_peak_gflops(matmul_precision(), num_threads()) : 0.0;
    };
    const double peak_before = measure_peak();
    std::optional<profile::Profiler> profiler;
    if (*profile) profiler.emplace();
    for (std::int64_t s = 0; s < *warmup + *steps; ++s) {
      if (profiler) profiler->set_recording(s >= *warmup);
      std::vector<std::int32_t> ids(B * (L + 1));
      for (auto& v : ids) v = static_cast<std::int32_t>(gen.integer(static_cast<std::uint64_t>(V)));
      Tensor all = Tensor::from_vector(ids, {B, L + 1}).to(dev);
      Tensor x = ops::narrow(all, 1, 0, L).contiguous(), y = ops::narrow(all, 1, 1, L).contiguous();
      const auto t0 = std::chrono::steady_clock::now();
      const std::uint64_t flops0 = ops::matmul_flops();
      const Tensor loss = model->loss(x, y);
      const Tensor aux = model->auxiliary_loss();
      (aux.defined() ? loss + aux : loss).backward();
      {
        const profile::Part part("optimizer");
        opt.step(clip_scale(grad_norm(model->parameters()), 1.0));
        opt.zero_grad();
      }
      const double loss_value = loss.item();  // also waits for the device to finish the step
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s >= *warmup) times.push_back(ms);
      flops.push_back(static_cast<double>(ops::matmul_flops() - flops0));
      if (!*json) fmt::print(stderr, "step {} {:.1f} ms loss {:.4f}\n", s, ms, loss_value);
    }
    std::optional<StepProfile> step_profile;
    if (profiler) {
      profiler->set_recording(false);
      step_profile = StepProfile{profiler->report(), *steps,
                                 std::accumulate(times.begin(), times.end(), 0.0) / double(times.size()), num_threads()};
    }
    std::sort(times.begin(), times.end());
    const double median = times.empty() ? 0 : times[times.size() / 2];
    const double tps = median > 0 ? static_cast<double>(B * L) / (median / 1000.0) : 0;
    // Achieved GEMM GFLOP/s of the median step (every step multiplies the same shapes), and
    // its share of the measured peak of the instruction those GEMMs use (an MFU figure).
    const double gflops = median > 0 ? flops.back() / (median / 1000.0) / 1e9 : 0;
    const double peak = std::max(peak_before, measure_peak());
    const double mfu = peak > 0 ? gflops / peak : 0;
    nlohmann::json j = {{"model", cfg.model},        {"parameters", model->num_parameters()},
                        {"batch", B},                {"block", L},
                        {"threads", num_threads()},  {"steps", *steps},
                        {"device", dev.str()},
                        {"precision", precision_name(matmul_precision())},
                        {"kernels", precision_description(matmul_precision(), dev)},
                        {"step_ms", median},         {"tokens_per_s", tps},
                        {"gemm_gflops_per_s", gflops}, {"peak_gflops", peak},
                        {"mfu", mfu},                {"peak_rss_mb", peak_rss_mb()}};
    if (step_profile && *json) j["profile"] = profile_json(*step_profile);
    if (step_profile && !*json) fmt::print("{}\n", profile_table(*step_profile));
    if (*json) fmt::print("{}\n", j.dump());
    else
      fmt::print("{}: median step {:.1f} ms, {:.0f} tokens/s, GEMMs {:.0f} GFLOP/s ({:.0f} % of the measured peak {:.0f}), "
                 "peak RSS {:.0f} MB ({} threads, {})\n",
                 cfg.model, median, tps, gflops, 100 * mfu, peak, peak_rss_mb(), num_threads(),
                 precision_description(matmul_precision(), dev));
  });
}

}  // namespace

void register_train_commands(CLI::App& app) {
  register_train(app);
  register_eval(app);
  register_classify(app);
  register_plot(app);
  register_bench_step(app);
}

}  // namespace wedge::tools
