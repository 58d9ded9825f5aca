#include "models/sheaf.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "engine/profile.h"

namespace wedge::models {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The low rank of Mamba's step-size projection: ceil(d / 16).
std::int64_t dt_rank(std::int64_t d_model) { return ceil_div(d_model, 16); }

// int32 ids on a device, for the row gathers below (ops::embedding is the gather of rows
// whose backward is the deterministic scatter-add).
Tensor ids_on(const std::vector<std::int32_t>& ids, Device device) {
  return Tensor::from_vector(ids, {static_cast<std::int64_t>(ids.size())}).to(device);
}

// Rows `rows` of x viewed as (B·L, width) -> (rows.size(), width).
Tensor gather_rows(const Tensor& x, std::int64_t width, const std::vector<std::int32_t>& rows) {
  return ops::embedding(ops::reshape(x, {-1, width}), ids_on(rows, x.device()));
}

// x (B, L, ...) cut along L into pieces of P tokens, the last one shorter where P does not
// divide L: views, whose gradients unbind's backward assembles into one tensor.
std::vector<Tensor> token_pieces(const Tensor& x, std::int64_t P) {
  const std::int64_t L = x.size(1), whole = L / P;
  if (L <= P) return {x};
  std::vector<Tensor> pieces;
  if (whole > 0) {
    Shape split = {x.size(0), whole, P};
    for (int d = 2; d < x.dim(); ++d) split.push_back(x.size(d));
    pieces = ops::unbind(ops::reshape(whole * P == L ? x : ops::narrow(x, 1, 0, whole * P), split), 1);
  }
  if (whole * P < L) pieces.push_back(ops::narrow(x, 1, whole * P, L - whole * P));
  return pieces;
}

}  // namespace

// ---- the mixer: local dynamics and gluing ---------------------------------------------

void init_selective_scan(Tensor& A_log, Tensor& dt_bias, Generator& init) {
  NoGradGuard no_grad;
  const std::int64_t inner = A_log.size(0), state = A_log.size(1);
  // Mamba's initialisation: A = -(1, 2, ..., N) for every channel (a spread of time
  // scales), step sizes dt = softplus(dt_bias) log-uniform in [0.001, 0.1].
  std::vector<float> a_log(static_cast<std::size_t>(inner * state)), bias(static_cast<std::size_t>(inner));
  for (std::int64_t e = 0; e < inner; ++e) {
    for (std::int64_t n = 0; n < state; ++n) a_log[static_cast<std::size_t>(e * state + n)] = std::log(float(n + 1));
    const double dt = std::exp(std::log(0.001) + init.uniform() * (std::log(0.1) - std::log(0.001)));
    bias[static_cast<std::size_t>(e)] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus^-1(dt)
  }
  A_log.copy_(Tensor::from_vector(a_log, A_log.shape()));
  dt_bias.copy_(Tensor::from_vector(bias, dt_bias.shape()));
}

ScanInputs scan_inputs(const Tensor& h, const nn::Linear& in_proj, const nn::Linear& dt_down, const nn::Linear& dt_up,
                       const nn::Linear& b_proj, const nn::Linear& c_proj) {
  const std::int64_t E = in_proj.weight.size(0) / 2, N = b_proj.weight.size(0), rank = dt_down.weight.size(0);
  // x and z from the two halves of W_in's rows (contiguous views, one backward for both):
  // two packed outputs, where slicing one (B, L, 2E) output would copy both halves out.
  const std::vector<Tensor> w = ops::unbind(ops::reshape(in_proj.weight, {2, E, in_proj.weight.size(1)}), 0);
  ScanInputs in;
  in.u = ops::silu(ops::linear(h, w[0]));
  in.z = ops::linear(h, w[1]);
  const Tensor projected = ops::linear(in.u, ops::cat({dt_down.weight, b_proj.weight, c_proj.weight}, 0));
  in.delta = dt_up.forward(ops::narrow(projected, 2, 0, rank));
  in.B = ops::narrow(projected, 2, rank, N);
  in.C = ops::narrow(projected, 2, rank + N, N);
  return in;
}

void init_restriction_bank(Tensor& bank, Generator& init) {
  NoGradGuard no_grad;
  // Each restriction map starts near the identity, so a summary passes to its neighbours
  // almost unchanged before training shapes the maps.
  const std::int64_t ds = bank.size(-1), maps = bank.numel() / (ds * ds);
  std::vector<float> r(static_cast<std::size_t>(bank.numel()));
  for (std::int64_t m = 0; m < maps; ++m)
    for (std::int64_t i = 0; i < ds; ++i)
      for (std::int64_t j = 0; j < ds; ++j)
        r[static_cast<std::size_t>((m * ds + i) * ds + j)] = static_cast<float>((i == j ? 1.0 : 0.0) + 0.02 * init.normal());
  bank.copy_(Tensor::from_vector(r, bank.shape()));
}

SheafMixer::SheafMixer(const LMConfig& c, Generator& init)
    : d_model_(c.d_model),
      inner_(2 * c.d_model),
      state_(c.state_size),
      patch_(c.patch),
      depth_(c.cover_depth),
      types_(c.types),
      section_(c.section_dim),
      leaky_(c.leaky),
      in_(register_module("in", std::make_shared<nn::Linear>(c.d_model, 4 * c.d_model, init, false))),
      dt_down_(register_module("dt_down", std::make_shared<nn::Linear>(2 * c.d_model, dt_rank(c.d_model), init, false))),
      dt_up_(register_module("dt_up", std::make_shared<nn::Linear>(dt_rank(c.d_model), 2 * c.d_model, init, false))),
      b_proj_(register_module("B", std::make_shared<nn::Linear>(2 * c.d_model, c.state_size, init, false))),
      c_proj_(register_module("C", std::make_shared<nn::Linear>(2 * c.d_model, c.state_size, init, false))),
      A_log_(register_parameter("A_log", Tensor::zeros({2 * c.d_model, c.state_size}))),
      D_skip_(register_parameter("D", Tensor::ones({2 * c.d_model}))),
      dt_bias_(register_parameter("dt_bias", Tensor::zeros({2 * c.d_model}))),
      summary_(register_module("summary", std::make_shared<nn::Linear>(2 * c.d_model, c.section_dim, init))),
      type_(register_module("type", std::make_shared<nn::Linear>(c.section_dim, c.types, init))),
      restriction_(register_parameter("restriction", Tensor::zeros({c.cover_depth, c.types, c.section_dim, c.section_dim}))),
      query_(register_module("query", std::make_shared<nn::Linear>(c.section_dim, c.section_dim, init, false))),
      state_x_(register_module("state_x", std::make_shared<nn::Linear>(c.section_dim, 2 * c.d_model, init, false))),
      state_b_(register_module("state_b", std::make_shared<nn::Linear>(c.section_dim, c.state_size, init, false))),
      out_(register_module("out", std::make_shared<nn::Linear>(2 * c.d_model, c.d_model, init, false))) {
  init_selective_scan(A_log_, dt_bias_, init);
  init_restriction_bank(restriction_, init);
}

// The patch summary is layer-normalised (no affine): h0 is a product of two maps of c_p,
// so without it the chain s_p -> c_{p+1} -> h0_{p+1} -> s_{p+1} is a quadratic recurrence
// over the patches, and its values square at every patch once the weights have grown.
Tensor SheafMixer::summarise(const Tensor& y_last) const {
  return ops::layer_norm(summary_.forward(y_last), Tensor(), Tensor());
}

std::vector<Tensor> SheafMixer::restrict_all(const Tensor& s) const {
  const std::int64_t B = s.size(0), ds = section_;
  const Tensor bank = ops::reshape(restriction_, {depth_ * types_ * ds, ds});
  const Tensor pi = ops::softmax(type_.forward(s), 1);                                // (B, K)
  const Tensor all = ops::reshape(ops::linear(s, bank), {B, depth_, types_, ds});     // R[j, k] s
  return ops::unbind(ops::sum(all * ops::reshape(pi, {B, 1, types_, 1}), {2}), 1);  // Σ_k π_k R[j, k] s
}

SheafMixer::Glued SheafMixer::glue(const std::vector<Tensor>& cover, const Tensor& anchor) const {
  Glued g;
  const Tensor r = ops::stack(cover, 1);  // (B, m, ds)
  const Tensor scores = ops::sum(r * ops::unsqueeze(query_.forward(anchor), 1), {2}) * (1.0 / std::sqrt(double(section_)));
  g.weights = ops::softmax(scores, 1);                                                   // a_pq, (B, m)
  g.section = ops::sum(r * ops::unsqueeze(g.weights, 2), {1});                           // c_p, (B, ds)
  const Tensor spread = ops::sum(ops::pow_scalar(r - ops::unsqueeze(g.section, 1), 2.0), {2});  // (B, m)
  g.energy = ops::sum(g.weights * spread, {1});                                          // E_p, (B)
  const Tensor scale = ops::sum(g.weights * ops::sum(r * r, {2}), {1});                  // Σ a ||r||^2
  g.energy_normalised = g.energy / (scale + 1e-6);
  return g;
}

Tensor SheafMixer::start_state(const Tensor& section) const {
  return ops::unsqueeze(ops::unsqueeze(state_x_.forward(section), 2) * ops::unsqueeze(state_b_.forward(section), 1), 1);
}

Tensor SheafMixer::output_at_end(const Tensor& last_state, const Tensor& C, const Tensor& u) const {
  const std::int64_t B = u.size(0), n = u.size(1), E = inner_, N = state_;
  const Tensor u_last = ops::reshape(ops::narrow(u, 1, n - 1, 1), {B, E});
  const Tensor C_last = ops::reshape(ops::narrow(C, 1, n - 1, 1), {B, 1, N});
  return ops::sum(ops::reshape(last_state, {B, E, N}) * C_last, {2}) + u_last * D_skip_;
}

Tensor SheafMixer::forward(const Tensor& h, GluingReport& report) const {
  const std::int64_t B = h.size(0), L = h.size(1), P = patch_;
  const std::int64_t patches = ceil_div(L, P);
  const Device device = h.device();
  const profile::Part part("selective scan");

  const ScanInputs in = scan_inputs(h, in_, dt_down_, dt_up_, b_proj_, c_proj_);
  const std::vector<Tensor> u = token_pieces(in.u, P), z = token_pieces(in.z, P), delta = token_pieces(in.delta, P),
                            Bm = token_pieces(in.B, P), Cm = token_pieces(in.C, P);

  // Patch by patch, in order: the section c_p is glued from the summaries of the patches
  // p - 2^j of its cover, all complete; the scan of the patch's tokens starts from the
  // glued state h0_p = (W_hx c_p) ⊗ (W_hb c_p); and the patch's summary is read from its
  // ungated output at its last token, y = C · h + D u, from the state the scan ends in.
  // Each token is scanned once, and the chain never waits on a whole-sequence pass.
  // restricted[q][j] holds R(π_q, δ_j) s_q.
  std::vector<std::vector<Tensor>> restricted(static_cast<std::size_t>(patches));
  std::vector<Tensor> summaries(restricted.size()), sections, energies, normalised, ys;
  // In eval mode, a_pq is kept for the report, in D slots per patch (slot j: q = p - 2^j).
  const bool report_weights = !is_training();
  std::vector<Tensor> weight_rows;
  for (std::int64_t p = 0; p < patches; ++p) {
    const std::size_t pu = static_cast<std::size_t>(p);
    Tensor c, h0;
    {
      const profile::Part chain("gluing chain");
      std::vector<Tensor> cover;  // r_pq, (B, ds) each
      for (std::int64_t j = 0; j < depth_; ++j) {
        const std::int64_t q = p - (std::int64_t{1} << j);
        if (q < 0) break;
        cover.push_back(restricted[static_cast<std::size_t>(q)][static_cast<std::size_t>(j)]);
      }
      if (leaky_) {
        // TEST ONLY: the patch's own summary (from a zero-state scan of its tokens, so from
        // every token of the patch, later ones included) joins its cover. The causality
        // audit must fail.
        Tensor zero_last;
        ops::selective_scan(u[pu], delta[pu], A_log_, Bm[pu], Cm[pu], D_skip_, dt_bias_, Tensor(), P, Tensor(), &zero_last);
        cover.push_back(restrict_all(summarise(output_at_end(zero_last, Cm[pu], u[pu])))[0]);
      }
      const auto slots = static_cast<std::int64_t>(cover.size()) - (leaky_ ? 1 : 0);  // real cover members
      if (cover.empty()) {
        c = Tensor::zeros({B, section_}, h.dtype(), device);
        if (report_weights) weight_rows.push_back(Tensor::zeros({B, depth_}, h.dtype(), device));
      } else {
        const Glued glued = glue(cover, p > 0 ? summaries[pu - 1] : cover.back());
        c = glued.section;
        energies.push_back(glued.energy);
        normalised.push_back(glued.energy_normalised);
        if (report_weights) {
          Tensor w = ops::narrow(glued.weights.detach(), 1, 0, slots);
          if (slots < depth_) w = ops::cat({w, Tensor::zeros({B, depth_ - slots}, h.dtype(), device)}, 1);
          weight_rows.push_back(w);
        }
      }
      h0 = start_state(c);
    }
    // The output gate silu(z) is taken inside the scan (its ungated output is never written).
    Tensor last;
    ys.push_back(ops::selective_scan(u[pu], delta[pu], A_log_, Bm[pu], Cm[pu], D_skip_, dt_bias_, h0, P, z[pu], &last));
    sections.push_back(c);
    if (p + 1 < patches) {  // the last patch's summary would glue nothing
      const profile::Part chain("gluing chain");
      summaries[pu] = summarise(output_at_end(last, Cm[pu], u[pu]));
      restricted[pu] = restrict_all(summaries[pu]);
    }
  }
  const Tensor y = ys.size() == 1 ? ys[0] : ops::cat(ys, 1);

  report.sections = ops::stack(sections, 1);
  if (report_weights) report.weights = ops::stack(weight_rows, 1);
  if (!energies.empty()) {
    report.energy = ops::mean(ops::stack(energies, 1));
    report.energy_normalised = ops::mean(ops::stack(normalised, 1));
  }
  return out_.forward(y);
}

std::int64_t SheafLayerStream::bytes() const {
  std::vector<Tensor> all = {state, section, summary};
  for (const auto& q : restricted) all.insert(all.end(), q.begin(), q.end());
  return TiedEmbeddingLM::BlocksState::bytes_of(all);
}

Tensor SheafMixer::forward_stream(const Tensor& h, std::int64_t position, SheafLayerStream& st,
                                  std::vector<StreamSegment>& segments) const {
  const ScanInputs in = scan_inputs(h, in_, dt_down_, dt_up_, b_proj_, c_proj_);  // of the new positions only
  std::vector<Tensor> ys;  // the gated scan output of each piece of the chunk, (B, length, E)
  // course 22 begin: the streaming step of SheafStateLM: glue a patch's section at its first token, continue the scan from the kept state, summarise the patch after its last (models/stream_walkthrough.md)
  const std::int64_t B = h.size(0), n = h.size(1), P = patch_;
  const std::size_t reach = std::size_t{1} << (depth_ - 1);  // the farthest cover distance
  for (std::int64_t a = 0; a < n;) {
    const std::int64_t t = position + a, offset = t % P, length = std::min(n - a, P - offset);
    if (offset == 0) {
      // Patch p starts: glue its section from the completed patches p - 2^j of its cover
      // (restricted holds the latest min(p, 2^(D-1)) of them, newest last), and start
      // the scan from h0_p = (W_hx c_p) ⊗ (W_hb c_p).
      std::vector<Tensor> cover;
      for (std::int64_t j = 0; j < depth_; ++j) {
        const std::size_t back = std::size_t{1} << j;
        if (back > st.restricted.size()) break;
        cover.push_back(st.restricted[st.restricted.size() - back][static_cast<std::size_t>(j)]);
      }
      st.section = cover.empty() ? Tensor::zeros({B, section_}, h.dtype(), h.device()) : glue(cover, st.summary).section;
      st.state = start_state(st.section);
    }
    auto piece = [&](const Tensor& x) { return ops::narrow(x, 1, a, length); };
    Tensor last_state;
    ys.push_back(ops::selective_scan(piece(in.u), piece(in.delta), A_log_, piece(in.B), piece(in.C), D_skip_, dt_bias_,
                                     st.state, length, piece(in.z), &last_state));
    st.state = last_state;
    segments.push_back({a, length, st.section});
    if (offset + length == P) {
      // Patch p is complete: its summary from the ungated output at its last token,
      // y = C · h + D u, joins the cover of the patches after it.
      st.summary = summarise(output_at_end(last_state, piece(in.C), piece(in.u)));
      st.restricted.push_back(restrict_all(st.summary));
      if (st.restricted.size() > reach) st.restricted.pop_front();
    }
    a += length;
  }
  // course 22 end
  return out_.forward(ys.size() == 1 ? ys[0] : ops::cat(ys, 1));
}

// ---- the block: mixer, then the patch-type experts ---------------------------------------

SheafBlock::SheafBlock(const LMConfig& c, Generator& init, Generator& dropout)
    : patch_(c.patch),
      mixer_(register_module("mixer", std::make_shared<SheafMixer>(c, init))),
      mixer_dropout_(register_module("mixer_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm1_(register_module("norm1", std::make_shared<nn::LayerNorm>(c.d_model))),
      router_(register_module("router", std::make_shared<nn::Linear>(c.section_dim, c.types, init))),
      expert_dropout_(register_module("expert_dropout", std::make_shared<nn::Dropout>(c.dropout, dropout))),
      norm2_(register_module("norm2", std::make_shared<nn::LayerNorm>(c.d_model))) {
  for (std::int64_t k = 0; k < c.types; ++k)
    experts_.push_back(&register_module("experts." + std::to_string(k),
                                        std::make_shared<FeedForward>(c.d_model, c.expert_d_ff, init)));
}

Tensor SheafBlock::experts(const Tensor& x, const Tensor& probs_in, const std::vector<std::int32_t>& patch_row,
                           std::vector<double>* count) const {
  const profile::Part part("experts");
  const std::int64_t d = x.size(2), K = static_cast<std::int64_t>(experts_.size());
  const Tensor probs = ops::reshape(probs_in, {-1, K});
  const std::int64_t rows_of_probs = probs.size(0);
  const std::vector<float> host = probs.detach().to(Device::cpu()).to(DType::F32).to_vector<float>();
  std::vector<std::int32_t> expert(static_cast<std::size_t>(rows_of_probs));
  std::vector<std::int32_t> chosen;  // rows of probs viewed as (rows·K, 1)
  for (std::int64_t i = 0; i < rows_of_probs; ++i) {
    const float* row = host.data() + i * K;
    const std::int64_t e = std::max_element(row, row + K) - row;
    expert[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(e);
    chosen.push_back(static_cast<std::int32_t>(i * K + e));
    if (count != nullptr) (*count)[static_cast<std::size_t>(e)] += 1.0;
  }
  // Tokens grouped by expert (stable: in order of position within each group).
  const auto tokens = static_cast<std::int64_t>(patch_row.size());
  std::vector<std::vector<std::int32_t>> rows(static_cast<std::size_t>(K));
  for (std::int64_t i = 0; i < tokens; ++i)
    rows[static_cast<std::size_t>(expert[static_cast<std::size_t>(patch_row[static_cast<std::size_t>(i)])])].push_back(
        static_cast<std::int32_t>(i));
  std::vector<std::int32_t> order, inverse(static_cast<std::size_t>(tokens));
  std::vector<Tensor> outputs;
  for (std::int64_t k = 0; k < K; ++k) {
    const auto& r = rows[static_cast<std::size_t>(k)];
    if (r.empty()) continue;
    outputs.push_back(experts_[static_cast<std::size_t>(k)]->forward(gather_rows(x, d, r)));
    for (std::int32_t row : r) {
      inverse[static_cast<std::size_t>(row)] = static_cast<std::int32_t>(order.size());
      order.push_back(row);
    }
  }
  const Tensor grouped = outputs.size() == 1 ? outputs[0] : ops::cat(outputs, 0);  // (tokens, d) by expert
  const Tensor gate = gather_rows(gather_rows(probs, 1, chosen), 1, patch_row);     // (tokens, 1)
  return gather_rows(grouped, d, inverse) * gate;
}

Tensor SheafBlock::forward(const Tensor& h_in, SheafStats& stats) const {
  const profile::Part part("residual, router, norm");  // what the mixer and the experts leave
  const std::int64_t B = h_in.size(0), L = h_in.size(1), d = h_in.size(2), K = static_cast<std::int64_t>(experts_.size());
  // Pre-LN residual blocks, as in Mamba: the residual stream itself is never normalised,
  // so the scan's small initial outputs add to it instead of being scaled away.
  GluingReport report;
  // h = h_in + dropout(mixer) and x = norm2(h) in one fused pass.
  const ops::ResidualNorm mixed = norm2_.forward_residual(h_in, mixer_.forward(norm1_.forward(h_in), report), mixer_dropout_);
  const Tensor &h = mixed.sum, &x = mixed.out;
  const std::int64_t patches = report.sections.size(1);

  // Route each patch by its glued section (never by its own tokens): top-1 expert e_p,
  // whose probability scales the expert's output so that the router learns.
  const Tensor probs = ops::softmax(router_.forward(report.sections), 2);  // (B, patches, K)
  std::vector<std::int32_t> patch_row;  // for each token, the row of its patch in probs
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < L; ++t) patch_row.push_back(static_cast<std::int32_t>(b * patches + t / patch_));
  std::vector<double> count(static_cast<std::size_t>(K), 0.0);
  const Tensor expert_out = ops::reshape(experts(x, probs, patch_row, &count), {B, L, d});

  // For the Switch-style balance term (SheafStateLM::balance): P_k, the mean router
  // probability of k, and the counts whose shares f_k weigh it.
  stats.mean_probs.push_back(ops::mean(ops::reshape(probs, {-1, K}), {0}));  // (K)
  stats.counts.insert(stats.counts.end(), count.begin(), count.end());

  auto add = [](Tensor& total, const Tensor& x) {
    if (!x.defined()) return;
    total = total.defined() ? total + x : x;
  };
  add(stats.energy, report.energy);
  add(stats.energy_normalised, report.energy_normalised);
  if (report.weights.defined()) stats.weights.push_back(report.weights);
  ++stats.layers;
  return h + expert_dropout_.forward(expert_out);
}

Tensor SheafBlock::forward_stream(const Tensor& h_in, std::int64_t position, SheafLayerStream& stream) const {
  const std::int64_t B = h_in.size(0), n = h_in.size(1), d = h_in.size(2);
  std::vector<StreamSegment> segments;
  const ops::ResidualNorm mixed =
      norm2_.forward_residual(h_in, mixer_.forward_stream(norm1_.forward(h_in), position, stream, segments), mixer_dropout_);
  const Tensor& h = mixed.sum;
  // Each piece of the chunk goes to the expert of its patch's section, as in forward().
  std::vector<Tensor> sections;
  for (const StreamSegment& s : segments) sections.push_back(s.section);
  const auto S = static_cast<std::int64_t>(segments.size());
  const Tensor probs = ops::softmax(router_.forward(ops::stack(sections, 1)), 2);  // (B, S, K)
  std::vector<std::int32_t> patch_row;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < S; ++i)
      for (std::int64_t t = 0; t < segments[static_cast<std::size_t>(i)].length; ++t)
        patch_row.push_back(static_cast<std::int32_t>(b * S + i));
  const Tensor expert_out = ops::reshape(experts(mixed.out, probs, patch_row, nullptr), {B, n, d});
  return h + expert_dropout_.forward(expert_out);
}

// ---- the model ---------------------------------------------------------------------------

SheafStateLM::SheafStateLM(const LMConfig& config) : TiedEmbeddingLM(config) {
  for (std::int64_t i = 0; i < config_.layers; ++i)
    blocks_.push_back(&register_module("blocks." + std::to_string(i),
                                       std::make_shared<SheafBlock>(config_, init_gen_, dropout_gen_)));
  final_norm_ = &register_module("final_norm", std::make_shared<nn::LayerNorm>(config_.d_model));
}

Tensor SheafStateLM::run_blocks(const Tensor& h_in) {
  last_ = SheafStats();
  batch_totals_.clear();
  Tensor h = h_in;
  for (SheafBlock* block : blocks_) h = block->forward(h, last_);
  return final_norm_->forward(h);  // R: the final LayerNorm before the tied head
}

namespace {

struct SheafStreams final : TiedEmbeddingLM::BlocksState {
  std::vector<SheafLayerStream> layers;
  std::int64_t bytes() const override {
    std::int64_t total = 0;
    for (const SheafLayerStream& l : layers) total += l.bytes();
    return total;
  }
};

}  // namespace

std::unique_ptr<TiedEmbeddingLM::BlocksState> SheafStateLM::new_blocks_state(std::int64_t /*batch*/) const {
  auto state = std::make_unique<SheafStreams>();
  state->layers.resize(blocks_.size());
  return state;
}

// A leaky model's stream is the causal model: a patch's own later tokens have not arrived
// when it is glued, so the stream differs from the leaky forward (the tests check it does).
Tensor SheafStateLM::run_blocks_stream(const Tensor& h_in, std::int64_t position, BlocksState& state) {
  auto& streams = static_cast<SheafStreams&>(state);
  Tensor h = h_in;
  for (std::size_t i = 0; i < blocks_.size(); ++i) h = blocks_[i]->forward_stream(h, position, streams.layers[i]);
  return final_norm_->forward(h);
}

std::size_t SheafStateLM::batch_counts_size() const {
  return config_.balance_weight > 0 ? static_cast<std::size_t>(config_.layers * config_.types) : 0;
}

void SheafStateLM::use_batch_counts(std::vector<double> totals) {
  if (totals.size() != last_.counts.size())
    throw std::invalid_argument(fmt::format("SheafStateLM::use_batch_counts: {} totals for {} counts (layers x experts)",
                                            totals.size(), last_.counts.size()));
  batch_totals_ = std::move(totals);
}

namespace {

// f_k of layer l: each expert's share of the patches that layer routed, out of `counts`
// (layers x K end to end); zeros for a layer that routed none.
std::vector<double> layer_shares(const std::vector<double>& counts, std::size_t l, std::size_t K) {
  const double* c = counts.data() + l * K;
  double patches = 0;
  for (std::size_t k = 0; k < K; ++k) patches += c[k];
  std::vector<double> shares(K, 0.0);
  if (patches > 0)
    for (std::size_t k = 0; k < K; ++k) shares[k] = c[k] / patches;
  return shares;
}

}  // namespace

// Switch-style balance: K Σ_k f_k P_k per layer, f_k the share of the patches routed to k
// (a constant), P_k the mean router probability of k. The shares come from the counts of
// the whole batch where a piece was given them, so every piece weighs its P_k alike.
Tensor SheafStateLM::balance(const std::vector<double>& counts) const {
  Tensor total;
  const auto K = static_cast<std::int64_t>(config_.types);
  for (std::size_t l = 0; l < last_.mean_probs.size(); ++l) {
    std::vector<float> shares;
    for (const double f : layer_shares(counts, l, static_cast<std::size_t>(K))) shares.push_back(static_cast<float>(f));
    const Tensor& p = last_.mean_probs[l];
    const Tensor layer = ops::sum(p * Tensor::from_vector(shares, {K}).to(p.device()).to(p.dtype())) * double(K);
    total = total.defined() ? total + layer : layer;
  }
  return total;
}

Tensor SheafStateLM::auxiliary_loss() const {
  Tensor loss;
  if (!last_.mean_probs.empty() && config_.balance_weight > 0)
    loss = balance(batch_totals_.empty() ? last_.counts : batch_totals_) * (config_.balance_weight / double(last_.layers));
  if (last_.energy_normalised.defined() && config_.energy_weight > 0) {
    const Tensor energy = last_.energy_normalised * (config_.energy_weight / double(last_.layers));
    loss = loss.defined() ? loss + energy : energy;
  }
  return loss;
}

nlohmann::json SheafStateLM::diagnostics() const {
  nlohmann::json j;
  if (last_.layers == 0) return j;
  NoGradGuard no_grad;
  const double layers = double(last_.layers);
  if (last_.energy.defined()) j["gluing_energy"] = last_.energy.item() / layers;
  if (last_.energy_normalised.defined()) j["gluing_energy_normalised"] = last_.energy_normalised.item() / layers;
  if (!last_.mean_probs.empty()) j["balance_loss"] = balance(last_.counts).item() / layers;
  // Each expert's share of the patches, averaged over the layers.
  const auto K = static_cast<std::size_t>(config_.types);
  std::vector<double> loads(K, 0.0);
  for (std::size_t l = 0; l * K < last_.counts.size(); ++l) {
    const std::vector<double> shares = layer_shares(last_.counts, l, K);
    for (std::size_t k = 0; k < K; ++k) loads[k] += shares[k] / layers;
  }
  j["expert_load"] = loads;
  // Mean a_pq per cover distance 2^j, over the layers, rows and patches that have slot j.
  if (!last_.weights.empty()) {
    const std::int64_t D = config_.cover_depth, P = last_.weights[0].size(1);
    std::vector<double> sum(static_cast<std::size_t>(D), 0.0), count(static_cast<std::size_t>(D), 0.0);
    for (const Tensor& w : last_.weights) {
      const std::vector<double> host = w.to(Device::cpu()).to(DType::F64).to_vector<double>();
      const std::int64_t rows = w.size(0);
      for (std::int64_t b = 0; b < rows; ++b)
        for (std::int64_t p = 0; p < P; ++p)
          for (std::int64_t jj = 0; jj < D && p >= (std::int64_t{1} << jj); ++jj) {
            sum[static_cast<std::size_t>(jj)] += host[static_cast<std::size_t>((b * P + p) * D + jj)];
            count[static_cast<std::size_t>(jj)] += 1;
          }
    }
    std::vector<double> mean;  // up to the farthest slot some patch has (p >= 2^j)
    for (std::size_t jj = 0; jj < sum.size() && count[jj] > 0; ++jj) mean.push_back(sum[jj] / count[jj]);
    j["gluing_weight_by_distance"] = mean;
  }
  return j;
}

}  // namespace wedge::models
