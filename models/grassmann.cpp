#include "models/grassmann.h"

#include <algorithm>
#include <string>

#include "engine/profile.h"

namespace wedge::models {

namespace {

// x (B, L, ...) with its positions in reverse order. Built from views and one cat, so it
// is exact and differentiable; used only by the leaky test variant.
Tensor reverse_positions(const Tensor& x) {
  std::vector<Tensor> rows;
  for (std::int64_t t = x.size(1) - 1; t >= 0; --t) rows.push_back(ops::narrow(x, 1, t, 1));
  return ops::cat(rows, 1);
}

}  // namespace

GrassmannMixing::GrassmannMixing(const LMConfig& c, std::vector<std::int32_t> offsets,
                                 Generator& init)
    : offsets_(std::move(offsets)),
      leaky_(c.leaky),
      reduce_(register_module("reduce", std::make_shared<nn::Linear>(c.d_model, c.rank, init))),
      plucker_(register_module(
          "plucker", std::make_shared<nn::Linear>(c.rank * (c.rank - 1) / 2, c.d_model, init))) {
  if (c.mix_out_proj)
    out_ = &register_module("out", std::make_shared<nn::Linear>(c.d_model, c.d_model, init));
}

Tensor GrassmannMixing::validity_mask(std::int64_t first, std::int64_t L, Device device) const {
  const bool cache = first == 0;
  if (cache && mask_.defined() && mask_.size(0) == L && mask_.device() == device) return mask_;
  // Causal: t has a partner iff t - Δ >= 0 for the smallest Δ. Leaky: iff t + Δ <= L - 1
  // (within the L positions given; a stream's leaky model sees no further).
  const std::int32_t smallest = *std::min_element(offsets_.begin(), offsets_.end());
  std::vector<float> valid(static_cast<std::size_t>(L));
  for (std::int64_t t = 0; t < L; ++t)
    valid[static_cast<std::size_t>(t)] = leaky_ ? (t + smallest <= L - 1) : (first + t - smallest >= 0);
  Tensor mask = Tensor::from_vector(valid, {L, 1}).to(device);
  if (cache) mask_ = mask;
  return mask;
}

Tensor GrassmannMixing::forward(const Tensor& h) const {
  const profile::Part part("Grassmann mixing");
  return mix(reduce_.forward(h), 0);
}

Tensor GrassmannMixing::forward_stream(const Tensor& h, std::int64_t position, Tensor& recent) const {
  const std::int64_t n = h.size(1), w = recent.defined() ? recent.size(1) : 0;
  // Pairs reach back max(Δ) positions at most, so the w kept before the new ones are
  // every partner the new positions have: rows w .. w + n - 1 of the mixing over them
  // are the full forward's rows position .. position + n - 1.
  const Tensor z_new = reduce_.forward(h);
  const Tensor z = w > 0 ? ops::cat({recent, z_new}, 1) : z_new;
  const Tensor g = mix(z, position - w, w);
  const std::int64_t farthest = *std::max_element(offsets_.begin(), offsets_.end());
  const std::int64_t keep = std::min(farthest, w + n);
  recent = ops::narrow(z, 1, w + n - keep, keep).contiguous();
  return g;
}

Tensor GrassmannMixing::mix(const Tensor& z, std::int64_t first, std::int64_t from) const {
  Tensor p_mean;  // (B, L, r(r-1)/2)
  if (!leaky_) {
    p_mean = ops::plucker_mean(z, offsets_);
  } else {
    // On the reversed sequence position L-1-t pairs with L-1-t-Δ, i.e. t with t+Δ.
    p_mean = reverse_positions(ops::plucker_mean(reverse_positions(z), offsets_));
  }
  const std::int64_t L = z.size(1);
  if (from > 0) p_mean = ops::narrow(p_mean, 1, from, L - from);
  Tensor g;
  const std::int64_t rows = p_mean.size(0) * p_mean.size(1), pairs = p_mean.size(2);
  if (out_ == nullptr) {
    g = plucker_.forward(p_mean);
  } else if (rows <= pairs) {
    // Few rows (a stream's new tokens): two thin products cost rows (P d + d²), less than
    // folding the maps (d² P) would.
    g = out_->forward(plucker_.forward(p_mean));
  } else {
    // W_o (W_plü p + b_plü) + b_o = (W_o W_plü) p + (W_o b_plü + b_o): both maps are
    // linear, so fold them into one (d, P) matrix first — a (d x d x P) product per step
    // instead of a (B·L x d x d) one — and run one GEMM over the tokens. Gradients reach
    // W_o, W_plü, b_plü and b_o through the two small products.
    const Tensor folded_weight = ops::matmul(out_->weight, plucker_.weight);
    const Tensor folded_bias = ops::linear(plucker_.bias, out_->weight, out_->bias);
    g = ops::linear(p_mean, folded_weight, folded_bias);
  }
  // p_mean is already 0 where no offset is valid; the mask removes the biases there too.
  // (A stream's positions past the smallest offset all have a partner: nothing to mask.)
  const std::int32_t smallest = *std::min_element(offsets_.begin(), offsets_.end());
  if (!leaky_ && first + from >= smallest) return g;
  const Tensor mask = validity_mask(first, L, z.device());
  return g * (from > 0 ? ops::narrow(mask, 0, from, L - from) : mask);
}

GrassmannBlock::GrassmannBlock(const LMConfig& c, std::vector<std::int32_t> offsets,
                               Generator& init, Generator& dropout)
    : mixing_(register_module("mixing",
                              std::make_shared<GrassmannMixing>(c, std::move(offsets), init))),
      mixing_dropout_(
          register_module("mixing_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      gate_(register_module("gate", std::make_shared<nn::Linear>(2 * c.d_model, c.d_model, init))),
      norm1_(register_module("norm1", std::make_shared<nn::LayerNorm>(c.d_model))),
      ffn_(register_module("ffn", std::make_shared<FeedForward>(c.d_model, c.d_ff, init))),
      ffn_dropout_(
          register_module("ffn_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm2_(register_module("norm2", std::make_shared<nn::LayerNorm>(c.d_model))) {}

Tensor GrassmannBlock::forward(const Tensor& h_in) const {
  const profile::Part part("gate, dropout, norm");  // what the mixing and the FFN leave
  return after_mixing(h_in, mixing_.forward(h_in));
}

Tensor GrassmannBlock::forward_stream(const Tensor& h_in, std::int64_t position, Tensor& recent) const {
  return after_mixing(h_in, mixing_.forward_stream(h_in, position, recent));
}

Tensor GrassmannBlock::after_mixing(const Tensor& h_in, const Tensor& mixed) const {
  const Tensor g = mixing_dropout_.forward(mixed);
  // alpha = sigmoid(W_gate [h; g] + b_gate), h_mix = alpha h + (1 - alpha) g: one fused op.
  const Tensor h_mix = ops::gate_mix(gate_.forward(ops::cat({h_in, g}, 2)), h_in, g);
  const Tensor h = norm1_.forward(h_mix);
  return norm2_.forward_residual(h, ffn_.forward(h), ffn_dropout_).out;  // one fused pass
}

GrassmannLM::GrassmannLM(const LMConfig& config) : TiedEmbeddingLM(config) {
  for (std::int64_t i = 0; i < config_.layers; ++i)
    blocks_.push_back(&register_module(
        "blocks." + std::to_string(i),
        std::make_shared<GrassmannBlock>(config_, config_.offsets_for_layer(i), init_gen_,
                                         dropout_gen_)));
}

Tensor GrassmannLM::run_blocks(const Tensor& h_in) {
  Tensor h = h_in;
  for (GrassmannBlock* block : blocks_) h = block->forward(h);
  return h;
}

}  // namespace wedge::models

namespace wedge::models {

namespace {

struct RecentVectors final : TiedEmbeddingLM::BlocksState {
  std::vector<Tensor> z;  // per layer, (B, min(position, max Δ), r)
  std::int64_t bytes() const override { return bytes_of(z); }
};

}  // namespace

std::unique_ptr<TiedEmbeddingLM::BlocksState> GrassmannLM::new_blocks_state(std::int64_t /*batch*/) const {
  auto state = std::make_unique<RecentVectors>();
  state->z.resize(blocks_.size());
  return state;
}

Tensor GrassmannLM::run_blocks_stream(const Tensor& h_in, std::int64_t position, BlocksState& state) {
  auto& recent = static_cast<RecentVectors&>(state);
  Tensor h = h_in;
  for (std::size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward_stream(h, position, recent.z[i]);
  return h;
}

}  // namespace wedge::models
