// Sentence-pair classification (SNLI: entailment / neutral / contradiction) with an encoder
// trained from scratch and one of two heads (models/README.md, "Sentence pairs").
//
//   input   [CLS] premise [SEP] hypothesis [SEP], segment ids 0 / 1, padded rows with a mask
//   h_0     E[x_t] + P[t] + S[segment_t]                          (then dropout)
//   encoder `layers` blocks of the head, every one blind to padding:
//     transformer  post-LN blocks of TransformerLM, attention bidirectional over real tokens
//     grassmann    the gated Grassmann block with Plücker pairs inside windows (below)
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
#include "models/transformer.h"

namespace wedge::models {

inline constexpr std::int64_t kNliClasses = 3;

struct NliConfig {
  std::string head = "transformer";  // transformer | grassmann
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
  bool hypothesis_only = false;  // the control: the hypothesis alone
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

class NliModel : public Module {
 public:
  explicit NliModel(const NliConfig& config);

  // ids (B, T) int32, segments (B, T) int32 (0: premise part, 1: hypothesis part), mask
  // (B, T) float (1 real, 0 padding), T <= positions() -> logits (B, 3). Every row needs
  // at least one real token in each part it classifies from.
  Tensor forward(const Tensor& ids, const Tensor& segments, const Tensor& mask);
  const NliConfig& config() const { return config_; }
  // Parameter count per part (embeddings, encoder blocks, classifier), for `wedge params`.
  std::vector<std::pair<std::string, std::int64_t>> parameter_breakdown() const;

 private:
  NliConfig config_;
  Generator init_gen_, dropout_gen_;
  nn::Embedding* tokens_ = nullptr;
  nn::Embedding* positions_ = nullptr;
  nn::Embedding* segments_ = nullptr;
  nn::Dropout* embedding_dropout_ = nullptr;
  std::vector<TransformerBlock*> transformer_blocks_;
  std::vector<WindowGrassmannBlock*> grassmann_blocks_;
  nn::Linear* hidden_ = nullptr;
  nn::Dropout* classifier_dropout_ = nullptr;
  nn::Linear* output_ = nullptr;
};

std::unique_ptr<NliModel> make_nli_model(const NliConfig& config);

}  // namespace wedge::models
