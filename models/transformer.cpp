#include "models/transformer.h"

#include <string>

namespace wedge::models {

CausalSelfAttention::CausalSelfAttention(std::int64_t d_model, std::int64_t heads,
                                         Generator& init)
    : heads_(heads),
      qkv_(register_module("qkv", std::make_shared<nn::Linear>(d_model, 3 * d_model, init))),
      out_(register_module("out", std::make_shared<nn::Linear>(d_model, d_model, init))) {}

Tensor CausalSelfAttention::forward(const Tensor& h) const {
  const std::int64_t B = h.size(0), L = h.size(1), d = h.size(2);
  const std::int64_t H = heads_, dh = d / H;
  // [q | k | v] along the last axis, each split into H heads of dh:
  // (B, L, 3d) -> (B, L, 3, H, dh) -> (3, B, H, L, dh), packed once so that q, k and v
  // are contiguous (B, H, L, dh) slices of it.
  const Tensor qkv = ops::contiguous(
      ops::permute(ops::reshape(qkv_.forward(h), {B, L, 3, H, dh}), {2, 0, 3, 1, 4}));
  auto head_slice = [&](std::int64_t i) {
    return ops::reshape(ops::narrow(qkv, 0, i, 1), {B, H, L, dh});
  };
  const Tensor heads_out = ops::attention(head_slice(0), head_slice(1), head_slice(2), true);
  // Concatenate the heads back: (B, H, L, dh) -> (B, L, H, dh) -> (B, L, d), then W_O.
  const Tensor merged =
      ops::reshape(ops::contiguous(ops::permute(heads_out, {0, 2, 1, 3})), {B, L, d});
  return out_.forward(merged);
}

TransformerBlock::TransformerBlock(const LMConfig& c, Generator& init, Generator& dropout)
    : attention_(register_module("attention",
                                 std::make_shared<CausalSelfAttention>(c.d_model, c.heads, init))),
      attention_dropout_(
          register_module("attention_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm1_(register_module("norm1", std::make_shared<nn::LayerNorm>(c.d_model))),
      ffn_(register_module("ffn", std::make_shared<FeedForward>(c.d_model, c.d_ff, init))),
      ffn_dropout_(
          register_module("ffn_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm2_(register_module("norm2", std::make_shared<nn::LayerNorm>(c.d_model))) {}

Tensor TransformerBlock::forward(const Tensor& h_in) const {
  Tensor h = norm1_.forward(h_in + attention_dropout_.forward(attention_.forward(h_in)));
  return norm2_.forward(h + ffn_dropout_.forward(ffn_.forward(h)));
}

TransformerLM::TransformerLM(const LMConfig& config) : TiedEmbeddingLM(config) {
  for (std::int64_t i = 0; i < config_.layers; ++i)
    blocks_.push_back(&register_module(
        "blocks." + std::to_string(i),
        std::make_shared<TransformerBlock>(config_, init_gen_, dropout_gen_)));
}

Tensor TransformerLM::run_blocks(const Tensor& h_in) {
  Tensor h = h_in;
  for (TransformerBlock* block : blocks_) h = block->forward(h);
  return h;
}

}  // namespace wedge::models
