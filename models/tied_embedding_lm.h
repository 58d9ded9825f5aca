// What TransformerLM, GrassmannLM and SheafStateLM share: the input is a token embedding
// plus a learned position embedding (or none: LMConfig::positions), the output head is the token table itself (tied), and in between
// sits a stack of post-LN blocks that each model defines. Also the feed-forward
// sub-layer, which both models use unchanged (PAPERS.md §1, §2 step 6).
//
// The split forward(ids) = forward_embedded(embed_tokens(ids)) exists for the causality
// audit (models/audit.h): token ids are integers, so to ask "does the output at t depend
// on the input at s > t?" through gradients, the audit makes the embedded tokens a leaf
// tensor and differentiates with respect to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/rng.h"
#include "models/lm.h"
#include "ops/nn.h"

namespace wedge::models {

// W2 · GELU(W1 h + b1) + b2, position-wise (no dropout, no residual: the block adds those).
class FeedForward : public Module {
 public:
  FeedForward(std::int64_t d_model, std::int64_t d_ff, Generator& init);
  Tensor forward(const Tensor& h) const;

 private:
  nn::Linear& w1_;
  nn::Linear& w2_;
};

// Parameter count per named part, in order of first appearance ("token_embedding",
// "attention.qkv", "ffn.w1", ...), each summed over all blocks.
std::vector<std::pair<std::string, std::int64_t>> parameter_parts(const Module& model);

class TiedEmbeddingLM : public LanguageModel {
 public:
  // ids (B, L) int32, 1 <= L <= block -> logits (B, L, V).
  Tensor forward(const Tensor& ids) final;
  Tensor hidden_states(const Tensor& ids) final;
  Tensor loss(const Tensor& ids, const Tensor& targets, int ignore_index = -100) final;
  const LMConfig& config() const final { return config_; }
  // One row per parameter group in order of first appearance ("token_embedding",
  // "attention.qkv", "ffn.w1", ...), each summed over all layers.
  std::vector<std::pair<std::string, std::int64_t>> parameter_breakdown() const final;

  // E[x]: the token embedding rows, (B, L, d). Checks the ids.
  Tensor embed_tokens(const Tensor& ids) const;
  // Everything after the token lookup: + P[0..L), embedding dropout, the blocks, and the
  // tied head. h0 (B, L, d) -> logits (B, L, V).
  Tensor forward_embedded(const Tensor& h0);

  // The stream every dropout mask in this model draws from. Its state (seed, offset) is
  // what a checkpoint must store for a resumed run to drop the same units.
  Generator& dropout_generator() { return dropout_gen_; }
  const Generator& dropout_generator() const { return dropout_gen_; }

  const Tensor& token_table() const { return token_embedding_.weight; }

  // A stream over this model (LanguageModel::open_stream): the embedding and the head are
  // here; each model keeps its blocks' state (BlocksState) and runs its blocks over the
  // new positions only (run_blocks_stream).
  std::unique_ptr<Stream> open_stream(std::int64_t batch) final;

  // What a model's blocks keep of one stream's past between calls.
  struct BlocksState {
    virtual ~BlocksState() = default;
    virtual std::int64_t bytes() const = 0;
    // The memory of `tensors` (undefined ones count 0), for bytes().
    static std::int64_t bytes_of(const std::vector<Tensor>& tensors);
  };

 protected:
  // forward_embedded without the head: the blocks' output (B, L, d).
  Tensor blocks_of_embedded(const Tensor& h0);
  // Validates `config`, seeds the generators and builds the embeddings; derived classes
  // then build their blocks with init_gen_ (so the same seed gives the same model).
  explicit TiedEmbeddingLM(const LMConfig& config);
  // The model-specific stack of blocks: (B, L, d) -> (B, L, d).
  virtual Tensor run_blocks(const Tensor& h) = 0;
  // The empty state of a stream of `batch` sequences (at position 0).
  virtual std::unique_ptr<BlocksState> new_blocks_state(std::int64_t batch) const = 0;
  // run_blocks for the positions [position, position + n) of a stream, h (B, n, d), given
  // what `state` keeps of the positions before; advances `state` past them. Equals rows
  // [position, position + n) of run_blocks over the whole sequence.
  virtual Tensor run_blocks_stream(const Tensor& h, std::int64_t position, BlocksState& state) = 0;

  LMConfig config_;
  Generator init_gen_;     // weight initialisation (used while constructing)
  Generator dropout_gen_;  // dropout masks (nn::Dropout keeps a pointer to it)

 private:
  // E[x] of any length (a stream's chunk may pass --block when there is no position table).
  Tensor stream_embed(const Tensor& ids) const;
  // h + P[first, first + L) (h unchanged with --positions none).
  Tensor with_positions(const Tensor& h, std::int64_t first) const;

  nn::Embedding& token_embedding_;     // E (V, d), also the output head
  nn::Embedding* position_embedding_;  // P (block, d); null with --positions none
  nn::Dropout& embedding_dropout_;

  friend class TiedStream;
};

}  // namespace wedge::models
