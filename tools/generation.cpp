#include "tools/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "data/wikitext.h"
#include "engine/autograd.h"
#include "engine/rng.h"
#include "ops/ops.h"

namespace wedge::tools {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Device model_device(const Module& model) {
  const std::vector<Tensor> params = model.parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

// The last `n` tokens of every sample, (samples, n) int32.
Tensor latest(const std::vector<std::vector<std::int32_t>>& tokens, std::int64_t n) {
  std::vector<std::int32_t> ids;
  for (const auto& t : tokens) ids.insert(ids.end(), t.end() - n, t.end());
  return Tensor::from_vector(ids, {static_cast<std::int64_t>(tokens.size()), n});
}

// Feeds ids (B, n) to `stream` in chunks of at most `chunk` tokens: the logits of every
// position (B, n, V), or of the last one (B, 1, V) when last_only.
Tensor feed_in_chunks(models::Stream& stream, const Tensor& ids, std::int64_t chunk, bool last_only) {
  const std::int64_t n = ids.size(1);
  std::vector<Tensor> parts;
  for (std::int64_t a = 0; a < n; a += chunk) {
    const std::int64_t m = std::min(chunk, n - a);
    const bool last = a + m == n;
    Tensor logits = stream.feed(ops::narrow(ids, 1, a, m), last_only);
    if (!last_only || last) parts.push_back(std::move(logits));
  }
  return parts.size() == 1 ? parts.front() : ops::cat(parts, 1);
}

}  // namespace

std::int32_t sample_token(const std::vector<double>& logits, const SamplingOptions& o, double uniform) {
  const auto V = static_cast<std::int64_t>(logits.size());
  std::vector<char> banned(static_cast<std::size_t>(V), 0);
  for (const std::int32_t id : o.never)
    if (id >= 0 && id < V) banned[static_cast<std::size_t>(id)] = 1;
  std::vector<std::int32_t> idx;
  idx.reserve(static_cast<std::size_t>(V));
  for (std::int64_t v = 0; v < V; ++v)
    if (!banned[static_cast<std::size_t>(v)]) idx.push_back(static_cast<std::int32_t>(v));
  if (idx.empty()) throw std::invalid_argument("generate: every token of the vocabulary is excluded from sampling");
  // Most likely first; equal logits in id order, so a draw never depends on the sort.
  auto before = [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (o.temperature <= 0) return *std::min_element(idx.begin(), idx.end(), before);
  const auto n = static_cast<std::int64_t>(idx.size());
  const std::int64_t k = o.top_k > 0 ? std::min(o.top_k, n) : n;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  const double top = logits[idx[0]];
  std::vector<double> p(static_cast<std::size_t>(k));
  double z = 0;
  for (std::int64_t j = 0; j < k; ++j) z += p[j] = std::exp((logits[idx[j]] - top) / o.temperature);
  // Nucleus: keep the fewest most likely tokens whose probabilities reach top_p.
  std::int64_t kept = k;
  if (o.top_p < 1) {
    double mass = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      mass += p[j] / z;
      if (mass >= o.top_p) {
        kept = j + 1;
        break;
      }
    }
    z = 0;
    for (std::int64_t j = 0; j < kept; ++j) z += p[j];
  }
  double u = uniform * z;
  for (std::int64_t j = 0; j < kept; ++j) {
    if (u < p[j]) return idx[j];
    u -= p[j];
  }
  return idx[kept - 1];
}

std::vector<std::vector<std::int32_t>> generate(models::LanguageModel& model, const std::vector<std::int32_t>& prompt,
                                                std::int64_t max_new, std::int64_t samples, const SamplingOptions& options,
                                                const std::function<void(std::int64_t, std::int32_t)>& on_token,
                                                GenerationStats* stats_out) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt encodes to no tokens");
  if (samples < 1) throw std::invalid_argument(fmt::format("generate: --num-samples {} must be at least 1", samples));
  if (max_new < 0) throw std::invalid_argument(fmt::format("generate: --max-new-tokens {} must be at least 0", max_new));
  NoGradGuard no_grad;
  model.eval();
  const std::int64_t block = model.config().block, V = model.config().vocab_size;
  const Device device = model_device(model);
  std::vector<std::vector<std::int32_t>> tokens(static_cast<std::size_t>(samples), prompt);
  std::vector<Generator> draws;
  for (std::int64_t i = 0; i < samples; ++i) draws.emplace_back(options.seed + static_cast<std::uint64_t>(i));

  GenerationStats stats;
  stats.samples = samples;
  stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  std::unique_ptr<models::Stream> stream = model.open_stream(samples);
  const std::int64_t capacity = stream->capacity();
  stats.context_tokens = std::min(capacity, stats.prompt_tokens);
  // A fresh stream over the latest n tokens of every sample: the next token's logits.
  auto read = [&](std::int64_t n) {
    stream = model.open_stream(samples);
    const Tensor logits = feed_in_chunks(*stream, latest(tokens, n).to(device), block, true);
    stats.state_bytes = std::max(stats.state_bytes, stream->state_bytes());
    return logits;
  };
  auto to_host = [&](const Tensor& logits) { return logits.to(DType::F64).to_vector<double>(); };  // (samples x V)

  const auto t0 = Clock::now();
  std::vector<double> host = max_new > 0 ? to_host(read(stats.context_tokens)) : std::vector<double>();
  stats.prefill_seconds = seconds_since(t0);
  const auto t1 = Clock::now();
  for (std::int64_t step = 0; step < max_new; ++step) {
    std::vector<std::int32_t> next(static_cast<std::size_t>(samples));
    for (std::int64_t i = 0; i < samples; ++i) {
      const std::vector<double> row(host.begin() + i * V, host.begin() + (i + 1) * V);
      next[static_cast<std::size_t>(i)] = sample_token(row, options, draws[static_cast<std::size_t>(i)].uniform());
      tokens[static_cast<std::size_t>(i)].push_back(next[static_cast<std::size_t>(i)]);
      if (on_token) on_token(i, next[static_cast<std::size_t>(i)]);
    }
    if (step + 1 == max_new) break;
    if (stream->position() == capacity) {
      // The learned position table ends here: re-read the latest half of the context.
      host = to_host(read(std::max<std::int64_t>(1, capacity / 2)));
      ++stats.refills;
    } else {
      host = to_host(stream->feed(Tensor::from_vector(next, {samples, 1}).to(device), true));
    }
    ++stats.decode_steps;
  }
  stats.decode_seconds = seconds_since(t1);
  stats.new_tokens = max_new;
  if (stats_out != nullptr) *stats_out = stats;
  return tokens;
}

std::vector<std::int32_t> generate_tokens(models::LanguageModel& model, std::vector<std::int32_t> prompt,
                                          std::int64_t max_new, double temperature, std::int64_t top_k,
                                          std::uint64_t seed) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.seed = seed;
  return generate(model, prompt, max_new, 1, o).front();
}

StreamEvalResult evaluate_stream(models::LanguageModel& model, const std::vector<std::int32_t>& tokens,
                                 std::int64_t context, std::int64_t chunk,
                                 const std::function<void(std::int64_t, std::int64_t)>& progress) {
  const auto total = static_cast<std::int64_t>(tokens.size());
  if (context < 0 || context == 1)
    throw std::invalid_argument(fmt::format("stream evaluation: --context {} must be 0 (the whole split) or at least 2",
                                            context));
  if (chunk < 1) throw std::invalid_argument(fmt::format("stream evaluation: chunks of {} tokens", chunk));
  if (total < 2)
    throw std::runtime_error(fmt::format("stream evaluation: the split holds {} tokens; at least 2 are needed to predict one",
                                         total));
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model_device(model);
  const std::int64_t piece = context == 0 ? total : context;
  StreamEvalResult r;
  double nll_sum = 0;
  const auto t0 = Clock::now();
  for (std::int64_t begin = 0; begin + 1 < total; begin += piece) {
    const std::int64_t end = std::min(total, begin + piece);
    std::unique_ptr<models::Stream> stream = model.open_stream(1);
    r.capacity = stream->capacity();
    ++r.pieces;
    for (std::int64_t at = begin; at < end;) {
      if (stream->position() == stream->capacity()) {
        // Full: a fresh stream re-reads the latest half (its last logits predict tokens[at],
        // already scored).
        const std::int64_t keep = std::max<std::int64_t>(1, stream->capacity() / 2);
        stream = model.open_stream(1);
        const std::vector<std::int32_t> recent(tokens.begin() + (at - keep), tokens.begin() + at);
        feed_in_chunks(*stream, Tensor::from_vector(recent, {1, keep}).to(device), chunk, true);
        ++r.slides;
      }
      const std::int64_t n = std::min({chunk, end - at, stream->capacity() - stream->position()});
      const std::vector<std::int32_t> ids(tokens.begin() + at, tokens.begin() + at + n);
      // Row j predicts tokens[at + j + 1]; the piece's last token predicts nothing here.
      std::vector<std::int32_t> targets(tokens.begin() + at + 1, tokens.begin() + std::min(end, at + n + 1));
      targets.resize(static_cast<std::size_t>(n), data::kIgnoreTarget);
      const auto predicted = static_cast<std::int64_t>(std::count_if(
          targets.begin(), targets.end(), [](std::int32_t t) { return t != data::kIgnoreTarget; }));
      const Tensor logits = stream->feed(Tensor::from_vector(ids, {1, n}).to(device));
      if (predicted > 0) {
        const Tensor loss = ops::cross_entropy(ops::reshape(logits, {n, -1}),
                                               Tensor::from_vector(targets, {n}).to(device), data::kIgnoreTarget);
        nll_sum += loss.item() * static_cast<double>(predicted);
        r.tokens += predicted;
      }
      r.state_bytes = std::max(r.state_bytes, stream->state_bytes());
      at += n;
      if (progress) progress(at, total);
    }
  }
  model.train(was_training);
  r.seconds = seconds_since(t0);
  r.nll = nll_sum / static_cast<double>(r.tokens);
  r.ppl = std::exp(r.nll);
  return r;
}

double stream_mismatch(models::LanguageModel& model, const std::vector<std::int32_t>& tokens, std::int64_t prefill) {
  const auto L = static_cast<std::int64_t>(tokens.size());
  if (L < 1 || L > model.config().block || prefill < 1 || prefill > L)
    throw std::invalid_argument(fmt::format("stream check: {} tokens with a prefill of {} (block {})", L, prefill,
                                            model.config().block));
  NoGradGuard no_grad;
  model.eval();
  const Device device = model_device(model);
  const Tensor ids = Tensor::from_vector(tokens, {1, L}).to(device);
  const Tensor full = model.forward(ids);
  auto stream = model.open_stream(1);
  std::vector<Tensor> parts = {stream->feed(ops::narrow(ids, 1, 0, prefill))};
  for (std::int64_t t = prefill; t < L; ++t) parts.push_back(stream->feed(ops::narrow(ids, 1, t, 1)));
  const std::vector<double> a = full.to(DType::F64).to_vector<double>();
  const std::vector<double> b = ops::cat(parts, 1).to(DType::F64).to_vector<double>();
  double largest = 0, diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::abs(a[i]));
    diff = std::max(diff, std::abs(a[i] - b[i]));
  }
  return largest > 0 ? diff / largest : diff;
}

}  // namespace wedge::tools
