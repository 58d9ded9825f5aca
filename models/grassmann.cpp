#include "models/grassmann.h"

#include <algorithm>
#include <string>

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

const Tensor& GrassmannMixing::validity_mask(std::int64_t L, Device device) const {
  if (mask_.defined() && mask_.size(0) == L && mask_.device() == device) return mask_;
  // Causal: t has a partner iff t - Δ >= 0 for the smallest Δ. Leaky: iff t + Δ <= L - 1.
  const std::int32_t smallest = *std::min_element(offsets_.begin(), offsets_.end());
  std::vector<float> valid(static_cast<std::size_t>(L));
  for (std::int64_t t = 0; t < L; ++t)
    valid[static_cast<std::size_t>(t)] = leaky_ ? (t + smallest <= L - 1) : (t - smallest >= 0);
  mask_ = Tensor::from_vector(valid, {L, 1}).to(device);
  return mask_;
}

Tensor GrassmannMixing::forward(const Tensor& h) const {
  const Tensor z = reduce_.forward(h);  // (B, L, r)
  Tensor p_mean;                        // (B, L, r(r-1)/2)
  if (!leaky_) {
    p_mean = ops::plucker_mean(z, offsets_);
  } else {
    // On the reversed sequence position L-1-t pairs with L-1-t-Δ, i.e. t with t+Δ.
    p_mean = reverse_positions(ops::plucker_mean(reverse_positions(z), offsets_));
  }
  Tensor g;
  if (out_ == nullptr) {
    g = plucker_.forward(p_mean);
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
  return g * validity_mask(h.size(1), h.device());
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
  const Tensor g = mixing_dropout_.forward(mixing_.forward(h_in));
  // alpha = sigmoid(W_gate [h; g] + b_gate), h_mix = alpha h + (1 - alpha) g: one fused op.
  const Tensor h_mix = ops::gate_mix(gate_.forward(ops::cat({h_in, g}, 2)), h_in, g);
  const Tensor h = norm1_.forward(h_mix);
  return norm2_.forward(h + ffn_dropout_.forward(ffn_.forward(h)));
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
