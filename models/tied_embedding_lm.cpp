#include "models/tied_embedding_lm.h"

#include <fmt/format.h>

#include "engine/dtype.h"
#include "engine/profile.h"

namespace wedge::models {

namespace {

LMConfig validated(const LMConfig& config) {
  config.validate();
  return config;
}

}  // namespace

FeedForward::FeedForward(std::int64_t d_model, std::int64_t d_ff, Generator& init)
    : w1_(register_module("w1", std::make_shared<nn::Linear>(d_model, d_ff, init))),
      w2_(register_module("w2", std::make_shared<nn::Linear>(d_ff, d_model, init))) {}

Tensor FeedForward::forward(const Tensor& h) const {
  const profile::Part part("feed-forward");
  return w2_.forward(w1_.forward_gelu(h));
}

TiedEmbeddingLM::TiedEmbeddingLM(const LMConfig& config)
    : config_(validated(config)),
      init_gen_(config.seed),
      dropout_gen_(init_gen_.next_seed()),
      token_embedding_(register_module(
          "token_embedding",
          std::make_shared<nn::Embedding>(config.vocab_size, config.d_model, init_gen_))),
      position_embedding_(config.positions == "none"
                              ? nullptr
                              : &register_module("position_embedding", std::make_shared<nn::Embedding>(
                                                                           config.block, config.d_model, init_gen_))),
      embedding_dropout_(register_module(
          "embedding_dropout", std::make_shared<nn::Dropout>(config.dropout, dropout_gen_))) {}

Tensor TiedEmbeddingLM::embed_tokens(const Tensor& ids) const {
  if (ids.dim() == 2 && (ids.size(1) < 1 || ids.size(1) > config_.block))
    fail(fmt::format("{}.forward", config_.model),
         fmt::format("sequence length {} must lie in [1, --block {}]", ids.size(1), config_.block));
  return stream_embed(ids);
}

Tensor TiedEmbeddingLM::stream_embed(const Tensor& ids) const {
  const std::string op = fmt::format("{}.forward", config_.model);
  if (ids.dim() != 2) fail(op, "ids must be (batch, length), got " + shape_str(ids.shape()));
  if (ids.dtype() != DType::I32) fail(op, "ids must be int32, got " + ids.str());
  const profile::Part part("embedding");
  return token_embedding_.forward(ids);
}

Tensor TiedEmbeddingLM::blocks_of_embedded(const Tensor& h0) {
  const std::string op = fmt::format("{}.forward", config_.model);
  if (h0.dim() != 3 || h0.size(2) != config_.d_model)
    fail(op, fmt::format("embedded input must be (batch, length, {}), got {}", config_.d_model,
                         shape_str(h0.shape())));
  const std::int64_t L = h0.size(1);
  if (L < 1 || L > config_.block)
    fail(op, fmt::format("sequence length {} must lie in [1, --block {}]", L, config_.block));
  // h_t = E[x_t] + P[t]
  Tensor h;
  {
    const profile::Part part("embedding");
    h = embedding_dropout_.forward(with_positions(h0, 0));
  }
  return run_blocks(h);
}

// Tied head, no final LayerNorm: logits_t = E h_t.
Tensor TiedEmbeddingLM::forward_embedded(const Tensor& h0) {
  const Tensor h = blocks_of_embedded(h0);
  const profile::Part part("head");
  return ops::linear(h, token_embedding_.weight);
}

Tensor TiedEmbeddingLM::forward(const Tensor& ids) { return forward_embedded(embed_tokens(ids)); }

Tensor TiedEmbeddingLM::hidden_states(const Tensor& ids) { return blocks_of_embedded(embed_tokens(ids)); }

Tensor TiedEmbeddingLM::loss(const Tensor& ids, const Tensor& targets, int ignore_index) {
  const Tensor h = blocks_of_embedded(embed_tokens(ids));
  const profile::Part part("head and loss");
  return ops::linear_cross_entropy(h, token_embedding_.weight, targets, ignore_index);
}

Tensor TiedEmbeddingLM::with_positions(const Tensor& h, std::int64_t first) const {
  if (position_embedding_ == nullptr) return h;
  return h + ops::narrow(position_embedding_->weight, 0, first, h.size(1));
}

// ---- streams -------------------------------------------------------------------------------

class TiedStream final : public Stream {
 public:
  TiedStream(TiedEmbeddingLM& model, std::int64_t batch)
      : model_(model), batch_(batch), state_(model.new_blocks_state(batch)) {}

  Tensor feed(const Tensor& ids_in, bool last_only) override {
    const LMConfig& c = model_.config_;
    const std::string op = fmt::format("{} stream", c.model);
    if (model_.is_training()) fail(op, "a stream runs the model in eval mode; call eval() first");
    if (ids_in.dim() != 2 || ids_in.size(0) != batch_ || ids_in.size(1) < 1)
      fail(op, fmt::format("ids must be (batch {}, n >= 1), got {}", batch_, shape_str(ids_in.shape())));
    const std::int64_t n = ids_in.size(1);
    if (n > capacity() - position_)
      fail(op, fmt::format("{} more tokens at position {} pass the model's context (--block {}); the "
                           "learned position table has no row beyond it",
                           n, position_, c.block));
    NoGradGuard no_grad;
    const Tensor& table = model_.token_embedding_.weight;
    const Tensor ids = ids_in.to(table.device());
    // h_t = E[x_t] + P[t] for the new positions only (embedding dropout is off in eval).
    Tensor h = model_.with_positions(model_.stream_embed(ids), position_);
    h = model_.run_blocks_stream(h, position_, *state_);
    position_ += n;
    if (last_only && n > 1) h = ops::narrow(h, 1, n - 1, 1);
    return ops::linear(h, table);  // the tied head, for the rows asked for only
  }
  std::int64_t batch() const override { return batch_; }
  std::int64_t position() const override { return position_; }
  std::int64_t capacity() const override {
    return model_.position_embedding_ == nullptr ? kUnbounded : model_.config_.block;
  }
  std::int64_t state_bytes() const override { return state_->bytes(); }

 private:
  TiedEmbeddingLM& model_;
  std::int64_t batch_;
  std::unique_ptr<TiedEmbeddingLM::BlocksState> state_;
  std::int64_t position_ = 0;
};

std::int64_t TiedEmbeddingLM::BlocksState::bytes_of(const std::vector<Tensor>& tensors) {
  std::int64_t total = 0;
  for (const Tensor& t : tensors)
    if (t.defined()) total += t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()));
  return total;
}

std::unique_ptr<Stream> TiedEmbeddingLM::open_stream(std::int64_t batch) {
  if (batch < 1) fail(fmt::format("{} stream", config_.model), fmt::format("batch {} must be at least 1", batch));
  return std::make_unique<TiedStream>(*this, batch);
}

// "blocks.3.attention.qkv.weight" -> "attention.qkv"; "token_embedding.weight" ->
// "token_embedding": the layer index and the tensor's role inside its module are dropped,
// so every layer's copy of a part lands in one row.
std::vector<std::pair<std::string, std::int64_t>> parameter_parts(const Module& model) {
  auto part_of = [](const std::string& name) {
    std::string part = name;
    const std::string blocks = "blocks.";
    if (part.rfind(blocks, 0) == 0) part = part.substr(part.find('.', blocks.size()) + 1);
    const auto last = part.rfind('.');
    return last == std::string::npos ? part : part.substr(0, last);
  };
  std::vector<std::pair<std::string, std::int64_t>> parts;
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string part = part_of(name);
    auto it = parts.begin();
    while (it != parts.end() && it->first != part) ++it;
    if (it == parts.end())
      parts.emplace_back(part, p.numel());
    else
      it->second += p.numel();
  }
  return parts;
}

std::vector<std::pair<std::string, std::int64_t>> TiedEmbeddingLM::parameter_breakdown() const {
  return parameter_parts(*this);
}

}  // namespace wedge::models
