// `wedge generate`: text from a trained run, printed as it is produced. The prompt is read
// once (prefill); each new token is one step of the model's stream (tools/generation.h).
// `wedge bench-generate`: the same streams timed on random weights.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/autograd.h"
#include "engine/json_field.h"
#include "engine/rng.h"
#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "models/memory_check.h"
#include "ops/ops.h"
#include "engine/precision.h"
#include "tools/commands.h"
#include "tools/corpus.h"
#include "tools/run_continuation.h"
#include "tools/generation.h"
#include "tools/model_flags.h"
#include "tools/trainer.h"
#include "tools/training_support.h"

namespace wedge::tools {

namespace {

struct GenerateArgs {
  std::string run_dir, checkpoint = "best", prompt, prompt_file, device = "cpu";
  std::int64_t max_new = 50, top_k = 40, samples = 1;
  double temperature = 1.0, top_p = 1.0;
  std::uint64_t seed = 0;
  bool json = false, check = false;
};

// The prompt from --prompt, --prompt-file FILE ('-': stdin) or, with neither, stdin.
std::string read_prompt(const GenerateArgs& a, bool prompt_given) {
  if (prompt_given) return a.prompt;
  const bool from_stdin = a.prompt_file.empty() || a.prompt_file == "-";
  if (from_stdin) {
    struct stat input {};
    if (::fstat(STDIN_FILENO, &input) == 0 && S_ISDIR(input.st_mode))
      throw std::runtime_error("the standard input is a folder; give the prompt on stdin, with --prompt TEXT or --prompt-file FILE");
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) throw std::runtime_error("read error on the standard input");
    return text;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(a.prompt_file, ec))
    throw std::runtime_error("--prompt-file " + a.prompt_file + " is a folder, not a text file");
  std::ifstream in(a.prompt_file, std::ios::binary);
  if (!in) throw std::runtime_error("--prompt-file " + a.prompt_file + ": cannot open it");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error("--prompt-file " + a.prompt_file + ": read error");
  return text.str();
}

// Prints a sample's text as its tokens arrive: the decoded text grows at its end (a
// WordPiece continuation glues to the word before), so each token prints what it adds.
class LivePrinter {
 public:
  LivePrinter(const TextCodec& codec, std::vector<std::int32_t> tokens) : codec_(codec), tokens_(std::move(tokens)) {
    printed_ = codec_.decode(tokens_);
    std::fputs(printed_.c_str(), stdout);
    std::fflush(stdout);
  }
  void add(std::int32_t id) {
    tokens_.push_back(id);
    const std::string text = codec_.decode(tokens_);
    if (text.compare(0, printed_.size(), printed_) != 0) return;  // changed within: wait until it grows again
    std::fputs(text.c_str() + printed_.size(), stdout);
    std::fflush(stdout);
    printed_ = text;
  }
  void finish() {
    const std::string text = codec_.decode(tokens_);
    if (text != printed_) std::fputs(("\n" + text).c_str(), stdout);
    std::fputs("\n", stdout);
  }

 private:
  const TextCodec& codec_;
  std::vector<std::int32_t> tokens_;
  std::string printed_;
};

std::string human_bytes(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20)) return fmt::format("{:.1f} MiB", double(bytes) / double(1 << 20));
  return fmt::format("{:.1f} KiB", double(bytes) / 1024.0);
}

void run_generate(const GenerateArgs& a, bool prompt_given) {
  LoadedRun run = load_run(a.run_dir, a.checkpoint, Device::parse(a.device));
  const Precision precision = parse_precision(json_field(run.settings, "precision", std::string("fp32")));
  const MatmulPrecisionGuard precision_scope(precision);  // in the precision the run was trained in
  const TextCodec codec = run_codec(a.run_dir, run.settings);  // the run's vocab.txt: no corpus is read
  const std::vector<std::int32_t> prompt = codec.encode(read_prompt(a, prompt_given));
  if (prompt.empty()) throw std::runtime_error("the prompt encodes to no tokens; give some text");
  const std::int64_t block = run.config.block;
  const bool bounded = run.config.positions == "learned";
  if (bounded && static_cast<std::int64_t>(prompt.size()) > block && !a.json)
    fmt::print(stderr, "note: the prompt has {} tokens; the model reads its last {} (--block {})\n", prompt.size(), block, block);

  SamplingOptions o;
  o.temperature = a.temperature;
  o.top_k = a.top_k;
  o.top_p = a.top_p;
  o.seed = a.seed;
  o.never = codec.never_sampled;
  GenerationStats stats;
  const bool live = !a.json && a.samples == 1;
  std::unique_ptr<LivePrinter> printer;
  if (live) printer = std::make_unique<LivePrinter>(codec, prompt);
  const auto samples = generate(*run.model, prompt, a.max_new, a.samples, o,
                                [&](std::int64_t, std::int32_t id) {
                                  if (printer) printer->add(id);
                                },
                                &stats);
  if (printer) printer->finish();

  double mismatch = -1;
  const double limit = precision == Precision::BF16 ? 2e-2 : 1e-5;
  std::int64_t checked = 0;
  if (a.check) {
    // The first sample's latest tokens (at most the block), streamed after a prefill of the
    // prompt's part, against one full forward over them.
    const auto& t = samples.front();
    checked = std::min<std::int64_t>(block, static_cast<std::int64_t>(t.size()));
    const std::vector<std::int32_t> window(t.end() - checked, t.end());
    mismatch = stream_mismatch(*run.model, window, std::min(stats.context_tokens, checked));
  }

  const double prefill_rate = stats.prefill_seconds > 0 ? double(stats.context_tokens * stats.samples) / stats.prefill_seconds : 0;
  const double ms_per_token = stats.decode_steps > 0 ? 1e3 * stats.decode_seconds / double(stats.decode_steps) : 0;
  if (a.json) {
    nlohmann::json j{{"prompt_tokens", stats.prompt_tokens}, {"context_tokens", stats.context_tokens},
                     {"new_tokens", stats.new_tokens},       {"samples", nlohmann::json::array()},
                     {"prefill_tokens_per_s", prefill_rate},  {"decode_ms_per_token", ms_per_token},
                     {"decode_tokens_per_s", ms_per_token > 0 ? 1e3 * double(stats.samples) / ms_per_token : 0},
                     {"state_bytes", stats.state_bytes},      {"refills", stats.refills},
                     {"precision", precision_name(precision)}};
    for (const auto& s : samples) j["samples"].push_back({{"text", codec.decode(s)}, {"tokens", s}});
    if (a.check) j["check"] = {{"positions", checked}, {"largest_relative_difference", mismatch}, {"limit", limit}};
    fmt::print("{}\n", j.dump());
  } else {
    if (!live)
      for (std::size_t i = 0; i < samples.size(); ++i) fmt::print("[{}] {}\n", i, codec.decode(samples[i]));
    if (stats.refills > 0)
      fmt::print(stderr, "note: the context filled {} time(s); each time the latest {} tokens were read again (the "
                 "learned positions end at --block {})\n", stats.refills, std::max<std::int64_t>(1, block / 2), block);
    fmt::print(stderr, "prefill {} tokens x {} in {:.0f} ms ({:.0f} tokens/s); decode {:.2f} ms per step of {} token(s); "
               "state {}\n", stats.context_tokens, stats.samples, 1e3 * stats.prefill_seconds, prefill_rate, ms_per_token,
               stats.samples, human_bytes(stats.state_bytes));
    if (a.check)
      fmt::print(stderr, "check: streamed logits vs the full forward at {} positions: largest difference {:.2g} of the "
                 "largest logit (limit {:.0e})\n", checked, mismatch, limit);
  }
  if (a.check && !(mismatch <= limit))
    throw std::runtime_error(fmt::format("--check: the stream's logits differ from the full forward's by {:.3g} (limit {:.0e})",
                                         mismatch, limit));
}

// ---- wedge bench-generate ------------------------------------------------------------------

struct BenchArgs {
  std::string models = "transformer,grassmann,sheaf", device = "cpu";
  std::vector<std::int64_t> prompts = {16, 128, 512, 1024};
  std::int64_t new_tokens = 32, batch = 1, repeats = 3;
  int threads = 0;
  bool json = false;
};

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Sums floats [lo, hi) of x with 8-lane vectors and four accumulators: a loop bound by the
// memory's read bandwidth, not by the additions.
using Lanes = float __attribute__((vector_size(32)));
__attribute__((target("avx2"))) float sum_avx2(const float* x, std::int64_t lo, std::int64_t hi) {
  Lanes a[4] = {};
  std::int64_t i = lo;
  for (; i + 32 <= hi; i += 32)
    for (int v = 0; v < 4; ++v) {
      Lanes l;
      std::memcpy(&l, x + i + 8 * v, sizeof l);
      a[v] += l;
    }
  float total = 0;
  for (const Lanes& v : a)
    for (int l = 0; l < 8; ++l) total += v[l];
  for (; i < hi; ++i) total += x[i];
  return total;
}

// Read bandwidth over a buffer of `bytes` read by every thread at once: the best of three
// passes after one that pages it in — what streaming the weights once per token can at
// best reach here (0 without AVX2).
double read_gigabytes_per_s(std::int64_t bytes) {
  if (!kernels::cpu::has_avx2()) return 0;
  const std::int64_t n = std::max<std::int64_t>(32, bytes / 4);
  std::vector<float> buffer(static_cast<std::size_t>(n), 1.0f);
  double best = 0;
  for (int pass = 0; pass < 4; ++pass) {
    std::mutex m;
    double sum = 0;
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(0, n, 1 << 18, [&](std::int64_t lo, std::int64_t hi) {
      const float part = sum_avx2(buffer.data(), lo, hi);
      const std::lock_guard<std::mutex> lock(m);
      sum += part;
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sum != double(n)) throw std::runtime_error("bench-generate: the bandwidth probe misread its buffer");
    if (pass > 0) best = std::max(best, double(n) * 4.0 / secs / 1e9);
  }
  return best;
}

void run_bench_generate(const ModelFlags& flags, const BenchArgs& a, bool block_given) {
  if (a.threads > 0) set_num_threads(a.threads);
  const Device device = Device::parse(a.device);
  const std::int64_t longest = *std::max_element(a.prompts.begin(), a.prompts.end());
  nlohmann::json rows = nlohmann::json::array();
  double gbps = 0;
  for (const std::string& name : split_commas(a.models)) {
    ModelFlags f = flags;
    f.values.model = name;
    if (!block_given) f.values.block = longest + a.new_tokens;  // room for the longest prompt and its new tokens
    const models::LMConfig cfg = f.config();
    if (longest + a.new_tokens > cfg.block)
      throw std::invalid_argument(fmt::format("--block {} is too short for a prompt of {} and {} new tokens", cfg.block,
                                              longest, a.new_tokens));
    models::check_model_memory(cfg, models::ModelUse::evaluation);
    auto model = models::make_model(cfg);
    model->to(device);
    model->eval();
    NoGradGuard no_grad;
    const std::int64_t weight_bytes = model->num_parameters() * 4;
    if (gbps == 0 && device.is_cpu()) gbps = read_gigabytes_per_s(weight_bytes);
    Generator gen(cfg.seed + 1);
    auto random_ids = [&](std::int64_t n) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(a.batch * n));
      for (auto& v : ids) v = static_cast<std::int32_t>(gen.integer(static_cast<std::uint64_t>(cfg.vocab_size)));
      return Tensor::from_vector(ids, {a.batch, n}).to(device);
    };
    auto wait = [](const Tensor& t) { (void)ops::narrow(ops::reshape(t, {-1}), 0, 0, 1).item(); };
    for (const std::int64_t prompt : a.prompts) {
      std::vector<double> prefill_s, step_ms, forward_s;
      std::int64_t state = 0;
      for (std::int64_t r = 0; r < a.repeats; ++r) {
        const Tensor ids = random_ids(prompt);
        auto t0 = std::chrono::steady_clock::now();
        wait(model->forward(ids));  // the whole forward over the prompt, every position's logits
        forward_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        auto stream = model->open_stream(a.batch);
        t0 = std::chrono::steady_clock::now();
        wait(stream->feed(ids, true));
        prefill_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        for (std::int64_t i = 0; i < a.new_tokens; ++i) {
          const Tensor next = random_ids(1);
          t0 = std::chrono::steady_clock::now();
          wait(stream->feed(next, true));
          step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        state = stream->state_bytes();
      }
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
      };
      const double tokens = double(a.batch * prompt);
      nlohmann::json row{{"model", name},
                         {"prompt", prompt},
                         {"batch", a.batch},
                         {"block", cfg.block},
                         {"decode_ms_per_step", median(step_ms)},
                         {"decode_tokens_per_s", 1e3 * double(a.batch) / median(step_ms)},
                         {"prefill_tokens_per_s", tokens / median(prefill_s)},
                         {"forward_tokens_per_s", tokens / median(forward_s)},
                         {"state_bytes", state},
                         {"weight_bytes", weight_bytes},
                         {"threads", num_threads()},
                         {"device", device.str()},
                         {"precision", precision_name(matmul_precision())}};
      if (gbps > 0) row["weights_read_ms_at_measured_bandwidth"] = 1e3 * double(weight_bytes) / (gbps * 1e9);
      if (!a.json)
        fmt::print("{:<12} prompt {:>5}  decode {:7.2f} ms/step ({:6.0f} tokens/s)  prefill {:8.0f} tokens/s (whole forward "
                   "{:8.0f})  state {}\n",
                   name, prompt, median(step_ms), 1e3 * double(a.batch) / median(step_ms), tokens / median(prefill_s),
                   tokens / median(forward_s), human_bytes(state));
      rows.push_back(row);
    }
    if (!a.json && gbps > 0)
      fmt::print("{:<12} weights {} read once per token: {:.2f} ms at the measured {:.1f} GB/s\n", name,
                 human_bytes(weight_bytes), 1e3 * double(weight_bytes) / (gbps * 1e9), gbps);
  }
  if (a.json) fmt::print("{}\n", nlohmann::json{{"rows", rows}, {"read_gb_per_s", gbps}}.dump());
}

}  // namespace

void register_bench_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-generate",
                                 "Time streaming generation on random weights and tokens: prefill tokens/s and decode ms per "
                                 "token at several prompt lengths, beside the whole forward and the weights' read time");
  auto flags = std::make_shared<ModelFlags>();
  auto a = std::make_shared<BenchArgs>();
  add_model_flags(*cmd, *flags);
  cmd->add_option("--models", a->models, "Comma-separated models to time")->capture_default_str();
  cmd->add_option("--prompts", a->prompts, "Prompt lengths (default --block: the longest plus --new-tokens)")
      ->check(CLI::Range(std::int64_t{1}, models::kMaxLength))
      ->delimiter(',');
  cmd->add_option("--new-tokens", a->new_tokens, "Decode steps timed after each prompt")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences decoded together")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "Runs per prompt (the median is reported)")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_option("--device", a->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_flag("--json", a->json, "One JSON object with a row per model and prompt");
  cmd->callback([cmd, flags, a] { run_bench_generate(*flags, *a, cmd->count("--block") > 0); });
}

void register_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a trained run, printed as it is produced");
  cmd->footer(
      "\nThe prompt is read once; every new token is one step of the model's stream (TransformerLM: a key/value "
      "cache; GrassmannLM and SheafStateLM: a state of constant size). A prompt longer than the run's --block is cut "
      "to its last block tokens; when the context is full, its latest half is read again (the learned position table "
      "ends at the block). Special tokens and [unused*] are never sampled.");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("--run", a->run_dir, "Run directory written by `wedge train`")->required();
  cmd->add_option("--checkpoint", a->checkpoint, "Which checkpoint: best (lowest validation perplexity) or last")
      ->check(CLI::IsMember({"best", "last"}))
      ->capture_default_str();
  auto* prompt = cmd->add_option("--prompt", a->prompt, "Text to continue (default: read from stdin)");
  cmd->add_option("--prompt-file", a->prompt_file, "Read the prompt from FILE ('-': stdin)")->excludes(prompt);
  cmd->add_option("--max-new-tokens", a->max_new, "Tokens to sample")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "Softmax temperature (0: greedy)")
      ->check(finite_range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Sample among the k most likely tokens (0: all)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Sample among the fewest most likely tokens whose probability reaches p (1: all)")
      ->check(finite_range(1e-9, 1.0))
      ->capture_default_str();
  cmd->add_option("--num-samples", a->samples, "Samples to draw, decoded together as one batch (sample i uses seed + i)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampling seed (same seed, same text)")->check(non_negative_integer())->capture_default_str();
  cmd->add_option("--device", a->device, "cpu or cuda[:N]")->capture_default_str();
  cmd->add_flag("--json", a->json, "One JSON object: the samples, prefill tokens/s, decode ms per token, state bytes");
  cmd->add_flag("--check", a->check,
                "Also compare the stream's logits with one full forward over the first sample's latest tokens (at most "
                "the block); exit status 1 when they differ by more than float rounding");
  cmd->callback([a, prompt] { run_generate(*a, prompt->count() > 0); });
}

}  // namespace wedge::tools
