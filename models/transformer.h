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

// Causal multi-head self-attention: one fused Q/K/V projection (d -> 3d, with bias),
// softmax(q k^T / sqrt(d_head) + causal mask) v per head, and the output projection W_O.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(std::int64_t d_model, std::int64_t heads, Generator& init);
  Tensor forward(const Tensor& h) const;  // (B, L, d) -> (B, L, d)

 private:
  std::int64_t heads_;
  nn::Linear& qkv_;
  nn::Linear& out_;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(const LMConfig& config, Generator& init, Generator& dropout);
  Tensor forward(const Tensor& h) const;

 private:
  CausalSelfAttention& attention_;
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

 private:
  std::vector<TransformerBlock*> blocks_;  // owned through register_module
};

}  // namespace wedge::models
