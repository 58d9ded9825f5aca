// TransformerLM (PAPERS.md §1): the decoder-only, post-LN baseline of the Grassmann paper.
//
//   h_0 = E[x_t] + P[t]                                  (then embedding dropout)
//   per block:  h = LN(h + Dropout(MHA_causal(h)))
//               h = LN(h + Dropout(W2 GELU(W1 h + b1) + b2))
//   logits_t = E h_t                                     (tied head, no final LayerNorm)
//
// 6 layers, d 256, d_ff 1024, 4 heads, block 128, vocabulary 30,522: 12,584,960
// parameters (the paper's 12.59 M); 12 layers, block 256: 17,356,288.
#pragma once

#include <cstdint>
#include <vector>

#include "models/tied_embedding_lm.h"

namespace wedge::models {

// Multi-head self-attention: one fused Q/K/V projection (d -> 3d, with bias),
// softmax(q k^T / sqrt(d_head) + mask) v per head, and the output projection W_O.
class SelfAttention : public Module {
 public:
  SelfAttention(std::int64_t d_model, std::int64_t heads, Generator& init);
  // Causal (the language models): the fused flash-style op. (B, L, d) -> (B, L, d).
  Tensor forward(const Tensor& h) const;
  // Bidirectional over the real tokens of padded rows (the sentence-pair encoder):
  // key_bias (B, 1, 1, L) is added to every score, 0 at a real key and -1e9 at padding,
  // so no query sees a padded position.
  Tensor forward(const Tensor& h, const Tensor& key_bias) const;
  // The causal forward for the positions [position, position + n) of a stream, h (B, n, d):
  // their keys and values are written into the caches (B, H, capacity, dh) at those rows,
  // and each query attends to every cached row up to its own position.
  Tensor forward_stream(const Tensor& h, std::int64_t position, Tensor& k_cache, Tensor& v_cache) const;
  std::int64_t heads() const { return heads_; }

 private:
  // (B, L, d) -> q, k, v as (B, H, L, dh) slices of one packed tensor.
  std::vector<Tensor> split_heads(const Tensor& h) const;
  // (B, H, L, dh) -> W_O concat_heads.
  Tensor merge_heads(const Tensor& heads_out) const;

  std::int64_t heads_;
  nn::Linear& qkv_;
  nn::Linear& out_;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(const LMConfig& config, Generator& init, Generator& dropout);
  Tensor forward(const Tensor& h) const;
  // The same block, attention bidirectional over the real tokens (SelfAttention above).
  Tensor forward(const Tensor& h, const Tensor& key_bias) const;
  // The causal forward over positions [position, position + n) of a stream (SelfAttention).
  Tensor forward_stream(const Tensor& h, std::int64_t position, Tensor& k_cache, Tensor& v_cache) const;
  const SelfAttention& attention() const { return attention_; }

 private:
  Tensor feed_forward(const Tensor& h) const;

  SelfAttention& attention_;
  nn::Dropout& attention_dropout_;
  nn::LayerNorm& norm1_;
  FeedForward& ffn_;
  nn::Dropout& ffn_dropout_;
  nn::LayerNorm& norm2_;
};

class TransformerLM : public TiedEmbeddingLM {
 public:
  explicit TransformerLM(const LMConfig& config);

 protected:
  Tensor run_blocks(const Tensor& h) override;
  // Each layer's key and value cache, (B, H, block, dh), filled up to the stream's position.
  std::unique_ptr<BlocksState> new_blocks_state(std::int64_t batch) const override;
  Tensor run_blocks_stream(const Tensor& h, std::int64_t position, BlocksState& state) override;

 private:
  std::vector<TransformerBlock*> blocks_;  // owned through register_module
};

}  // namespace wedge::models
