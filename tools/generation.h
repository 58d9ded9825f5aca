// Sampling text from a language model through its stream (models/lm.h): the prompt is read
// once in parallel (prefill), then every new token costs one step of the stream — the
// model's state of the past is kept, never recomputed. Behind `wedge generate` and the
// sample printed after a synthetic training run.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "models/lm.h"

namespace wedge::tools {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the most likely token)
  std::int64_t top_k = 40;   // 0: every token
  double top_p = 1.0;        // nucleus: the fewest tokens whose probability reaches top_p (1: all)
  std::uint64_t seed = 0;    // sample i draws from seed + i: the same seed gives the same text
  std::vector<std::int32_t> never;  // ids never sampled (special tokens)
};

// What a generation measured.
struct GenerationStats {
  std::int64_t prompt_tokens = 0;   // the prompt as given
  std::int64_t context_tokens = 0;  // the part of it the model read (at most what a stream holds)
  std::int64_t new_tokens = 0;      // per sample
  std::int64_t samples = 0;
  double prefill_seconds = 0;       // reading the prompt
  double decode_seconds = 0;        // every later step
  std::int64_t decode_steps = 0;
  std::int64_t refills = 0;         // times the context was full and its latest half re-read
  std::int64_t state_bytes = 0;     // the largest stream state held
};

// Continues `prompt` (at least one token) by max_new tokens, `samples` times, decoded
// together as one batch of streams. The prompt is read in chunks of at most the model's
// block. When it is longer than a stream holds (a learned position table ends at the
// block), only its last block tokens are read, and when a stream is full the latest half
// of the context is read again into a fresh stream — a sliding window. A model without a
// position table (--positions none) reads the whole prompt and never slides. on_token(sample, id), when given, sees each new token as it is drawn.
// Returns prompt + new tokens for every sample.
std::vector<std::vector<std::int32_t>> generate(models::LanguageModel& model, const std::vector<std::int32_t>& prompt,
                                                std::int64_t max_new, std::int64_t samples, const SamplingOptions& options,
                                                const std::function<void(std::int64_t, std::int32_t)>& on_token = {},
                                                GenerationStats* stats = nullptr);

// One sample (the CLI's default), as generate() with samples = 1.
std::vector<std::int32_t> generate_tokens(models::LanguageModel& model, std::vector<std::int32_t> prompt,
                                          std::int64_t max_new, double temperature, std::int64_t top_k,
                                          std::uint64_t seed);

// The draw from one row of logits (V): temperature, top-k, top-p, the never-sampled ids
// removed first. `uniform` is a number in [0, 1).
std::int32_t sample_token(const std::vector<double>& logits, const SamplingOptions& options, double uniform);

// What scoring a split through streams measured (evaluate_stream).
struct StreamEvalResult {
  double nll = 0;                 // mean over the predicted tokens
  double ppl = 0;
  std::int64_t tokens = 0;        // predicted tokens
  std::int64_t pieces = 0;        // streams started from an empty state
  std::int64_t slides = 0;        // times a full stream re-read the latest half of its context
  std::int64_t state_bytes = 0;   // the largest stream state held
  std::int64_t capacity = 0;      // positions a stream holds (Stream::kUnbounded: no limit)
  double seconds = 0;
};

// Scores `tokens` through streams: cut into consecutive pieces of `context` tokens (0: one
// piece, the whole of them), each read from an empty state in chunks of at most `chunk`
// tokens, every token but a piece's first predicted from the ones before it in its piece.
// The chunking changes no value (a stream's logits equal token-by-token decoding); it only
// bounds the memory of one call. A stream that holds fewer positions than a piece (a
// learned position table ends at --block) slides as generate() does: when full, a fresh
// stream re-reads the latest half of its capacity, and scoring goes on. progress(done,
// total), when given, is called after every chunk.
StreamEvalResult evaluate_stream(models::LanguageModel& model, const std::vector<std::int32_t>& tokens,
                                 std::int64_t context, std::int64_t chunk,
                                 const std::function<void(std::int64_t, std::int64_t)>& progress = {});

// The streamed logits of `tokens` (at most the block) against the full forward's, fed as
// a prefill of `prefill` tokens and then one token at a time: the largest difference
// relative to the largest logit (`wedge generate --check`).
double stream_mismatch(models::LanguageModel& model, const std::vector<std::int32_t>& tokens, std::int64_t prefill);

}  // namespace wedge::tools
