// The common face of every language model in wedge: ids (B, L) int32 -> logits (B, L, V).
// Tools (train, eval, generate, audit-causal, params, bench-step) only speak to this
// interface and to make_model(), so a new model slots in by adding one case there.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/module.h"
#include "engine/rng.h"
#include "engine/tensor.h"

namespace wedge::models {

// The bounds validate() puts on the sizes (LMConfig and NliConfig alike): far beyond any
// model a machine of today trains, and small enough that no size overflows alone; a
// product of them that overflows is caught by the parameter count (models/param_count.h).
inline constexpr std::int64_t kMaxVocabulary = 2'147'483'647;  // token ids are int32
inline constexpr std::int64_t kMaxLayers = 4096;
inline constexpr std::int64_t kMaxWidth = 1 << 20;   // --d-model, --d-ff, --rank, --state-size, ...
inline constexpr std::int64_t kMaxLength = 1 << 20;  // --block, --patch, --max-length, --window
inline constexpr std::int64_t kMaxTypes = 4096;      // --types: patch types, and experts

struct LMConfig {
  std::string model = "transformer";  // transformer | grassmann | sheaf
  std::int64_t vocab_size = 30522;
  std::int64_t layers = 6;
  std::int64_t d_model = 256;
  std::int64_t d_ff = 1024;
  std::int64_t heads = 4;
  std::int64_t block = 128;  // longest sequence forward() takes (rows of the position table)
  // How the input knows where a token stands: "learned" adds a row of a (block, d) table
  // (the papers' choice, and every stream stops at --block); "none" adds nothing, so the
  // order reaches the model only through its causal mixing (GrassmannLM's offsets,
  // SheafStateLM's scan and cover), and a stream runs without limit (models/README.md).
  std::string positions = "learned";
  double dropout = 0.1;
  // GrassmannLM (PAPERS.md §2)
  std::int64_t rank = 32;                          // r
  std::vector<std::int32_t> windows = {1, 2, 4, 8, 12, 16};  // offsets used by every layer
  std::vector<std::int32_t> window_schedule;       // if non-empty: one offset per layer
  bool mix_out_proj = true;  // the d x d output projection of the mixing block (PAPERS.md)
  // SheafStateLM (models/sheaf.h)
  std::int64_t patch = 16;          // P: tokens per patch
  std::int64_t cover_depth = 4;     // D: the cover {p-1, p-2, ..., p-2^(D-1)}
  std::int64_t types = 4;           // K: patch types, and experts
  std::int64_t state_size = 16;     // N_s: SSM state per channel
  std::int64_t section_dim = 64;    // d_s: patch summaries and glued sections
  std::int64_t expert_d_ff = 160;   // hidden width of each expert
  double energy_weight = 0.01;      // λ: weight of the normalised gluing energy
  double balance_weight = 0.01;     // weight of the expert load-balancing loss
  // TEST ONLY: Grassmann pairs with t+Δ (future); SheafState lets c_p see its own patch.
  // The causality audit must catch both.
  bool leaky = false;
  std::uint64_t seed = 0;

  // Offsets used by layer i.
  std::vector<std::int32_t> offsets_for_layer(std::int64_t i) const;
  // Throws std::invalid_argument naming the flag when the configuration is inconsistent,
  // a size lies outside its bounds (above), a weight is not finite, or the parameter count
  // does not fit in 64 bits.
  void validate() const;
};

void to_json(nlohmann::json& j, const LMConfig& c);
void from_json(const nlohmann::json& j, LMConfig& c);

// Incremental decoding: what B sequences' next tokens need of their past, kept between
// calls, so that each new token costs the same whatever came before it (models/README.md,
// "Streams"). TransformerLM keeps every layer's keys and values (a cache that grows with
// the position); GrassmannLM keeps every layer's last max(Δ) reduced vectors and
// SheafStateLM every layer's scan state and the summaries of the patches its cover can
// still reach — both constant in the position. The logits a stream returns equal
// forward()'s at the same positions (up to float rounding; tests/models/test_stream.cpp).
class Stream {
 public:
  static constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();
  virtual ~Stream() = default;
  // ids (B, n) int32, n >= 1: the next n tokens of each of the B sequences -> logits
  // (B, n, V) of those positions, or (B, 1, V) of the last one when last_only. Runs without
  // gradients; the model must be in eval mode. Fails (naming --block) when the stream would
  // pass capacity().
  virtual Tensor feed(const Tensor& ids, bool last_only = false) = 0;
  virtual std::int64_t batch() const = 0;
  virtual std::int64_t position() const = 0;  // tokens fed so far, per sequence
  // The most positions it holds: the model's block, or kUnbounded (--positions none).
  virtual std::int64_t capacity() const = 0;
  virtual std::int64_t state_bytes() const = 0;  // the memory kept between calls
};

class LanguageModel : public Module {
 public:
  // ids (B, L) int32 with L <= config().block -> logits (B, L, V).
  virtual Tensor forward(const Tensor& ids) = 0;
  // The token states the output head reads, (B, L, d_model): what a frozen backbone hands a
  // sentence-pair classifier (models/nli.h). Causal like forward: state t sees ids[0..t].
  virtual Tensor hidden_states(const Tensor& ids) = 0;
  // The mean cross-entropy of `targets` (B, L) int32 given ids (B, L), rows whose target
  // is ignore_index not counted: cross_entropy(forward(ids)), or the same value computed
  // in less memory (the tied-embedding models run the head and the loss in row blocks,
  // ops::linear_cross_entropy, so the (B L, V) logits never exist whole). With autograd on,
  // it must be the objective's last op (a sum with other terms is fine).
  virtual Tensor loss(const Tensor& ids, const Tensor& targets, int ignore_index = -100);
  virtual const LMConfig& config() const = 0;
  // Parameter count per named part (embeddings, attention/mixing, ffn, norms, ...),
  // for `wedge params`.
  virtual std::vector<std::pair<std::string, std::int64_t>> parameter_breakdown() const = 0;
  // A loss the model adds to the cross-entropy of its latest forward (undefined: none),
  // e.g. SheafStateLM's gluing energy and expert balance terms.
  virtual Tensor auxiliary_loss() const { return Tensor(); }
  // Counts over the whole batch that an auxiliary loss needs and that are no sum of per-row
  // terms (SheafStateLM: how many patches each layer routed to each expert; the balance
  // term multiplies each expert's share of the batch's patches). When a batch runs in pieces
  // (--micro-batch, data parallelism), the trainer adds up batch_counts() of every piece's
  // forward and gives the totals to use_batch_counts() after a piece's forward, before its
  // auxiliary_loss(): each piece's term then is exactly its part of the whole batch's.
  // A forward forgets totals given before it. batch_counts_size() is 0 for models without
  // such counts (the default), and fixed by the configuration otherwise.
  virtual std::size_t batch_counts_size() const { return 0; }
  virtual std::vector<double> batch_counts() const { return {}; }
  virtual void use_batch_counts(std::vector<double> /*totals*/) {}
  // A new stream of `batch` sequences at position 0, on the model's device (Stream above).
  virtual std::unique_ptr<Stream> open_stream(std::int64_t batch) = 0;
  // Model-specific measurements of the latest forward, for metrics.jsonl (empty: none).
  virtual nlohmann::json diagnostics() const { return nlohmann::json::object(); }
};

std::unique_ptr<LanguageModel> make_model(const LMConfig& config);

}  // namespace wedge::models
