#include "ops/nn.h"

#include "engine/autograd.h"

namespace wedge::nn {

Linear::Linear(std::int64_t in, std::int64_t out, Generator& gen, bool with_bias, double init_std) {
  weight = register_parameter("weight", Tensor::randn({out, in}, gen.next_seed(), 0.0, init_std));
  if (with_bias) bias = register_parameter("bias", Tensor::zeros({out}));
}

Embedding::Embedding(std::int64_t num, std::int64_t dim, Generator& gen, double init_std) {
  weight = register_parameter("weight", Tensor::randn({num, dim}, gen.next_seed(), 0.0, init_std));
}

LayerNorm::LayerNorm(std::int64_t dim, double eps) : eps_(eps) {
  gamma = register_parameter("gamma", Tensor::ones({dim}));
  beta = register_parameter("beta", Tensor::zeros({dim}));
}

Dropout::Draw Dropout::draw(std::int64_t n) const {
  if (!is_training() || p_ == 0.0) return {};
  const std::uint64_t offset = gen_->reserve(static_cast<std::uint64_t>(n));
  return {p_, gen_->seed(), offset};
}

Tensor Dropout::forward(const Tensor& x) const {
  const Draw d = draw(x.numel());
  return d.p == 0.0 ? x : ops::dropout(x, d.p, true, d.seed, d.offset);
}

ops::ResidualNorm LayerNorm::forward_residual(const Tensor& x, const Tensor& y, const Dropout& dropout) const {
  const Dropout::Draw d = dropout.draw(y.numel());
  return ops::residual_layer_norm(x, y, gamma, beta, d.p, d.seed, d.offset, eps_);
}

}  // namespace wedge::nn
