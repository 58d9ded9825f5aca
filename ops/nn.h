// The basic layers as Modules, each a thin owner of parameters around one op:
// Linear, Embedding, LayerNorm, Dropout. Initialisation is seeded (Generator) so the
// same seed builds the same model.
#pragma once

#include <cstdint>

#include "engine/module.h"
#include "engine/rng.h"
#include "ops/ops.h"

namespace wedge::nn {

// y = x W^T + b. W (out, in) ~ Normal(0, init_std) — GPT-style 0.02 by default; b = 0.
class Linear : public Module {
 public:
  Linear(std::int64_t in, std::int64_t out, Generator& gen, bool bias = true,
         double init_std = 0.02);
  Tensor forward(const Tensor& x) const { return ops::linear(x, weight, bias); }
  // gelu(forward(x)), with the bias and GELU fused into the GEMM (ops::linear_gelu).
  Tensor forward_gelu(const Tensor& x) const { return ops::linear_gelu(x, weight, bias); }
  Tensor weight, bias;  // bias undefined when constructed without
};

// Rows of a (num, dim) table, ~ Normal(0, init_std).
class Embedding : public Module {
 public:
  Embedding(std::int64_t num, std::int64_t dim, Generator& gen, double init_std = 0.02);
  Tensor forward(const Tensor& ids) const { return ops::embedding(weight, ids); }
  Tensor weight;
};

// Inverted dropout; draws its mask counters from the Generator it was given, so a run is
// reproducible from its seed. Identity in eval mode.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen) : p_(p), gen_(&gen) {}
  Tensor forward(const Tensor& x) const;
  double p() const { return p_; }
  // What one forward over n elements uses: the Generator's next n counters and p, or
  // p = 0 (keep everything, nothing drawn) in eval mode or when p is 0.
  struct Draw {
    double p = 0.0;
    std::uint64_t seed = 0, offset = 0;
  };
  Draw draw(std::int64_t n) const;

 private:
  double p_;
  Generator* gen_;
};

// LayerNorm over the last axis with affine gamma = 1, beta = 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) const { return ops::layer_norm(x, gamma, beta, eps_); }
  // The residual connection into this norm, fused (ops::residual_layer_norm): sum =
  // x + dropout.forward(y), out = forward(sum), the same values and the same dropout
  // counters as written apart.
  ops::ResidualNorm forward_residual(const Tensor& x, const Tensor& y, const Dropout& dropout) const;
  Tensor gamma, beta;

 private:
  double eps_;
};

}  // namespace wedge::nn
