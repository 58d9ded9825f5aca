// The parameter count of every model, written from its constructor's shapes (models/*.cpp):
// a Linear(in, out) holds in·out weights and out biases, a LayerNorm(d) holds γ and β, an
// Embedding(n, d) holds n·d. Each model's parts are listed in the order its modules
// register them, because that is the order parameter_parts() reports.
#include "models/param_count.h"

#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

namespace wedge::models {

std::int64_t checked_product(std::initializer_list<NamedSize> sizes) {
  std::int64_t product = 1;
  bool overflow = false;
  for (const NamedSize& s : sizes) overflow = overflow || __builtin_mul_overflow(product, s.value, &product);
  if (!overflow) return product;
  std::string factors;
  for (const NamedSize& s : sizes) factors += fmt::format("{}{} {}", factors.empty() ? "" : " x ", s.name, s.value);
  throw std::invalid_argument(
      fmt::format("the parameter count does not fit in 64 bits: {} overflows (reduce these sizes)", factors));
}

std::int64_t checked_sum(std::int64_t a, std::int64_t b, std::string_view what) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    throw std::invalid_argument(
        fmt::format("the parameter count does not fit in 64 bits: {} + {} overflows at {} (reduce the sizes)", a, b, what));
  return sum;
}

namespace {

// The rows of a parameter breakdown: a part seen again is added to its first row, as
// parameter_parts() merges every layer's copy of a part into one row.
class Parts {
 public:
  void add(const std::string& part, std::int64_t count) {
    const auto [it, is_new] = row_of_.try_emplace(part, rows_.size());
    if (is_new)
      rows_.emplace_back(part, count);
    else
      rows_[it->second].second = checked_sum(rows_[it->second].second, count, part);
  }
  // Every row of one block, times the number of blocks.
  void add_layers(const Parts& block, std::int64_t layers) {
    for (const auto& [part, count] : block.rows_) {
      const std::string per_layer = part + " per layer";
      add(part, checked_product({{per_layer, count}, {"--layers", layers}}));
    }
  }
  ParameterCount finish() const {
    ParameterCount count;
    count.parts = rows_;
    for (const auto& [part, n] : rows_) count.total = checked_sum(count.total, n, "the total");
    return count;
  }

 private:
  std::vector<std::pair<std::string, std::int64_t>> rows_;
  std::unordered_map<std::string, std::size_t> row_of_;  // part -> its index in rows_
};

// nn::Linear(in, out, bias): the (out, in) weight and, with a bias, out more.
std::int64_t linear(NamedSize in, NamedSize out, bool bias = true) {
  return checked_sum(checked_product({in, out}), bias ? out.value : 0, "a linear layer's bias");
}
// nn::LayerNorm(d): γ and β.
std::int64_t layer_norm(NamedSize d) { return checked_product({{"2", 2}, d}); }
// nn::Embedding(n, d): the (n, d) table.
std::int64_t embedding(NamedSize n, NamedSize d) { return checked_product({n, d}); }

// FeedForward(d, d_ff) under `prefix` ("ffn", "experts.3").
void feed_forward(Parts& block, const std::string& prefix, NamedSize d, NamedSize d_ff) {
  block.add(prefix + ".w1", linear(d, d_ff));
  block.add(prefix + ".w2", linear(d_ff, d));
}

// SelfAttention(d, heads) under "attention": the fused Q/K/V projection and W_O.
void attention(Parts& block, NamedSize d) {
  block.add("attention.qkv", linear(d, {"3 d", checked_product({{"3", 3}, d})}));
  block.add("attention.out", linear(d, d));
}

// The sizes of a SheafMixer (models/sheaf.h) or a PairSheafMixing (models/nli.h): inner
// width E = 2d, the step-size rank ceil(d/16), state N_s, sections d_s, K types, and the
// number of restriction maps per type (D, or 2D for the classifier's two-sided cover).
struct ScanSizes {
  NamedSize d, state, section, types;
  std::int64_t maps;
  std::string_view maps_name;
};

// The mixer's parts under `prefix` ("mixer", "mixing"): its own tensors first (A_log, D,
// dt_bias and the restriction bank, registered directly on the mixer, so they come before
// its child modules), then its projections in the order the constructor registers them.
void sheaf_mixer(Parts& block, const std::string& prefix, const ScanSizes& s) {
  const NamedSize E{"E = 2 d", checked_product({{"2", 2}, s.d})};
  const NamedSize two_E{"2E = 4 d", checked_product({{"4", 4}, s.d})};
  const NamedSize rank{"ceil(d / 16)", (s.d.value + 15) / 16};
  block.add(prefix, checked_sum(checked_sum(checked_product({E, s.state}),  // A_log
                                            checked_product({{"2", 2}, E}), prefix),  // D, dt_bias
                                checked_product({{s.maps_name, s.maps}, s.types, s.section, s.section}),  // R
                                prefix));
  block.add(prefix + ".in", linear(s.d, two_E, false));
  block.add(prefix + ".dt_down", linear(E, rank, false));
  block.add(prefix + ".dt_up", linear(rank, E, false));
  block.add(prefix + ".B", linear(E, s.state, false));
  block.add(prefix + ".C", linear(E, s.state, false));
  block.add(prefix + ".summary", linear(E, s.section));
  block.add(prefix + ".type", linear(s.section, s.types));
  block.add(prefix + ".query", linear(s.section, s.section, false));
  block.add(prefix + ".state_x", linear(s.section, E, false));
  block.add(prefix + ".state_b", linear(s.section, s.state, false));
  block.add(prefix + ".out", linear(E, s.d, false));
}

}  // namespace

namespace detail {

ParameterCount count_parameters(const LMConfig& c) {
  const NamedSize d{"--d-model", c.d_model}, d_ff{"--d-ff", c.d_ff};
  Parts parts;
  // TiedEmbeddingLM: E (also the output head) and P.
  parts.add("token_embedding", embedding({"--vocab-size", c.vocab_size}, d));
  if (c.positions == "learned") parts.add("position_embedding", embedding({"--block", c.block}, d));
  Parts block;
  if (c.model == "transformer") {  // TransformerBlock
    attention(block, d);
    block.add("norm1", layer_norm(d));
    feed_forward(block, "ffn", d, d_ff);
    block.add("norm2", layer_norm(d));
  } else if (c.model == "grassmann") {  // GrassmannBlock; the offsets hold no parameters
    const NamedSize rank{"--rank", c.rank};
    const NamedSize pairs{"C(--rank, 2)", checked_product({rank, {"--rank - 1", c.rank - 1}}) / 2};
    block.add("mixing.reduce", linear(d, rank));
    block.add("mixing.plucker", linear(pairs, d));
    if (c.mix_out_proj) block.add("mixing.out", linear(d, d));
    block.add("gate", linear({"2 d", checked_product({{"2", 2}, d})}, d));
    block.add("norm1", layer_norm(d));
    feed_forward(block, "ffn", d, d_ff);
    block.add("norm2", layer_norm(d));
  } else if (c.model == "sheaf") {  // SheafBlock: the mixer, norms and router, then the experts
    const NamedSize section{"--section-dim", c.section_dim}, types{"--types", c.types};
    sheaf_mixer(block, "mixer",
                {d, {"--state-size", c.state_size}, section, types, c.cover_depth, "--cover-depth"});
    block.add("norm1", layer_norm(d));
    block.add("router", linear(section, types));
    block.add("norm2", layer_norm(d));
    for (std::int64_t k = 0; k < c.types; ++k)
      feed_forward(block, "experts." + std::to_string(k), d, {"--expert-d-ff", c.expert_d_ff});
  } else {
    throw std::invalid_argument(fmt::format("--model '{}' is unknown", c.model));
  }
  parts.add_layers(block, c.layers);
  if (c.model == "sheaf") parts.add("final_norm", layer_norm(d));  // R reads LN(h)
  return parts.finish();
}

ParameterCount count_parameters(const NliConfig& c) {
  const NamedSize d{"--d-model", c.d_model}, d_ff{"--d-ff", c.d_ff};
  Parts parts;
  parts.add("token_embedding", embedding({"the vocabulary", c.vocab_size}, d));
  parts.add("position_embedding", embedding({"2 --max-length - 1", c.positions()}, d));
  parts.add("segment_embedding", embedding({"2 segments", 2}, d));
  Parts block;
  if (c.head == "transformer") {  // TransformerBlock, attention bidirectional
    attention(block, d);
    block.add("norm1", layer_norm(d));
    feed_forward(block, "ffn", d, d_ff);
    block.add("norm2", layer_norm(d));
  } else if (c.head == "grassmann") {  // WindowGrassmannBlock
    const std::int64_t r = c.d_proj / c.mixing_heads;
    const NamedSize pairs{"--mixing-heads x C(--d-proj / --mixing-heads, 2)",
                          checked_product({{"--mixing-heads", c.mixing_heads}, {"r", r}, {"r - 1", r - 1}}) / 2};
    block.add("mixing.reduce", linear(d, {"--d-proj", c.d_proj}));
    block.add("mixing.plucker", linear(pairs, d));
    block.add("gate", linear({"2 d", checked_product({{"2", 2}, d})}, d));
    block.add("norm1", layer_norm(d));
    feed_forward(block, "ffn", d, d_ff);
    block.add("norm2", layer_norm(d));
  } else if (c.head == "sheaf") {  // SheafPairBlock: LN, the mixing, LN, the feed-forward
    block.add("norm1", layer_norm(d));
    sheaf_mixer(block, "mixing",
                {d, {"--state-size", c.state_size}, {"--section-dim", c.section_dim}, {"--types", c.types},
                 checked_product({{"2 sides", 2}, {"--cover-depth", c.cover_depth}}), "2 x --cover-depth"});
    block.add("norm2", layer_norm(d));
    feed_forward(block, "ffn", d, d_ff);
  } else {
    throw std::invalid_argument(fmt::format("--head '{}' is unknown", c.head));
  }
  parts.add_layers(block, c.layers);
  if (c.head == "sheaf") parts.add("final_norm", layer_norm(d));
  // The classifier reads [u; v; |u - v|; u ⊙ v], or v alone for the hypothesis-only control.
  const NamedSize features = c.hypothesis_only ? d : NamedSize{"4 d", checked_product({{"4", 4}, d})};
  parts.add("classifier.hidden", linear(features, d));
  parts.add("classifier.output", linear(d, {"classes", kNliClasses}));
  return parts.finish();
}

}  // namespace detail

ParameterCount parameter_count(const LMConfig& config) {
  config.validate();
  return detail::count_parameters(config);
}

ParameterCount parameter_count(const NliConfig& config) {
  config.validate();
  return detail::count_parameters(config);
}

}  // namespace wedge::models
