// Sentence-pair classification (SNLI: entailment / neutral / contradiction) with an encoder
// trained from scratch and one of two heads (models/README.md, "Sentence pairs").
//
//   input   [CLS] premise [SEP] hypothesis [SEP], segment ids 0 / 1, padded rows with a mask
//   h_0     E[x_t] + P[t] + S[segment_t]                          (then dropout)
//           or, on a frozen backbone language model, W_b b_t + c + P[t] + S[segment_t],
//           b_t its hidden state at t (causal, so padding after a row's tokens changes none)
//   encoder `layers` blocks of the head, every one blind to padding:
//     transformer  post-LN blocks of TransformerLM, attention bidirectional over real tokens
//     grassmann    the gated Grassmann block with Plücker pairs inside windows (below)
//     sheaf        pre-LN blocks of local scans glued over a two-sided cover (below), then LN
//   pool    u = mean of h over the premise part, v = mean over the hypothesis part
//   logits  W_2 Dropout(GELU(W_1 [u; v; |u − v|; u ⊙ v] + b_1)) + b_2      (3 classes)
//
// The hypothesis-only control reads [CLS] hypothesis [SEP] alone (segment 1) and
// classifies from v: the same encoder and head, minus the premise.
//
// Grassmann–Plücker head: z = W_red h (d -> d_proj), split into `mixing_heads` heads of
// r = d_proj / heads. The positions are cut into windows of `window` tokens, one every
// `stride` (= window: non-overlapping); inside its window every real token pairs with every
// other real token, both directions (a classifier may look both ways), and p̄_t is the mean
// of the normalised Plücker vectors p̂(z_t, z_s) over those partners, per head. Then
// g_t = W_plü [p̄_t of every head] + b_plü (0 at a token without a real partner), and
// h <- LN(α ⊙ h + (1 − α) ⊙ Dropout(g)) with α = σ(W_gate [h; g] + b_gate), and the
// feed-forward sub-block, as in GrassmannLM.
//
// SheafState head: the sequence is cut into patches of `patch` tokens; each patch is scanned
// from a zero state (SheafStateLM's selective scan), its summary s_q = LN(W_s y_{τ_q} + b_s)
// read at its last REAL token τ_q. A classifier may look both ways, so the cover is
// two-sided, N(p) = {p ± 1, p ± 2, ..., p ± 2^(D-1)} (patches holding a real token only),
// with one typed restriction map per distance and side: r_pq = Σ_k π_q[k] R[side, δ, k] s_q.
// All sections are glued at once — no chain: a_pq = softmax_q((W_a s_p) · r_pq / sqrt(d_s)),
// c_p = Σ_q a_pq r_pq (0 without a neighbour) — and every patch is scanned again from
// h0_p = (W_hx c_p) ⊗ (W_hb c_p). The block: h = h + Dropout(W_out (y ⊙ silu(z))) on LN(h),
// then h = h + Dropout(FFN(LN(h))); the encoder ends with a LayerNorm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/module.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "models/grassmann.h"
#include "models/lm.h"
#include "models/sheaf.h"
#include "models/transformer.h"

namespace wedge::models {

inline constexpr std::int64_t kNliClasses = 3;

struct NliConfig {
  std::string head = "transformer";  // transformer | grassmann | sheaf
  std::int64_t vocab_size = 30522;
  std::int64_t layers = 2;
  std::int64_t d_model = 256;
  std::int64_t heads = 4;  // attention heads (transformer)
  std::int64_t d_ff = 512;
  double dropout = 0.1;
  std::int64_t max_length = 48;  // per sentence, [CLS] and [SEP] included
  // Grassmann–Plücker head
  std::int64_t d_proj = 64;
  std::int64_t mixing_heads = 4;
  std::int64_t window = 8;
  std::int64_t stride = 8;
  // SheafState head
  std::int64_t patch = 8;
  std::int64_t cover_depth = 3;  // neighbours up to 2^(D-1) patches away on each side
  std::int64_t types = 4;
  std::int64_t state_size = 16;
  std::int64_t section_dim = 64;
  bool hypothesis_only = false;  // the control: the hypothesis alone
  // > 0: the token states come from a frozen language model of this width (its
  // hidden_states, attach_backbone), projected to d_model, instead of the token table.
  std::int64_t backbone_d = 0;
  std::uint64_t seed = 0;

  // Rows of the position table: a pair of two cut sentences, 2 max_length - 1 tokens.
  std::int64_t positions() const { return 2 * max_length - 1; }
  // Throws std::invalid_argument naming the flag when the configuration is inconsistent.
  void validate() const;
};

void to_json(nlohmann::json& j, const NliConfig& c);
void from_json(const nlohmann::json& j, NliConfig& c);

// The Grassmann–Plücker mixing of the head: h (B, T, d), mask (B, T) -> g (B, T, d).
class WindowPluckerMixing : public Module {
 public:
  WindowPluckerMixing(const NliConfig& config, Generator& init);
  Tensor forward(const Tensor& h, const Tensor& mask) const;

 private:
  std::int64_t heads_, rank_, window_;
  nn::Linear& reduce_;   // W_red (d_proj, d), b_red
  nn::Linear& plucker_;  // W_plü (d, heads · r(r-1)/2), b_plü
};

class WindowGrassmannBlock : public Module {
 public:
  WindowGrassmannBlock(const NliConfig& config, Generator& init, Generator& dropout);
  Tensor forward(const Tensor& h, const Tensor& mask) const;

 private:
  WindowPluckerMixing& mixing_;
  nn::Dropout& mixing_dropout_;
  nn::Linear& gate_;
  nn::LayerNorm& norm1_;
  FeedForward& ffn_;
  nn::Dropout& ffn_dropout_;
  nn::LayerNorm& norm2_;
};

// The SheafState head's mixing: h (B, T, d), mask (B, T) -> (B, T, d).
class PairSheafMixing : public Module {
 public:
  PairSheafMixing(const NliConfig& config, Generator& init);
  Tensor forward(const Tensor& h, const Tensor& mask) const;

 private:
  std::int64_t inner_, state_, patch_, depth_, types_, section_;
  nn::Linear& in_;       // W_in (2E, d), no bias
  nn::Linear& dt_down_;  // (R, E)
  nn::Linear& dt_up_;    // (E, R)
  nn::Linear& b_proj_;   // W_B (N, E)
  nn::Linear& c_proj_;   // W_C (N, E)
  Tensor A_log_, D_skip_, dt_bias_;
  nn::Linear& summary_;  // W_s (d_s, E), b_s
  nn::Linear& type_;     // W_τ (K, d_s), b_τ
  Tensor restriction_;   // R (2, D, K, d_s, d_s): side (0 before, 1 after), distance, type
  nn::Linear& query_;    // W_a (d_s, d_s)
  nn::Linear& state_x_;  // W_hx (E, d_s)
  nn::Linear& state_b_;  // W_hb (N, d_s)
  nn::Linear& out_;      // W_out (d, E)
};

class SheafPairBlock : public Module {
 public:
  SheafPairBlock(const NliConfig& config, Generator& init, Generator& dropout);
  Tensor forward(const Tensor& h, const Tensor& mask) const;

 private:
  nn::LayerNorm& norm1_;
  PairSheafMixing& mixing_;
  nn::Dropout& mixing_dropout_;
  nn::LayerNorm& norm2_;
  FeedForward& ffn_;
  nn::Dropout& ffn_dropout_;
};

class NliModel : public Module {
 public:
  explicit NliModel(const NliConfig& config);

  // ids (B, T) int32, segments (B, T) int32 (0: premise part, 1: hypothesis part), mask
  // (B, T) float (1 real, 0 padding), T <= positions() -> logits (B, 3). Every row needs
  // at least one real token in each part it classifies from.
  Tensor forward(const Tensor& ids, const Tensor& segments, const Tensor& mask);
  const NliConfig& config() const { return config_; }
  // The stream every dropout mask of this model is drawn from (data-parallel training cuts
  // its draws by rows, tools/data_parallel.h PieceDropout).
  Generator& dropout_generator() { return dropout_gen_; }
  // Parameter count per part (embeddings, encoder blocks, classifier), for `wedge params`.
  std::vector<std::pair<std::string, std::int64_t>> parameter_breakdown() const;
  // The frozen language model whose token states the classifier reads (config backbone_d
  // > 0): its width must be backbone_d, its vocabulary vocab_size and its positions at
  // least positions(). Not a part of this module: its weights are neither trained nor saved
  // with the classifier's; it runs in eval mode, without gradients, on the classifier's device.
  void attach_backbone(std::shared_ptr<LanguageModel> backbone);
  const LanguageModel* backbone() const { return backbone_.get(); }

 private:
  NliConfig config_;
  Generator init_gen_, dropout_gen_;
  nn::Embedding* tokens_ = nullptr;   // without a backbone
  nn::Linear* backbone_in_ = nullptr;  // W_b, c: with one
  std::shared_ptr<LanguageModel> backbone_;
  nn::Embedding* positions_ = nullptr;
  nn::Embedding* segments_ = nullptr;
  nn::Dropout* embedding_dropout_ = nullptr;
  std::vector<TransformerBlock*> transformer_blocks_;
  std::vector<WindowGrassmannBlock*> grassmann_blocks_;
  std::vector<SheafPairBlock*> sheaf_blocks_;
  nn::LayerNorm* final_norm_ = nullptr;  // the sheaf head's (pre-LN blocks)
  nn::Linear* hidden_ = nullptr;
  nn::Dropout* classifier_dropout_ = nullptr;
  nn::Linear* output_ = nullptr;
};

std::unique_ptr<NliModel> make_nli_model(const NliConfig& config);

}  // namespace wedge::models
