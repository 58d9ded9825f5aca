#include "models/transformer.h"

#include <cmath>
#include <string>

#include "engine/profile.h"

namespace wedge::models {

SelfAttention::SelfAttention(std::int64_t d_model, std::int64_t heads, Generator& init)
    : heads_(heads),
      qkv_(register_module("qkv", std::make_shared<nn::Linear>(d_model, 3 * d_model, init))),
      out_(register_module("out", std::make_shared<nn::Linear>(d_model, d_model, init))) {}

std::vector<Tensor> SelfAttention::split_heads(const Tensor& h) const {
  const std::int64_t B = h.size(0), L = h.size(1), d = h.size(2);
  const std::int64_t H = heads_, dh = d / H;
  // [q | k | v] along the last axis, each split into H heads of dh:
  // (B, L, 3d) -> (B, L, 3, H, dh) -> (3, B, H, L, dh), packed once so that q, k and v
  // are contiguous (B, H, L, dh) slices of it.
  const Tensor qkv = ops::contiguous(
      ops::permute(ops::reshape(qkv_.forward(h), {B, L, 3, H, dh}), {2, 0, 3, 1, 4}));
  return ops::unbind(qkv, 0);
}

Tensor SelfAttention::merge_heads(const Tensor& heads_out) const {
  // Concatenate the heads back: (B, H, L, dh) -> (B, L, H, dh) -> (B, L, d), then W_O.
  const std::int64_t B = heads_out.size(0), L = heads_out.size(2);
  const Tensor merged = ops::reshape(ops::contiguous(ops::permute(heads_out, {0, 2, 1, 3})),
                                     {B, L, heads_out.size(1) * heads_out.size(3)});
  return out_.forward(merged);
}

Tensor SelfAttention::forward(const Tensor& h) const {
  const profile::Part part("attention");
  const std::vector<Tensor> qkv = split_heads(h);
  return merge_heads(ops::attention(qkv[0], qkv[1], qkv[2], true));
}

Tensor SelfAttention::forward(const Tensor& h, const Tensor& key_bias) const {
  const std::vector<Tensor> qkv = split_heads(h);
  const double scale = 1.0 / std::sqrt(double(qkv[0].size(3)));
  // Sentence pairs are short (at most 95 tokens here): the (B, H, L, L) scores are small,
  // and the composed ops take the padding mask the fused op has no argument for.
  const Tensor scores = ops::matmul(qkv[0], ops::transpose(qkv[1], 2, 3)) * scale + key_bias;
  return merge_heads(ops::matmul(ops::softmax(scores, 3), qkv[2]));
}

Tensor SelfAttention::forward_stream(const Tensor& h, std::int64_t position, Tensor& k_cache,
                                     Tensor& v_cache) const {
  const std::int64_t n = h.size(1);
  const std::vector<Tensor> qkv = split_heads(h);
  ops::narrow(k_cache, 2, position, n).copy_(qkv[1]);
  ops::narrow(v_cache, 2, position, n).copy_(qkv[2]);
  // Query i of the chunk sits at position + i and sees the cached rows 0 .. position + i.
  const Tensor keys = ops::narrow(k_cache, 2, 0, position + n);
  const Tensor values = ops::narrow(v_cache, 2, 0, position + n);
  return merge_heads(ops::attention_decode(qkv[0], keys, values));
}

TransformerBlock::TransformerBlock(const LMConfig& c, Generator& init, Generator& dropout)
    : attention_(register_module("attention",
                                 std::make_shared<SelfAttention>(c.d_model, c.heads, init))),
      attention_dropout_(
          register_module("attention_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm1_(register_module("norm1", std::make_shared<nn::LayerNorm>(c.d_model))),
      ffn_(register_module("ffn", std::make_shared<FeedForward>(c.d_model, c.d_ff, init))),
      ffn_dropout_(
          register_module("ffn_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm2_(register_module("norm2", std::make_shared<nn::LayerNorm>(c.d_model))) {}

// Post-LN: each sublayer's output is dropped, added to its input and normalised, in one
// fused pass (nn::LayerNorm::forward_residual).
Tensor TransformerBlock::feed_forward(const Tensor& h) const {
  return norm2_.forward_residual(h, ffn_.forward(h), ffn_dropout_).out;
}

Tensor TransformerBlock::forward(const Tensor& h_in) const {
  const profile::Part part("residual, dropout, norm");  // what attention and the FFN leave
  return feed_forward(norm1_.forward_residual(h_in, attention_.forward(h_in), attention_dropout_).out);
}

Tensor TransformerBlock::forward(const Tensor& h_in, const Tensor& key_bias) const {
  return feed_forward(norm1_.forward_residual(h_in, attention_.forward(h_in, key_bias), attention_dropout_).out);
}

Tensor TransformerBlock::forward_stream(const Tensor& h_in, std::int64_t position, Tensor& k_cache,
                                        Tensor& v_cache) const {
  return feed_forward(
      norm1_.forward_residual(h_in, attention_.forward_stream(h_in, position, k_cache, v_cache), attention_dropout_)
          .out);
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

namespace wedge::models {

namespace {

struct KeyValueCache final : TiedEmbeddingLM::BlocksState {
  std::vector<Tensor> keys, values;  // per layer, (B, H, block, dh)
  std::int64_t bytes() const override { return bytes_of(keys) + bytes_of(values); }
};

}  // namespace

std::unique_ptr<TiedEmbeddingLM::BlocksState> TransformerLM::new_blocks_state(std::int64_t batch) const {
  auto cache = std::make_unique<KeyValueCache>();
  const Tensor& table = token_table();
  const std::int64_t H = config_.heads, dh = config_.d_model / config_.heads;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    cache->keys.push_back(Tensor::zeros({batch, H, config_.block, dh}, table.dtype(), table.device()));
    cache->values.push_back(Tensor::zeros({batch, H, config_.block, dh}, table.dtype(), table.device()));
  }
  return cache;
}

Tensor TransformerLM::run_blocks_stream(const Tensor& h_in, std::int64_t position, BlocksState& state) {
  auto& cache = static_cast<KeyValueCache&>(state);
  Tensor h = h_in;
  for (std::size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward_stream(h, position, cache.keys[i], cache.values[i]);
  return h;
}

}  // namespace wedge::models
