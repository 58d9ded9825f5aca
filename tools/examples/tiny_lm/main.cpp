// A small GPT-style language model over the bytes of a text file, defined and trained in
// this one file with wedge's public API.
//
// Tokens are bytes (a vocabulary of 256), so no tokenizer or vocabulary file is needed.
// The model, for ids x_1..x_L:
//
//   h_0 = E[x_t] + P[t]                                     token + position embedding
//   per block (pre-LN):
//     a = LN_1(h)
//     h = h + W_o · Attention_causal(W_q a, W_k a, W_v a)   split into `heads` heads
//     h = h + W_2 · GELU(W_1 · LN_2(h) + b_1) + b_2         position-wise feed-forward
//   logits_t = LN_f(h_t) · E^T                              tied output head
//
// trained with AdamW (warm-up then cosine learning rate, gradients clipped to norm 1) on
// random windows of the file to predict each next byte. It prints the training loss as it
// goes, samples a short text at the end, and exits 1 unless the loss fell: the mean over
// the last logging window must be below 0.8 x the mean over the first.
//
//   tiny_lm TEXT_FILE [--steps N] [--batch N] [--block N] [--lr X] [--seed N] [--sample N]
#include <wedge/wedge.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

using namespace wedge;

namespace {

struct Config {
  std::int64_t vocab = 256;  // bytes
  std::int64_t block = 64;   // context length (rows of the position table)
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t layers = 2;
  std::int64_t d_ff = 256;
};

struct TrainOptions {
  std::string text_file;
  std::int64_t steps = 300;
  std::int64_t batch = 16;
  double lr = 3e-3;
  std::uint64_t seed = 0;
  std::int64_t sample = 200;  // bytes to generate at the end
};

// ---- the model ----------------------------------------------------------------------

class Block : public Module {
 public:
  Block(const Config& c, Generator& init)
      : heads_(c.heads),
        ln1_(register_module("ln1", std::make_shared<nn::LayerNorm>(c.d_model))),
        wq_(register_module("wq", std::make_shared<nn::Linear>(c.d_model, c.d_model, init))),
        wk_(register_module("wk", std::make_shared<nn::Linear>(c.d_model, c.d_model, init))),
        wv_(register_module("wv", std::make_shared<nn::Linear>(c.d_model, c.d_model, init))),
        wo_(register_module("wo", std::make_shared<nn::Linear>(c.d_model, c.d_model, init))),
        ln2_(register_module("ln2", std::make_shared<nn::LayerNorm>(c.d_model))),
        w1_(register_module("w1", std::make_shared<nn::Linear>(c.d_model, c.d_ff, init))),
        w2_(register_module("w2", std::make_shared<nn::Linear>(c.d_ff, c.d_model, init))) {}

  // h (B, L, d) -> (B, L, d)
  Tensor forward(Tensor h) const {
    const Tensor a = ln1_.forward(h);
    h = h + wo_.forward(merge_heads(
                ops::attention(split_heads(wq_.forward(a)), split_heads(wk_.forward(a)),
                               split_heads(wv_.forward(a)), /*causal=*/true)));
    // forward_gelu is GELU(W_1 x + b_1) as one fused op.
    h = h + w2_.forward(w1_.forward_gelu(ln2_.forward(h)));
    return h;
  }

 private:
  // (B, L, d) -> (B, H, L, d/H)
  Tensor split_heads(const Tensor& x) const {
    const std::int64_t B = x.size(0), L = x.size(1), d = x.size(2);
    return ops::contiguous(ops::permute(ops::reshape(x, {B, L, heads_, d / heads_}), {0, 2, 1, 3}));
  }
  // (B, H, L, d/H) -> (B, L, d)
  Tensor merge_heads(const Tensor& x) const {
    const std::int64_t B = x.size(0), L = x.size(2);
    return ops::reshape(ops::contiguous(ops::permute(x, {0, 2, 1, 3})), {B, L, -1});
  }

  std::int64_t heads_;
  nn::LayerNorm& ln1_;
  nn::Linear &wq_, &wk_, &wv_, &wo_;
  nn::LayerNorm& ln2_;
  nn::Linear &w1_, &w2_;
};

class TinyLM : public Module {
 public:
  TinyLM(const Config& c, Generator& init)
      : token_(register_module("token", std::make_shared<nn::Embedding>(c.vocab, c.d_model, init))),
        position_(register_module("position", std::make_shared<nn::Embedding>(c.block, c.d_model, init))),
        ln_f_(register_module("ln_f", std::make_shared<nn::LayerNorm>(c.d_model))) {
    for (std::int64_t i = 0; i < c.layers; ++i)
      blocks_.push_back(&register_module("blocks." + std::to_string(i), std::make_shared<Block>(c, init)));
  }

  // ids (B, L) int32, L <= block -> logits (B, L, vocab)
  Tensor forward(const Tensor& ids) const {
    const std::int64_t L = ids.size(1);
    Tensor h = token_.forward(ids) + ops::narrow(position_.weight, 0, 0, L);
    for (const Block* block : blocks_) h = block->forward(h);
    return ops::linear(ln_f_.forward(h), token_.weight);  // tied head: E^T
  }

 private:
  nn::Embedding& token_;
  nn::Embedding& position_;
  nn::LayerNorm& ln_f_;
  std::vector<Block*> blocks_;  // owned through register_module
};

// ---- data -----------------------------------------------------------------------------

std::vector<std::int32_t> read_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error("cannot read the text file '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the text file '" + path + "': " + std::strerror(errno));
  std::vector<std::int32_t> bytes;
  for (auto it = std::istreambuf_iterator<char>(in); it != std::istreambuf_iterator<char>(); ++it)
    bytes.push_back(static_cast<unsigned char>(*it));
  if (in.bad()) throw std::runtime_error("cannot read the text file '" + path + "'");
  return bytes;
}

// `batch` random windows of block + 1 bytes: inputs (batch, block) and, shifted by one,
// the targets (batch * block).
struct Batch {
  Tensor x, y;
};
Batch random_batch(const std::vector<std::int32_t>& text, std::int64_t batch, std::int64_t block,
                   Generator& gen) {
  std::vector<std::int32_t> x, y;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto start = static_cast<std::int64_t>(gen.integer(text.size() - block));
    x.insert(x.end(), text.begin() + start, text.begin() + start + block);
    y.insert(y.end(), text.begin() + start + 1, text.begin() + start + block + 1);
  }
  return {Tensor::from_vector(x, {batch, block}), Tensor::from_vector(y, {batch * block})};
}

// ---- sampling -------------------------------------------------------------------------

// Extends `tokens` by `count` bytes, each drawn from softmax(logits / temperature).
std::vector<std::int32_t> sample(const TinyLM& model, const Config& c, std::vector<std::int32_t> tokens,
                                 std::int64_t count, double temperature, Generator& gen) {
  NoGradGuard no_grad;  // no graph while generating
  for (std::int64_t i = 0; i < count; ++i) {
    const auto len = std::min<std::int64_t>(c.block, static_cast<std::int64_t>(tokens.size()));
    const std::vector<std::int32_t> context(tokens.end() - len, tokens.end());
    const Tensor logits = model.forward(Tensor::from_vector(context, {1, len}));
    const Tensor last = ops::narrow(ops::reshape(logits, {len, c.vocab}), 0, len - 1, 1);
    const std::vector<float> l = last.to_vector<float>();
    const float top = *std::max_element(l.begin(), l.end());
    std::vector<double> p(l.size());
    double z = 0;
    for (std::size_t v = 0; v < l.size(); ++v) z += p[v] = std::exp((l[v] - top) / temperature);
    double u = gen.uniform() * z;
    std::int32_t next = 0;
    while (next + 1 < c.vocab && (u -= p[next]) > 0) ++next;
    tokens.push_back(next);
  }
  return tokens;
}

// ---- the program ------------------------------------------------------------------------

const char* const kUsage =
    "usage: tiny_lm TEXT_FILE [--steps N] [--batch N] [--block N] [--lr X] [--seed N] [--sample N]";

void parse(int argc, char** argv, TrainOptions& o, Config& c) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!o.text_file.empty()) throw std::runtime_error("more than one text file given; " + std::string(kUsage));
      o.text_file = arg;
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value; " + kUsage);
    const std::string value = argv[++i];
    try {
      if (arg == "--steps") o.steps = std::stoll(value);
      else if (arg == "--batch") o.batch = std::stoll(value);
      else if (arg == "--block") c.block = std::stoll(value);
      else if (arg == "--lr") o.lr = std::stod(value);
      else if (arg == "--seed") o.seed = std::stoull(value);
      else if (arg == "--sample") o.sample = std::stoll(value);
      else throw std::runtime_error("unknown option " + arg + "; " + kUsage);
    } catch (const std::logic_error&) {  // std::stoll and friends
      throw std::runtime_error(arg + " needs a number, got '" + value + "'");
    }
  }
  if (o.text_file.empty()) throw std::runtime_error("no text file given; " + std::string(kUsage));
  if (o.steps < 1 || o.batch < 1 || c.block < 2 || o.sample < 0 || !(o.lr > 0))
    throw std::runtime_error("--steps and --batch must be >= 1, --block >= 2, --sample >= 0, --lr > 0");
}

int run(int argc, char** argv) {
  TrainOptions opt;
  Config config;
  parse(argc, argv, opt, config);
  const std::vector<std::int32_t> text = read_bytes(opt.text_file);
  if (static_cast<std::int64_t>(text.size()) < config.block + 2)
    throw std::runtime_error("the text file '" + opt.text_file + "' has " + std::to_string(text.size()) +
                             " bytes; it needs at least " + std::to_string(config.block + 2));

  Generator init(opt.seed), data(opt.seed + 1), sampling(opt.seed + 2);
  TinyLM model(config, init);
  std::printf("tiny_lm: %lld parameters, %zu bytes of text, %lld steps of %lld x %lld bytes\n",
              static_cast<long long>(model.num_parameters()), text.size(), static_cast<long long>(opt.steps),
              static_cast<long long>(opt.batch), static_cast<long long>(config.block));

  AdamConfig adam;
  adam.lr = opt.lr;
  adam.beta2 = 0.98;
  adam.weight_decay = 0.01;  // decoupled: AdamW
  Adam optimizer(model.named_parameters(), adam);
  const LrSchedule schedule{.kind = LrSchedule::Kind::WarmupCosine,
                            .base_lr = opt.lr,
                            .warmup_steps = std::max<std::int64_t>(1, opt.steps / 10),
                            .total_steps = opt.steps,
                            .min_lr = opt.lr / 10};

  const std::int64_t log_every = std::max<std::int64_t>(1, opt.steps / 10);
  double window_sum = 0, first_mean = NAN, last_mean = NAN;
  std::int64_t window_steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < opt.steps; ++step) {
    const Batch b = random_batch(text, opt.batch, config.block, data);
    optimizer.set_lr(schedule.at(step));
    Tensor loss = ops::cross_entropy(ops::reshape(model.forward(b.x), {opt.batch * config.block, config.vocab}), b.y);
    loss.backward();
    optimizer.step(clip_scale(grad_norm(model.parameters()), /*max_norm=*/1.0));
    optimizer.zero_grad();

    const double value = loss.item();
    if (!std::isfinite(value))
      throw std::runtime_error("the loss became " + std::to_string(value) + " at step " + std::to_string(step + 1));
    window_sum += value;
    ++window_steps;
    if ((step + 1) % log_every == 0 || step + 1 == opt.steps) {
      last_mean = window_sum / double(window_steps);
      if (std::isnan(first_mean)) first_mean = last_mean;
      std::printf("step %5lld  loss %.4f  (mean over %lld steps)  lr %.2e\n", static_cast<long long>(step + 1),
                  last_mean, static_cast<long long>(window_steps), optimizer.lr());
      std::fflush(stdout);
      window_sum = 0;
      window_steps = 0;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained in %.1f s; loss %.4f at the start, %.4f at the end\n", seconds, first_mean, last_mean);

  // Sample from the model, prompted with the first bytes of the file.
  const std::vector<std::int32_t> prompt(text.begin(), text.begin() + std::min<std::int64_t>(16, config.block));
  const std::vector<std::int32_t> out = sample(model, config, prompt, opt.sample, /*temperature=*/0.8, sampling);
  std::string shown;
  for (std::int32_t t : out) {
    const auto ch = static_cast<unsigned char>(t);
    shown += (ch < 0x20 && ch != '\n' && ch != '\t') ? '?' : static_cast<char>(ch);
  }
  std::printf("---- sample ----\n%s\n----------------\n", shown.c_str());

  if (!(last_mean < 0.8 * first_mean)) {
    std::fprintf(stderr, "FAIL: the loss did not fall enough: %.4f at the end vs %.4f at the start (want < 0.8x)\n",
                 last_mean, first_mean);
    return 1;
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
