// SheafStateLM: local selective-SSM states glued along a sparse causal cover of patches
// (the Sheaf-State architecture; models/README.md states and justifies every choice).
//
// The sequence is cut into patches of P tokens. Per layer, for the layer input h (B, L, d):
//   [x ; z] = W_in h,   u = silu(x)                                  inner width E = 2d
//   delta = W_up W_down u,  B_t = W_B u,  C_t = W_C u                Mamba's S6 inputs
//   Φ  local dynamics: the selective scan over each patch, starting from h0_p (below)
//   s_p = LN(W_s y_{τ_p} + b_s)           the patch summary (τ_p = the patch's last token;
//                                         LN without affine keeps the chain bounded)
//   π_q = softmax(W_τ s_q)                soft patch type over K types
//   G  gluing over the cover N(p) = {p-1, p-2, p-4, ..., p-2^(D-1)} (only q >= 0):
//        r_pq = R(π_q, δ_pq) s_q = Σ_k π_q[k] R[δ_pq, k] s_q      typed restriction maps
//        a_pq = softmax_q( (W_a s_{p-1}) · r_pq / sqrt(d_s) )      weights over <= D items
//        c_p  = Σ_q a_pq r_pq                                      the glued section
//        E_p  = Σ_q a_pq ||c_p - r_pq||^2,  Ê_p = E_p / Σ_q a_pq ||r_pq||^2
//   h0_p = (W_hx c_p) ⊗ (W_hb c_p)       the patch's initial state, (E, N), rank one
//   h = h + Dropout(W_out (y ⊙ silu(z)))   with the mixer reading LN(h) (pre-LN, as Mamba)
//   E  experts: patch p's tokens go to expert e_p = argmax softmax(W_r c_p + b_r), scaled
//      by that probability: h = h + Dropout(g_p FFN_{e_p}(LN(h)))
//   R  readout: the tied head on LN(h) of the last block (the final LayerNorm).
//
// Only the summaries of EARLIER patches reach c_p, so nothing crosses a patch boundary
// except through the gluing; leaky (tests only) adds patch p's own summary to its cover.
// Cost per layer: O(L·E·N) for the scan, O((L/P)·D·K·d_s²) for the gluing, O(L·d·d_ff)
// for the experts — linear in L; no L x L object exists.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "models/tied_embedding_lm.h"

namespace wedge::models {

// Mamba's initialisation of a scan's A_log (E, N) and step-size bias (E), drawing from `init`.
void init_selective_scan(Tensor& A_log, Tensor& dt_bias, Generator& init);
// A bank of restriction maps (..., d_s, d_s), each the identity plus Normal(0, 0.02).
void init_restriction_bank(Tensor& bank, Generator& init);

// Mamba's S6 inputs from the normalised stream h (B, L, d): x = W_in,x h and z = W_in,z h
// (the two halves of W_in's rows, taken with unbind: two packed outputs, and one gradient
// of W_in's size in backward), u = silu(x), delta = W_up W_down u, B_t = W_B u, C_t = W_C u
// — W_down, W_B and W_C stacked into one GEMM (and in the backward one gradient of u
// instead of three to add up).
struct ScanInputs {
  Tensor u, z, delta, B, C;
};
ScanInputs scan_inputs(const Tensor& h, const nn::Linear& in_proj, const nn::Linear& dt_down, const nn::Linear& dt_up,
                       const nn::Linear& b_proj, const nn::Linear& c_proj);

// What one layer's mixer reports besides its output.
struct GluingReport {
  Tensor sections;          // c_p, (B, patches, d_s)
  Tensor energy;            // mean over (batch, patches with a cover) of E_p, scalar
  Tensor energy_normalised; // the same of Ê_p, scalar (the auxiliary loss)
  Tensor weights;           // eval mode only: a_pq, (B, patches, D), slot j for q = p - 2^j (0: no such q)
};

// What one layer keeps of a stream's past: the scan state after the latest token, the
// current patch's glued section, and the restricted summaries of the latest 2^(D-1)
// completed patches (as far as the cover reaches) — constant in the position.
struct SheafLayerStream {
  Tensor state;    // (B, 1, E, N)
  Tensor section;  // c_p of the current patch, (B, d_s)
  Tensor summary;  // s of the latest completed patch, (B, d_s): the next patch's anchor
  std::deque<std::vector<Tensor>> restricted;  // R(π_q, δ_j) s_q for j < D, oldest first
  std::int64_t bytes() const;
};

// The new positions [begin, begin + length) of a stream's chunk that lie in one patch,
// and that patch's glued section (which routes them to an expert).
struct StreamSegment {
  std::int64_t begin = 0, length = 0;
  Tensor section;
};

class SheafMixer : public Module {
 public:
  SheafMixer(const LMConfig& config, Generator& init);
  // h (B, L, d) -> (B, L, d), and the gluing report.
  Tensor forward(const Tensor& h, GluingReport& report) const;
  // The mixer for the positions [position, position + n) of a stream, h (B, n, d): each
  // patch's section is glued when its first token arrives, the scan continues from the
  // kept state, and a patch's summary is formed when its last token has passed. Appends
  // the chunk's pieces by patch to `segments`.
  Tensor forward_stream(const Tensor& h, std::int64_t position, SheafLayerStream& stream,
                        std::vector<StreamSegment>& segments) const;

 private:
  Tensor summarise(const Tensor& y_last) const;  // s_p = LN(W_s y_{τ_p} + b_s)
  // The state a patch's scan starts from, h0 = (W_hx c) ⊗ (W_hb c): section (B, d_s) ->
  // (B, 1, E, N).
  Tensor start_state(const Tensor& section) const;
  // The ungated scan output at the last token of a piece of tokens, y = C · h + D u, from
  // the state after it (B, 1, E, N) and the piece's C (B, n, N) and u (B, n, E): (B, E).
  Tensor output_at_end(const Tensor& last_state, const Tensor& C, const Tensor& u) const;
  // s (B, d_s) -> D tensors (B, d_s): R(π, δ_j) s = Σ_k π_k R[j, k] s for each j < D.
  std::vector<Tensor> restrict_all(const Tensor& s) const;
  // The gluing of one patch over its cover r_pq (B, d_s each, at least one), with the
  // anchor s_{p-1} the query reads.
  struct Glued {
    Tensor section, weights, energy, energy_normalised;  // (B, d_s), (B, m), (B), (B)
  };
  Glued glue(const std::vector<Tensor>& cover, const Tensor& anchor) const;
  std::int64_t d_model_, inner_, state_, patch_, depth_, types_, section_;
  bool leaky_;
  nn::Linear& in_;        // W_in (2E, d), no bias
  nn::Linear& dt_down_;   // (R, E), no bias
  nn::Linear& dt_up_;     // (E, R), no bias (the bias is dt_bias)
  nn::Linear& b_proj_;    // W_B (N, E)
  nn::Linear& c_proj_;    // W_C (N, E)
  Tensor A_log_;          // (E, N)  (handles share the registered parameters)
  Tensor D_skip_;         // (E)
  Tensor dt_bias_;        // (E)
  nn::Linear& summary_;   // W_s (d_s, E), b_s
  nn::Linear& type_;      // W_τ (K, d_s), b_τ
  Tensor restriction_;    // R (D, K, d_s, d_s)
  nn::Linear& query_;     // W_a (d_s, d_s), no bias
  nn::Linear& state_x_;   // W_hx (E, d_s), no bias
  nn::Linear& state_b_;   // W_hb (N, d_s), no bias
  nn::Linear& out_;       // W_out (d, E), no bias
};

class SheafBlock : public Module {
 public:
  SheafBlock(const LMConfig& config, Generator& init, Generator& dropout);
  // h (B, L, d) -> (B, L, d), pre-LN. Adds this layer's energies, router probabilities and
  // expert counts to `stats`.
  Tensor forward(const Tensor& h, struct SheafStats& stats) const;
  // The block for the positions [position, position + n) of a stream (SheafMixer).
  Tensor forward_stream(const Tensor& h, std::int64_t position, SheafLayerStream& stream) const;

 private:
  // The experts' output for every token of x (B, L, d), scaled by its patch's router
  // probability: probs (rows, K), one row per patch, patch_row[b·L + t] the row of token
  // (b, t)'s patch. Adds the patches each expert received to `count` (K) when given.
  Tensor experts(const Tensor& x, const Tensor& probs, const std::vector<std::int32_t>& patch_row,
                 std::vector<double>* count) const;
  std::int64_t patch_;
  SheafMixer& mixer_;
  nn::Dropout& mixer_dropout_;
  nn::LayerNorm& norm1_;
  nn::Linear& router_;  // W_r (K, d_s), b_r
  std::vector<FeedForward*> experts_;
  nn::Dropout& expert_dropout_;
  nn::LayerNorm& norm2_;
};

// Summed over the layers of one forward.
struct SheafStats {
  Tensor energy;              // raw gluing energy, mean per layer, summed over layers
  Tensor energy_normalised;   // scale-free energy (what λ multiplies)
  // Per layer: the mean router probability of each expert, P_k (K), and how many patches
  // went to each expert, layers x K counts end to end.
  std::vector<Tensor> mean_probs;
  std::vector<double> counts;
  std::vector<Tensor> weights;  // eval mode only: each layer's gluing weights (GluingReport::weights)
  std::int64_t layers = 0;
};

class SheafStateLM : public TiedEmbeddingLM {
 public:
  explicit SheafStateLM(const LMConfig& config);
  Tensor auxiliary_loss() const override;
  // Layers x K: the patches each layer routed to each expert.
  std::size_t batch_counts_size() const override;
  std::vector<double> batch_counts() const override { return last_.counts; }
  void use_batch_counts(std::vector<double> totals) override;
  // Adds "gluing_weight_by_distance" (eval mode): the mean a_pq at cover distance 1, 2, 4, ...
  // up to the farthest distance some patch of the sequence has.
  nlohmann::json diagnostics() const override;
  // The gluing weights of the latest forward in eval mode, one (B, patches, D) tensor per
  // layer (empty after a training forward): which earlier patches each patch read from.
  const std::vector<Tensor>& gluing_weights() const { return last_.weights; }

 protected:
  Tensor run_blocks(const Tensor& h) override;
  // Each layer's SheafLayerStream: constant in the position.
  std::unique_ptr<BlocksState> new_blocks_state(std::int64_t batch) const override;
  Tensor run_blocks_stream(const Tensor& h, std::int64_t position, BlocksState& state) override;

 private:
  std::vector<SheafBlock*> blocks_;
  nn::LayerNorm* final_norm_ = nullptr;
  // The load-balancing loss, summed over layers: K Σ_k f_k P_k per layer, with f_k the
  // share of `counts` (layers x K) in that layer going to k.
  Tensor balance(const std::vector<double>& counts) const;
  SheafStats last_;  // of the latest forward
  std::vector<double> batch_totals_;  // use_batch_counts(), for the latest forward only
};

}  // namespace wedge::models
