#include "models/nli.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/autograd.h"
#include "engine/json_field.h"
#include "models/param_count.h"

namespace wedge::models {

namespace {

// The block settings of TransformerLM / GrassmannLM that the encoder's blocks read.
LMConfig block_config(const NliConfig& c) {
  LMConfig b;
  b.d_model = c.d_model;
  b.heads = c.heads;
  b.d_ff = c.d_ff;
  b.dropout = c.dropout;
  return b;
}

NliConfig validated(const NliConfig& c) {
  c.validate();
  return c;
}

// x (N, W, ...) with its W positions in reverse order.
Tensor reverse_axis1(const Tensor& x) {
  std::vector<Tensor> slices = ops::unbind(x, 1);
  std::reverse(slices.begin(), slices.end());
  return ops::stack(slices, 1);
}

// mask (B, T) float -> (B, T, 1), for scaling token rows.
Tensor column(const Tensor& mask) { return ops::unsqueeze(mask, 2); }

}  // namespace

void NliConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  auto at_most = [&](const char* flag, std::int64_t value, std::int64_t limit) {
    need(value <= limit, fmt::format("{} must be at most {}, got {}", flag, limit, value));
  };
  need(head == "transformer" || head == "grassmann" || head == "sheaf",
       fmt::format("--head '{}' is unknown (transformer, grassmann or sheaf)", head));
  need(vocab_size >= 4, fmt::format("the vocabulary has {} tokens; at least 4 ([PAD], [UNK], [CLS], [SEP])", vocab_size));
  need(vocab_size <= kMaxVocabulary,
       fmt::format("the vocabulary has {} tokens; at most {} (token ids are int32)", vocab_size, kMaxVocabulary));
  need(layers >= 1, fmt::format("--layers must be at least 1, got {}", layers));
  at_most("--layers", layers, kMaxLayers);
  need(d_model >= 1, fmt::format("--d-model must be positive, got {}", d_model));
  at_most("--d-model", d_model, kMaxWidth);
  need(dropout >= 0 && dropout < 1, fmt::format("--dropout must lie in [0, 1), got {}", dropout));
  need(d_ff >= 1, fmt::format("--d-ff must be positive, got {}", d_ff));
  at_most("--d-ff", d_ff, kMaxWidth);
  need(max_length >= 3, fmt::format("--max-length must be at least 3 ([CLS], a token, [SEP]), got {}", max_length));
  need(backbone_d >= 0, fmt::format("the backbone's width must be 0 (none) or positive, got {}", backbone_d));
  at_most("the backbone's width", backbone_d, kMaxWidth);
  at_most("--max-length", max_length, kMaxLength);
  if (head == "transformer")
    need(heads >= 1 && d_model % heads == 0, fmt::format("--heads {} must divide --d-model {}", heads, d_model));
  if (head == "grassmann") {
    need(mixing_heads >= 1 && d_proj % mixing_heads == 0 && d_proj / mixing_heads >= 2,
         fmt::format("--mixing-heads {} must divide --d-proj {} into heads of at least 2", mixing_heads, d_proj));
    at_most("--d-proj", d_proj, kMaxWidth);
    need(window >= 2, fmt::format("--window must be at least 2 (a token and a partner), got {}", window));
    at_most("--window", window, kMaxLength);
    need(stride == window, fmt::format("--stride {} must equal --window {} (non-overlapping windows)", stride, window));
  }
  if (head == "sheaf") {
    need(patch >= 1, fmt::format("--patch must be at least 1, got {}", patch));
    at_most("--patch", patch, kMaxLength);
    need(cover_depth >= 1 && cover_depth <= 16, fmt::format("--cover-depth must be in [1, 16], got {}", cover_depth));
    need(types >= 1 && state_size >= 1, "--types and --state-size must be at least 1");
    at_most("--types", types, kMaxTypes);
    at_most("--state-size", state_size, kMaxWidth);
    need(section_dim >= 2, fmt::format("--section-dim must be at least 2, got {}", section_dim));
    at_most("--section-dim", section_dim, kMaxWidth);
  }
  // Every size is within its bounds; their products may still overflow (throws, naming them).
  detail::count_parameters(*this);
}

void to_json(nlohmann::json& j, const NliConfig& c) {
  j = {{"head", c.head},         {"vocab_size", c.vocab_size},     {"layers", c.layers},
       {"d_model", c.d_model},   {"heads", c.heads},               {"d_ff", c.d_ff},
       {"dropout", c.dropout},   {"max_length", c.max_length},     {"d_proj", c.d_proj},
       {"mixing_heads", c.mixing_heads}, {"window", c.window},     {"stride", c.stride},
       {"patch", c.patch},       {"cover_depth", c.cover_depth},   {"types", c.types},
       {"state_size", c.state_size}, {"section_dim", c.section_dim},
       {"hypothesis_only", c.hypothesis_only}, {"backbone_d", c.backbone_d}, {"seed", c.seed}};
}

void from_json(const nlohmann::json& j, NliConfig& c) {
  const NliConfig d;
  c.head = json_field(j, "head", d.head);
  c.vocab_size = json_field(j, "vocab_size", d.vocab_size);
  c.layers = json_field(j, "layers", d.layers);
  c.d_model = json_field(j, "d_model", d.d_model);
  c.heads = json_field(j, "heads", d.heads);
  c.d_ff = json_field(j, "d_ff", d.d_ff);
  c.dropout = json_field(j, "dropout", d.dropout);
  c.max_length = json_field(j, "max_length", d.max_length);
  c.d_proj = json_field(j, "d_proj", d.d_proj);
  c.mixing_heads = json_field(j, "mixing_heads", d.mixing_heads);
  c.window = json_field(j, "window", d.window);
  c.stride = json_field(j, "stride", d.stride);
  c.patch = json_field(j, "patch", d.patch);
  c.cover_depth = json_field(j, "cover_depth", d.cover_depth);
  c.types = json_field(j, "types", d.types);
  c.state_size = json_field(j, "state_size", d.state_size);
  c.section_dim = json_field(j, "section_dim", d.section_dim);
  c.hypothesis_only = json_field(j, "hypothesis_only", d.hypothesis_only);
  c.backbone_d = json_field(j, "backbone_d", d.backbone_d);
  c.seed = json_field(j, "seed", d.seed);
}

// ---- the Grassmann–Plücker head ----------------------------------------------------------

WindowPluckerMixing::WindowPluckerMixing(const NliConfig& c, Generator& init)
    : heads_(c.mixing_heads),
      rank_(c.d_proj / c.mixing_heads),
      window_(c.window),
      reduce_(register_module("reduce", std::make_shared<nn::Linear>(c.d_model, c.d_proj, init))),
      plucker_(register_module("plucker", std::make_shared<nn::Linear>(
                                              c.mixing_heads * (rank_ * (rank_ - 1) / 2), c.d_model, init))) {}

Tensor WindowPluckerMixing::forward(const Tensor& h, const Tensor& mask) const {
  const std::int64_t B = h.size(0), T = h.size(1), H = heads_, r = rank_, W = window_;
  const std::int64_t windows = (T + W - 1) / W, padded = windows * W, pairs = r * (r - 1) / 2;
  // z at padding is 0, so a padded partner's Plücker vector z_t ∧ 0 is 0 and adds nothing.
  Tensor z = reduce_.forward(h) * column(mask);  // (B, T, H r)
  if (padded > T) z = ops::cat({z, Tensor::zeros({B, padded - T, H * r}, z.dtype(), z.device())}, 1);
  // The real partners of each token (the real tokens of its window, less itself), from the
  // mask on the host: 1 / partners where a real token has some, and where it has none the
  // token gets g = 0 (has_partner 0).
  const std::vector<double> real = mask.to(Device::cpu()).to(DType::F64).to_vector<double>();
  std::vector<double> has_partner(static_cast<std::size_t>(B * padded), 0.0), inverse(has_partner.size(), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t w = 0; w < windows; ++w) {
      double count = 0;
      for (std::int64_t t = w * W; t < std::min(T, (w + 1) * W); ++t) count += real[static_cast<std::size_t>(b * T + t)];
      for (std::int64_t t = w * W; t < std::min(T, (w + 1) * W); ++t) {
        const std::size_t i = static_cast<std::size_t>(b * padded + t);
        const double partners = count - real[static_cast<std::size_t>(b * T + t)];
        if (real[static_cast<std::size_t>(b * T + t)] > 0 && partners > 0) {
          has_partner[i] = 1.0;
          inverse[i] = 1.0 / partners;
        }
      }
    }
  auto on_device = [&](const std::vector<double>& v, const Shape& shape) {
    return Tensor::from_vector(v, shape).to(h.dtype()).to(h.device());
  };
  // (B, padded, H, r) -> (B, H, windows, W, r) -> one sequence of W tokens per (b, head, window).
  const Tensor zw = ops::reshape(ops::contiguous(ops::permute(ops::reshape(z, {B, padded, H, r}), {0, 2, 1, 3})),
                                 {B * H * windows, W, r});
  // Partners before t in the window (offsets 1..W-1), and after t (the same on the reversed
  // window). plucker_mean averages over the offsets that stay inside the window: i of them
  // before position i and W-1-i after it, so the sums are the means times those counts.
  std::vector<std::int32_t> offsets;
  for (std::int32_t o = 1; o < W; ++o) offsets.push_back(o);
  std::vector<double> before(static_cast<std::size_t>(W)), after(before.size());
  for (std::int64_t i = 0; i < W; ++i) {
    before[static_cast<std::size_t>(i)] = double(i);
    after[static_cast<std::size_t>(i)] = double(W - 1 - i);
  }
  const Tensor counts_before = Tensor::from_vector(before, {1, W, 1}).to(h.dtype()).to(h.device());
  const Tensor counts_after = Tensor::from_vector(after, {1, W, 1}).to(h.dtype()).to(h.device());
  const Tensor sums = ops::plucker_mean(zw, offsets) * counts_before +
                      reverse_axis1(ops::plucker_mean(reverse_axis1(zw), offsets)) * counts_after;  // (N, W, pairs)
  // Mean per head, the heads side by side: (B, H, windows, W, pairs) -> (B, padded, H·pairs).
  const Tensor p_mean = ops::reshape(sums, {B, H, windows, W, pairs}) * on_device(inverse, {B, 1, windows, W, 1});
  const Tensor features = ops::reshape(ops::contiguous(ops::permute(p_mean, {0, 2, 3, 1, 4})), {B, padded, H * pairs});
  const Tensor g = plucker_.forward(features) * on_device(has_partner, {B, padded, 1});
  return padded > T ? ops::narrow(g, 1, 0, T) : g;
}

WindowGrassmannBlock::WindowGrassmannBlock(const NliConfig& c, Generator& init, Generator& dropout)
    : mixing_(register_module("mixing", std::make_shared<WindowPluckerMixing>(c, init))),
      mixing_dropout_(register_module("mixing_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      gate_(register_module("gate", std::make_shared<nn::Linear>(2 * c.d_model, c.d_model, init))),
      norm1_(register_module("norm1", std::make_shared<nn::LayerNorm>(c.d_model))),
      ffn_(register_module("ffn", std::make_shared<FeedForward>(c.d_model, c.d_ff, init))),
      ffn_dropout_(register_module("ffn_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm2_(register_module("norm2", std::make_shared<nn::LayerNorm>(c.d_model))) {}

Tensor WindowGrassmannBlock::forward(const Tensor& h_in, const Tensor& mask) const {
  const Tensor g = mixing_dropout_.forward(mixing_.forward(h_in, mask));
  const Tensor h = norm1_.forward(ops::gate_mix(gate_.forward(ops::cat({h_in, g}, 2)), h_in, g));
  return norm2_.forward(h + ffn_dropout_.forward(ffn_.forward(h)));
}

// ---- the SheafState head -----------------------------------------------------------------

PairSheafMixing::PairSheafMixing(const NliConfig& c, Generator& init)
    : inner_(2 * c.d_model),
      state_(c.state_size),
      patch_(c.patch),
      depth_(c.cover_depth),
      types_(c.types),
      section_(c.section_dim),
      in_(register_module("in", std::make_shared<nn::Linear>(c.d_model, 4 * c.d_model, init, false))),
      dt_down_(register_module("dt_down", std::make_shared<nn::Linear>(inner_, (c.d_model + 15) / 16, init, false))),
      dt_up_(register_module("dt_up", std::make_shared<nn::Linear>((c.d_model + 15) / 16, inner_, init, false))),
      b_proj_(register_module("B", std::make_shared<nn::Linear>(inner_, c.state_size, init, false))),
      c_proj_(register_module("C", std::make_shared<nn::Linear>(inner_, c.state_size, init, false))),
      A_log_(register_parameter("A_log", Tensor::zeros({inner_, c.state_size}))),
      D_skip_(register_parameter("D", Tensor::ones({inner_}))),
      dt_bias_(register_parameter("dt_bias", Tensor::zeros({inner_}))),
      summary_(register_module("summary", std::make_shared<nn::Linear>(inner_, c.section_dim, init))),
      type_(register_module("type", std::make_shared<nn::Linear>(c.section_dim, c.types, init))),
      restriction_(register_parameter("restriction", Tensor::zeros({2, c.cover_depth, c.types, c.section_dim, c.section_dim}))),
      query_(register_module("query", std::make_shared<nn::Linear>(c.section_dim, c.section_dim, init, false))),
      state_x_(register_module("state_x", std::make_shared<nn::Linear>(c.section_dim, inner_, init, false))),
      state_b_(register_module("state_b", std::make_shared<nn::Linear>(c.section_dim, c.state_size, init, false))),
      out_(register_module("out", std::make_shared<nn::Linear>(inner_, c.d_model, init, false))) {
  init_selective_scan(A_log_, dt_bias_, init);
  init_restriction_bank(restriction_, init);
}

Tensor PairSheafMixing::forward(const Tensor& h, const Tensor& mask) const {
  const std::int64_t B = h.size(0), T = h.size(1), E = inner_, N = state_, P = patch_, D = depth_, K = types_,
                     ds = section_, patches = (T + P - 1) / P, slots = 2 * D;
  const Device device = h.device();
  const ScanInputs in = scan_inputs(h, in_, dt_down_, dt_up_, b_proj_, c_proj_);
  const Tensor &u = in.u, &z = in.z, &delta = in.delta, &Bm = in.B, &Cm = in.C;
  const Tensor y0 = ops::selective_scan(u, delta, A_log_, Bm, Cm, D_skip_, dt_bias_, Tensor(), P);

  // From the mask (host): each row's real length (padding only at the end), the row of each
  // patch's last real token, and which cover slots hold a patch with a real token.
  const std::vector<double> real = mask.to(Device::cpu()).to(DType::F64).to_vector<double>();
  std::vector<std::int64_t> length(static_cast<std::size_t>(B), 0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) length[static_cast<std::size_t>(b)] += real[static_cast<std::size_t>(b * T + t)] > 0;
  auto has_real = [&](std::int64_t b, std::int64_t p) { return p >= 0 && p < patches && p * P < length[static_cast<std::size_t>(b)]; };
  std::vector<std::int32_t> last_rows, slot_rows;
  std::vector<double> slot_bias, has_cover(static_cast<std::size_t>(B * patches), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t p = 0; p < patches; ++p) {
      const std::int64_t end = std::min((p + 1) * P, length[static_cast<std::size_t>(b)]);
      last_rows.push_back(static_cast<std::int32_t>(b * T + std::max(end, p * P + 1) - 1));
      for (std::int64_t side = 0; side < 2; ++side)
        for (std::int64_t j = 0; j < D; ++j) {
          const std::int64_t q = side == 0 ? p - (std::int64_t{1} << j) : p + (std::int64_t{1} << j);
          const bool valid = has_real(b, p) && has_real(b, q);
          // Row of r_all viewed as (B·patches·2D, d_s): q's summary restricted by map (side, j).
          slot_rows.push_back(valid ? static_cast<std::int32_t>(((b * patches + q) * 2 + side) * D + j) : 0);
          slot_bias.push_back(valid ? 0.0 : -1e9);
          if (valid) has_cover[static_cast<std::size_t>(b * patches + p)] = 1.0;
        }
    }
  auto on_device = [&](const std::vector<double>& v, const Shape& shape) {
    return Tensor::from_vector(v, shape).to(h.dtype()).to(device);
  };
  auto gather = [&](const Tensor& x, std::int64_t width, const std::vector<std::int32_t>& rows) {
    const Tensor ids = Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())}).to(device);
    return ops::embedding(ops::reshape(x, {-1, width}), ids);
  };
  // Summaries, types, and every restriction of every summary: (B, patches, 2, D, d_s).
  const Tensor s = ops::layer_norm(summary_.forward(gather(y0, E, last_rows)), Tensor(), Tensor());  // (B·patches, d_s)
  const Tensor pi = ops::softmax(type_.forward(s), 1);                                             // (B·patches, K)
  const Tensor all = ops::reshape(ops::linear(s, ops::reshape(restriction_, {slots * K * ds, ds})), {B * patches, slots, K, ds});
  const Tensor r_all = ops::sum(all * ops::reshape(pi, {B * patches, 1, K, 1}), {2});              // (B·patches, 2D, d_s)
  const Tensor cover = ops::reshape(gather(r_all, ds, slot_rows), {B * patches, slots, ds});
  const Tensor scores = ops::sum(cover * ops::unsqueeze(query_.forward(s), 1), {2}) * (1.0 / std::sqrt(double(ds))) +
                        on_device(slot_bias, {B * patches, slots});
  const Tensor c = ops::sum(cover * ops::unsqueeze(ops::softmax(scores, 1), 2), {1}) *
                   on_device(has_cover, {B * patches, 1});                                         // (B·patches, d_s)
  const Tensor h0 = ops::unsqueeze(ops::reshape(state_x_.forward(c), {B, patches, E}), 3) *
                    ops::unsqueeze(ops::reshape(state_b_.forward(c), {B, patches, N}), 2);          // (B, patches, E, N)
  // The output gate silu(z) is taken inside the scan (its ungated output is never written).
  const Tensor y = ops::selective_scan(u, delta, A_log_, Bm, Cm, D_skip_, dt_bias_, h0, P, z);
  return out_.forward(y);
}

SheafPairBlock::SheafPairBlock(const NliConfig& c, Generator& init, Generator& dropout)
    : norm1_(register_module("norm1", std::make_shared<nn::LayerNorm>(c.d_model))),
      mixing_(register_module("mixing", std::make_shared<PairSheafMixing>(c, init))),
      mixing_dropout_(register_module("mixing_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm2_(register_module("norm2", std::make_shared<nn::LayerNorm>(c.d_model))),
      ffn_(register_module("ffn", std::make_shared<FeedForward>(c.d_model, c.d_ff, init))),
      ffn_dropout_(register_module("ffn_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))) {}

Tensor SheafPairBlock::forward(const Tensor& h_in, const Tensor& mask) const {
  const Tensor h = h_in + mixing_dropout_.forward(mixing_.forward(norm1_.forward(h_in), mask));
  return h + ffn_dropout_.forward(ffn_.forward(norm2_.forward(h)));
}

// ---- the model ---------------------------------------------------------------------------

NliModel::NliModel(const NliConfig& config)
    : config_(validated(config)), init_gen_(config.seed), dropout_gen_(init_gen_.next_seed()) {
  const NliConfig& c = config_;
  if (c.backbone_d > 0)
    backbone_in_ = &register_module("backbone_projection", std::make_shared<nn::Linear>(c.backbone_d, c.d_model, init_gen_));
  else
    tokens_ = &register_module("token_embedding", std::make_shared<nn::Embedding>(c.vocab_size, c.d_model, init_gen_));
  positions_ = &register_module("position_embedding", std::make_shared<nn::Embedding>(c.positions(), c.d_model, init_gen_));
  segments_ = &register_module("segment_embedding", std::make_shared<nn::Embedding>(2, c.d_model, init_gen_));
  embedding_dropout_ = &register_module("embedding_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout_gen_));
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string name = "blocks." + std::to_string(i);
    if (c.head == "transformer")
      transformer_blocks_.push_back(
          &register_module(name, std::make_shared<TransformerBlock>(block_config(c), init_gen_, dropout_gen_)));
    else if (c.head == "grassmann")
      grassmann_blocks_.push_back(
          &register_module(name, std::make_shared<WindowGrassmannBlock>(c, init_gen_, dropout_gen_)));
    else
      sheaf_blocks_.push_back(&register_module(name, std::make_shared<SheafPairBlock>(c, init_gen_, dropout_gen_)));
  }
  if (c.head == "sheaf") final_norm_ = &register_module("final_norm", std::make_shared<nn::LayerNorm>(c.d_model));
  const std::int64_t features = c.hypothesis_only ? c.d_model : 4 * c.d_model;
  hidden_ = &register_module("classifier.hidden", std::make_shared<nn::Linear>(features, c.d_model, init_gen_));
  classifier_dropout_ = &register_module("classifier.dropout", std::make_shared<nn::Dropout>(c.dropout, dropout_gen_));
  output_ = &register_module("classifier.output", std::make_shared<nn::Linear>(c.d_model, kNliClasses, init_gen_));
}

Tensor NliModel::forward(const Tensor& ids, const Tensor& segments, const Tensor& mask) {
  if (ids.dtype() != DType::I32 || ids.dim() != 2)
    throw std::invalid_argument("nli: ids must be (batch, tokens) int32, got " + ids.str());
  if (segments.dtype() != DType::I32 || segments.shape() != ids.shape())
    throw std::invalid_argument("nli: segment ids must be int32 of the ids' shape, got " + segments.str());
  if (mask.shape() != ids.shape() || !is_floating(mask.dtype()))
    throw std::invalid_argument("nli: the mask must be floating, of the ids' shape, got " + mask.str());
  const std::int64_t B = ids.size(0), T = ids.size(1);
  if (T < 1 || T > config_.positions())
    throw std::invalid_argument(fmt::format("nli: {} tokens per row; the position table holds {}", T, config_.positions()));
  const Tensor m = mask.to(positions_->weight.dtype());
  std::vector<std::int32_t> position_ids(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) position_ids[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t);
  Tensor h = positions_->forward(Tensor::from_vector(position_ids, {T}).to(ids.device())) + segments_->forward(segments);
  if (backbone_in_ != nullptr) {
    if (!backbone_)
      throw std::invalid_argument(fmt::format(
          "nli: this classifier reads the token states of a backbone language model (width {}); none is attached",
          config_.backbone_d));
    Tensor states;
    {
      NoGradGuard frozen;
      states = backbone_->hidden_states(ids);
    }
    h = backbone_in_->forward(states) + h;
  } else {
    h = tokens_->forward(ids) + h;
  }
  h = embedding_dropout_->forward(h);

  if (!transformer_blocks_.empty()) {
    const Tensor key_bias = ops::reshape((m - 1.0) * 1e9, {B, 1, 1, T});  // 0 real, -1e9 padding
    for (TransformerBlock* block : transformer_blocks_) h = block->forward(h, key_bias);
  }
  for (WindowGrassmannBlock* block : grassmann_blocks_) h = block->forward(h, m);
  for (SheafPairBlock* block : sheaf_blocks_) h = block->forward(h, m);
  if (final_norm_ != nullptr) h = final_norm_->forward(h);

  // Masked means over each part; a part with no real token in a row is an error upstream.
  auto pool = [&](const Tensor& weights) {  // (B, T) -> (B, d)
    return ops::sum(h * column(weights), {1}) / ops::sum(column(weights), {1});
  };
  const Tensor seg = segments.to(m.dtype());
  const Tensor v = pool(m * seg);
  Tensor features = v;
  if (!config_.hypothesis_only) {
    const Tensor u = pool(m * (1.0 - seg));
    features = ops::cat({u, v, ops::abs(u - v), u * v}, 1);
  }
  return output_->forward(classifier_dropout_->forward(hidden_->forward_gelu(features)));
}

std::vector<std::pair<std::string, std::int64_t>> NliModel::parameter_breakdown() const { return parameter_parts(*this); }

void NliModel::attach_backbone(std::shared_ptr<LanguageModel> backbone) {
  if (config_.backbone_d <= 0) throw std::invalid_argument("nli: this classifier has its own token table; it takes no backbone");
  if (!backbone) throw std::invalid_argument("nli: no backbone given");
  const LMConfig& b = backbone->config();
  if (b.d_model != config_.backbone_d)
    throw std::invalid_argument(fmt::format("nli: the backbone's token states are {} wide; this classifier reads {}",
                                            b.d_model, config_.backbone_d));
  if (b.vocab_size != config_.vocab_size)
    throw std::invalid_argument(fmt::format("nli: the backbone's vocabulary has {} entries; this classifier's {}",
                                            b.vocab_size, config_.vocab_size));
  if (b.block < config_.positions())
    throw std::invalid_argument(fmt::format(
        "nli: the backbone reads at most {} tokens (its --block); a pair of two sentences of --max-length {} needs {}", b.block,
        config_.max_length, config_.positions()));
  backbone->eval();
  backbone_ = std::move(backbone);
}

std::unique_ptr<NliModel> make_nli_model(const NliConfig& config) { return std::make_unique<NliModel>(config); }

}  // namespace wedge::models
