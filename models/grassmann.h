// GrassmannLM (PAPERS.md §2; Chong Zhang, arXiv 2512.19428): the Transformer backbone
// with every attention sub-layer replaced by causal Grassmann mixing.
//
// For a layer input h (B, L, d) and the layer's offsets W (a set, or one offset per layer):
//   z_t   = W_red h_t + b_red                                   reduce d -> r
//   p̄_t  = mean over Δ ∈ W with t-Δ >= 0 of p̂(z_t, z_{t-Δ})   normalised Plücker vectors
//   g_t   = W_o (W_plü p̄_t + b_plü) + b_o   where some offset is valid,   g_t = 0 elsewhere
//   α_t   = σ(W_gate [h_t ; g_t] + b_gate)
//   h_t  <- LN(α_t ⊙ h_t + (1 - α_t) ⊙ Dropout(g_t))
//   h_t  <- LN(h_t + Dropout(W2 GELU(W1 h_t + b1) + b2))         as in the Transformer
//   logits_t = E h_t                                              tied head, no final LN
//
// Choices the paper leaves open, and why (see also models/README.md):
// * Pairing is with the PAST token t-Δ (PAPERS.md Decision); offsets with t-Δ < 0 are
//   skipped. The paper's W_plü is applied to each offset's p̂ and the results averaged;
//   W_plü is linear, so projecting the averaged p̂ once is the same number (the fused op
//   ops::plucker_mean computes the average without materialising every offset).
// * The output projection W_o (PAPERS.md Decision; --no-mix-out-proj removes it) is what
//   makes the parameter count the paper's: 13,001,408 for 6 layers / block 128 and
//   18,189,184 for 12 layers / block 256.
// * "g_t = 0 where no offset is valid" is taken literally for the vector that enters the
//   gate: the biases b_plü and b_o are masked out there too. A position with no past
//   partner then mixes h_t with exactly zero, the same no-information signal at every
//   such position, independent of how the biases have been trained.
// * "then LayerNorm and dropout": the gate is already a residual connection (a convex
//   combination of h and g), so no second residual h + h_mix is added. Dropout acts on
//   the mixing branch g before it is gated — the place where the Transformer drops its
//   attention output — so the residual stream itself is never dropped.
// * leaky (tests only): pairs with t+Δ, the paper's literal formula, which looks into the
//   future. It runs the same fused op on the time-reversed sequence, so it is a genuine
//   leak that the causality audit (models/audit.h) must catch.
#pragma once

#include <cstdint>
#include <vector>

#include "models/tied_embedding_lm.h"

namespace wedge::models {

// Steps 1-4: h (B, L, d) -> g (B, L, d), zero at positions without a valid offset.
class GrassmannMixing : public Module {
 public:
  GrassmannMixing(const LMConfig& config, std::vector<std::int32_t> offsets, Generator& init);
  Tensor forward(const Tensor& h) const;
  // The mixing for the positions [position, position + n) of a stream, h (B, n, d).
  // `recent` (B, w, r) holds z of the w = min(position, max Δ) positions before (undefined
  // at position 0) and is advanced past the new ones: the layer's whole state.
  Tensor forward_stream(const Tensor& h, std::int64_t position, Tensor& recent) const;
  const std::vector<std::int32_t>& offsets() const { return offsets_; }

 private:
  // Steps 2-4 over z (B, L, r) of the consecutive positions first, first + 1, ...; the
  // rows from `from` on only (B, L - from, d): the pairs read all of z, the projections
  // and the mask only the rows asked for.
  Tensor mix(const Tensor& z, std::int64_t first, std::int64_t from = 0) const;
  // 1 where the position has at least one valid partner, else 0; (L, 1) for the positions
  // first .. first + L - 1; cached for first = 0 (the training forward), per L.
  Tensor validity_mask(std::int64_t first, std::int64_t L, Device device) const;

  std::vector<std::int32_t> offsets_;
  bool leaky_;
  nn::Linear& reduce_;      // W_red (r, d), b_red
  nn::Linear& plucker_;     // W_plü (d, r(r-1)/2), b_plü
  nn::Linear* out_ = nullptr;  // W_o (d, d), b_o; null with --no-mix-out-proj
  mutable Tensor mask_;
};

class GrassmannBlock : public Module {
 public:
  GrassmannBlock(const LMConfig& config, std::vector<std::int32_t> offsets, Generator& init,
                 Generator& dropout);
  Tensor forward(const Tensor& h) const;
  // The block for the positions [position, position + n) of a stream (GrassmannMixing).
  Tensor forward_stream(const Tensor& h, std::int64_t position, Tensor& recent) const;
  const GrassmannMixing& mixing() const { return mixing_; }

 private:
  // Everything after the mixing: the gate, LayerNorm, the feed-forward sub-layer.
  Tensor after_mixing(const Tensor& h, const Tensor& g) const;

  GrassmannMixing& mixing_;
  nn::Dropout& mixing_dropout_;
  nn::Linear& gate_;  // W_gate (d, 2d), b_gate
  nn::LayerNorm& norm1_;
  FeedForward& ffn_;
  nn::Dropout& ffn_dropout_;
  nn::LayerNorm& norm2_;
};

class GrassmannLM : public TiedEmbeddingLM {
 public:
  explicit GrassmannLM(const LMConfig& config);

 protected:
  Tensor run_blocks(const Tensor& h) override;
  // Each layer's last max(Δ) reduced vectors z: constant in the position.
  std::unique_ptr<BlocksState> new_blocks_state(std::int64_t batch) const override;
  Tensor run_blocks_stream(const Tensor& h, std::int64_t position, BlocksState& state) override;

 private:
  std::vector<GrassmannBlock*> blocks_;  // owned through register_module
};

}  // namespace wedge::models
