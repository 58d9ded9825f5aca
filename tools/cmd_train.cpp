// `wedge train | eval | generate | plot | bench-step`: training a language model and using
// it. The work happens in tools/trainer.cpp; this file binds flags and prints.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "engine/optim.h"
#include "engine/thread_pool.h"
#include "ops/ops.h"
#include "tools/commands.h"
#include "tools/model_flags.h"
#include "tools/plot.h"
#include "tools/trainer.h"

namespace wedge::tools {

namespace fs = std::filesystem;

namespace {

void add_data_flags(CLI::App* cmd, CorpusSpec& spec) {
  cmd->add_option("--data", spec.data,
                  "Dataset: wikitext2, text (your own files: --train, --valid, --test, --vocab), or omit for the "
                  "built-in synthetic corpus")
      ->check(CLI::IsMember({"wikitext2", "text", "synthetic"}));
  cmd->add_option("--data-dir", spec.data_dir, "Directory with wiki.{train,valid,test}.raw or .tokens (WikiText-2)");
  cmd->add_option("--train", spec.train_file,
                  "--data text: the UTF-8 text file to train on (any size; tokenized once, then cached)");
  cmd->add_option("--valid", spec.valid_file,
                  "--data text: the validation file (default: the last 5 % of the training file's tokens)");
  cmd->add_option("--test", spec.test_file, "--data text: a test file, for `wedge eval --split test`");
}

// The corpus a run was trained on, as its config.json records it.
CorpusSpec corpus_spec_of(const LoadedRun& run) { return CorpusSpec::read_from(run.settings); }

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a language model (WikiText-2, your own text, or the built-in synthetic corpus)");
  auto flags = std::make_shared<ModelFlags>();
  auto st = std::make_shared<TrainSettings>();
  add_model_flags(*cmd, *flags);
  add_data_flags(cmd, st->corpus);
  cmd->add_option("--epochs", st->epochs, "Passes over the training split")->capture_default_str();
  cmd->add_option("--batch", st->batch, "Sequences per step")->capture_default_str();
  cmd->add_option("--lr", st->lr, "Peak learning rate (AdamW; linear warm-up, then cosine decay)")->capture_default_str();
  cmd->add_option("--min-lr-ratio", st->min_lr_ratio, "The cosine ends at lr x this")->capture_default_str();
  cmd->add_option("--warmup", st->warmup, "Warm-up steps (-1: 5% of the run)")->capture_default_str();
  cmd->add_option("--weight-decay", st->weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--clip", st->clip, "Clip the global gradient norm to this")->capture_default_str();
  cmd->add_option("--max-steps", st->max_steps, "Stop after this many steps in total (-1: no limit)")->capture_default_str();
  cmd->add_option("--eval-every", st->eval_every, "Also evaluate every N steps (-1: at epoch ends only)")->capture_default_str();
  cmd->add_option("--log-every", st->log_every, "Print a progress line every N steps")->capture_default_str();
  cmd->add_option("--stop-after", st->stop_after, "End this invocation after N steps with a checkpoint, as Ctrl-C would")->capture_default_str();
  cmd->add_option("--threads", st->threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_option("--out", st->out, "Run directory (checkpoints, config, metrics)")->required();
  cmd->add_option("--device", st->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_flag("--resume", st->resume, "Continue the run in --out exactly where it stopped");
  cmd->add_flag("--json", st->json, "Progress on stderr; last stdout line is one JSON object with the results");
  cmd->callback([flags, st, cmd] {
    models::LMConfig cfg = flags->values;
    if (!flags->vocab_file.empty()) st->corpus.vocab = flags->vocab_file;
    if (st->corpus.data != "text")
      for (const char* flag : {"--train", "--valid", "--test"})
        if (cmd->count(flag) > 0) throw CLI::ValidationError(flag, "is for --data text only");
    if (flags->no_mix_out_proj) cfg.mix_out_proj = false;
    const bool synthetic = st->corpus.data.empty() || st->corpus.data == "synthetic";
    if (synthetic && cmd->count("--block") == 0 && !st->resume) cfg.block = 64;  // the built-in default job
    if (synthetic && !st->resume) {
      // The built-in job: a small model that visibly learns within a minute on 2 cores,
      // unless the user chose sizes.
      if (cmd->count("--layers") == 0) cfg.layers = 2;
      if (cmd->count("--d-model") == 0) cfg.d_model = 64;
      if (cmd->count("--d-ff") == 0) cfg.d_ff = 4 * cfg.d_model;
      if (cmd->count("--heads") == 0) cfg.heads = 4;
      if (cmd->count("--rank") == 0) cfg.rank = 16;
      if (cmd->count("--batch") == 0) st->batch = 16;
      if (cmd->count("--lr") == 0) st->lr = 2e-3;
      if (cmd->count("--dropout") == 0) cfg.dropout = 0.0;
      if (cmd->count("--eval-every") == 0) st->eval_every = 100;
      if (cmd->count("--max-steps") == 0 && cmd->count("--epochs") == 0) st->max_steps = 300;
    }
    st->block = cfg.block;
    st->seed = cfg.seed;
    TrainResult r = train(cfg, *st);
    if (synthetic && !st->json && !r.interrupted) {
      LoadedRun run = load_run(st->out, "best");
      CorpusSpec spec = st->corpus;
      spec.seed = st->seed;
      Corpus corpus = load_corpus(spec);
      auto ids = generate_tokens(*run.model, corpus.encode("the"), 40, 0.8, 10, st->seed);
      fmt::print("sample: {}\n", corpus.decode(ids));
    }
    const nlohmann::json j = {{"steps", r.steps},
                              {"final_loss", r.final_loss},
                              {"final_val_ppl", r.final_val_ppl},
                              {"best_val_ppl", r.best_val_ppl},
                              {"tokens_per_s", r.tokens_per_s},
                              {"parameters", r.parameters},
                              {"interrupted", r.interrupted}};
    if (st->json) fmt::print("{}\n", j.dump());
    else fmt::print("done: {} steps, best valid ppl {:.2f}, {:.0f} tok/s - run in {}\n", r.steps, r.best_val_ppl, r.tokens_per_s, st->out);
  });
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
  cmd->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--run", *run_dir, "Run directory written by `wedge train`")->required();
  cmd->add_option("--split", *split, "valid or test")->check(CLI::IsMember({"valid", "test", "train"}))->capture_default_str();
  cmd->add_option("--checkpoint", *which, "best or last")->check(CLI::IsMember({"best", "last"}))->capture_default_str();
  cmd->add_option("--data-dir", spec->data_dir, "Dataset directory (default: the one the run was trained on)");
  cmd->add_option("--batch", *batch, "Sequences per forward pass")->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([=] {
    LoadedRun run = load_run(*run_dir, *which, Device::parse(*device));
    CorpusSpec s = corpus_spec_of(run);
    if (!spec->data_dir.empty()) s.data_dir = spec->data_dir;
    s.load_train = *split == "train";
    Corpus corpus = load_corpus(s);
    const std::int64_t block = run.settings.value("block", run.config.block);
    const auto t0 = std::chrono::steady_clock::now();
    EvalResult ev = evaluate(*run.model, corpus.split(*split), block, *batch);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (*json)
      fmt::print("{}\n", nlohmann::json{{"split", *split}, {"ppl", ev.ppl}, {"nll", ev.nll}, {"tokens", ev.tokens}, {"seconds", secs}}.dump());
    else
      fmt::print("{} {} perplexity {:.3f} (mean NLL {:.4f} over {} predicted tokens, {:.1f}s)\n", corpus.name, *split, ev.ppl, ev.nll,
                 ev.tokens, secs);
  });
}

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a trained run");
  auto run_dir = std::make_shared<std::string>();
  auto prompt = std::make_shared<std::string>();
  auto max_new = std::make_shared<std::int64_t>(50);
  auto temperature = std::make_shared<double>(1.0);
  auto top_k = std::make_shared<std::int64_t>(40);
  auto seed = std::make_shared<std::uint64_t>(0);
  auto device = std::make_shared<std::string>("cpu");
  cmd->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--run", *run_dir, "Run directory written by `wedge train`")->required();
  cmd->add_option("--prompt", *prompt, "Text to continue")->required();
  cmd->add_option("--max-new-tokens", *max_new, "Tokens to sample")->capture_default_str();
  cmd->add_option("--temperature", *temperature, "Softmax temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", *top_k, "Sample among the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--seed", *seed, "Sampling seed (same seed, same text)")->capture_default_str();
  cmd->callback([=] {
    LoadedRun run = load_run(*run_dir, "best", Device::parse(*device));
    CorpusSpec s = corpus_spec_of(run);
    s.load_train = false;
    Corpus corpus = load_corpus(s);
    auto ids = generate_tokens(*run.model, corpus.encode(*prompt), *max_new, *temperature, *top_k, *seed);
    fmt::print("{}\n", corpus.decode(ids));
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

void register_bench_step(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-step", "Time training steps (forward, loss, backward, AdamW) on random tokens");
  auto flags = std::make_shared<ModelFlags>();
  auto batch = std::make_shared<std::int64_t>(32);
  auto steps = std::make_shared<std::int64_t>(5);
  auto warmup = std::make_shared<std::int64_t>(1);
  auto threads = std::make_shared<int>(0);
  auto json = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>("cpu");
  add_model_flags(*cmd, *flags);
  cmd->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_option("--batch", *batch, "Sequences per step")->capture_default_str();
  cmd->add_option("--steps", *steps, "Timed steps")->capture_default_str();
  cmd->add_option("--warmup-steps", *warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--threads", *threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--json", *json, "Print one JSON object");
  cmd->callback([=] {
    if (*threads > 0) set_num_threads(*threads);
    models::LMConfig cfg = flags->config();
    const Device dev = Device::parse(*device);
    auto model = models::make_model(cfg);
    model->to(dev);
    model->train();
    AdamConfig acfg;
    acfg.weight_decay = 0.01;
    Adam opt(model->named_parameters(), acfg, decays_by_default);
    const std::int64_t B = *batch, L = cfg.block, V = cfg.vocab_size;
    Generator gen(cfg.seed + 1);
    std::vector<double> times;
    for (std::int64_t s = 0; s < *warmup + *steps; ++s) {
      std::vector<std::int32_t> ids(B * (L + 1));
      for (auto& v : ids) v = static_cast<std::int32_t>(gen.integer(static_cast<std::uint64_t>(V)));
      Tensor all = Tensor::from_vector(ids, {B, L + 1}).to(dev);
      Tensor x = ops::narrow(all, 1, 0, L).contiguous(), y = ops::narrow(all, 1, 1, L).contiguous();
      const auto t0 = std::chrono::steady_clock::now();
      Tensor loss = ops::cross_entropy(ops::reshape(model->forward(x), {B * L, V}), ops::reshape(y, {B * L}));
      const Tensor aux = model->auxiliary_loss();
      (aux.defined() ? loss + aux : loss).backward();
      opt.step(clip_scale(grad_norm(model->parameters()), 1.0));
      opt.zero_grad();
      const double loss_value = loss.item();  // also waits for the device to finish the step
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s >= *warmup) times.push_back(ms);
      if (!*json) fmt::print(stderr, "step {} {:.1f} ms loss {:.4f}\n", s, ms, loss_value);
    }
    std::sort(times.begin(), times.end());
    const double median = times.empty() ? 0 : times[times.size() / 2];
    const double tps = median > 0 ? static_cast<double>(B * L) / (median / 1000.0) : 0;
    const nlohmann::json j = {{"model", cfg.model},        {"parameters", model->num_parameters()},
                              {"batch", B},                {"block", L},
                              {"threads", num_threads()},  {"steps", *steps},
                              {"device", dev.str()},
                              {"step_ms", median},         {"tokens_per_s", tps},
                              {"peak_rss_mb", peak_rss_mb()}};
    if (*json) fmt::print("{}\n", j.dump());
    else fmt::print("{}: median step {:.1f} ms, {:.0f} tokens/s, peak RSS {:.0f} MB ({} threads)\n", cfg.model, median, tps, peak_rss_mb(), num_threads());
  });
}

}  // namespace

void register_train_commands(CLI::App& app) {
  register_train(app);
  register_eval(app);
  register_generate(app);
  register_plot(app);
  register_bench_step(app);
}

}  // namespace wedge::tools
