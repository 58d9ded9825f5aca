#include "models/audit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/autograd.h"
#include "engine/rng.h"
#include "models/tied_embedding_lm.h"
#include "ops/ops.h"

namespace wedge::models {

namespace {

// Puts the model in eval mode and stops its parameters from collecting gradients for
// the audit's lifetime; puts both back afterwards, even when the audit throws.
class AuditScope {
 public:
  explicit AuditScope(LanguageModel& model) : model_(model), was_training_(model.is_training()) {
    model_.eval();
    params_ = model_.parameters();
    for (Tensor& p : params_) {
      flags_.push_back(p.requires_grad());
      p.set_requires_grad(false);
    }
  }
  ~AuditScope() {
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i].set_requires_grad(flags_[i]);
    model_.train(was_training_);
  }

 private:
  LanguageModel& model_;
  bool was_training_;
  std::vector<Tensor> params_;
  std::vector<bool> flags_;
};

std::vector<float> logits_on_host(LanguageModel& model, const std::vector<std::int32_t>& ids,
                                  std::int64_t B, std::int64_t L, Device device) {
  NoGradGuard no_grad;
  return model.forward(Tensor::from_vector(ids, {B, L}, device)).to_vector<float>();
}

std::int64_t max_offset(const LMConfig& c) {
  if (c.model != "grassmann") return 0;
  std::int64_t m = 0;
  for (std::int64_t i = 0; i < c.layers; ++i)
    for (std::int32_t w : c.offsets_for_layer(i)) m = std::max<std::int64_t>(m, w);
  return m;
}

}  // namespace

std::string AuditResult::summary() const {
  if (!violations.empty()) return violations.front().message;
  return fmt::format(
      "causal: L={}, probed t={}, {} logits bit-identical after changing every later token, "
      "{} gradients w.r.t. later inputs exactly zero",
      length, fmt::join(positions, ","), logits_compared, gradients_checked);
}

std::vector<std::int64_t> default_audit_positions(const LMConfig& config, std::int64_t L) {
  std::vector<std::int64_t> candidates = {0, L / 2, L - 2};
  if (const std::int64_t m = max_offset(config); m > 0)
    for (std::int64_t t : {m - 1, m, m + 1}) candidates.push_back(t);
  if (config.model == "sheaf")  // around the first two patch boundaries, where c_p begins
    for (std::int64_t t : {config.patch - 2, config.patch - 1, config.patch, 2 * config.patch - 1, 2 * config.patch})
      candidates.push_back(t);
  std::vector<std::int64_t> positions;
  for (std::int64_t t : candidates)
    if (t >= 0 && t <= L - 2) positions.push_back(t);
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

AuditResult audit_causal(LanguageModel& model, std::int64_t L, std::uint64_t seed,
                         std::vector<std::int64_t> positions) {
  const LMConfig& config = model.config();
  if (L < 2 || L > config.block)
    throw std::invalid_argument(fmt::format(
        "audit-causal: length {} must lie in [2, --block {}] (a token after t must exist)", L,
        config.block));
  auto* embedded = dynamic_cast<TiedEmbeddingLM*>(&model);
  if (embedded == nullptr)
    throw std::invalid_argument("audit-causal: model '" + config.model +
                                "' does not expose its embedded-input path");
  if (positions.empty()) positions = default_audit_positions(config, L);
  for (std::int64_t t : positions)
    if (t < 0 || t > L - 2)
      throw std::invalid_argument(
          fmt::format("audit-causal: position {} must lie in [0, {}] (L-2)", t, L - 2));

  AuditScope scope(model);
  const std::int64_t B = 2, V = config.vocab_size;
  const Device device = model.parameters().front().device();
  Generator gen(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * L));
  for (auto& id : ids) id = static_cast<std::int32_t>(gen.integer(static_cast<std::uint64_t>(V)));

  AuditResult result;
  result.length = L;
  result.positions = positions;
  auto at = [L, V](std::int64_t b, std::int64_t p) { return static_cast<std::size_t>((b * L + p) * V); };

  // ---- 1. perturb every token after t; logits at <= t must be bit-identical -------
  const std::vector<float> reference = logits_on_host(model, ids, B, L, device);
  // course 19 begin: the causality audit's first half: change every token after t and demand bit-identical logits up to t
  for (std::int64_t t : positions) {
    std::vector<std::int32_t> changed = ids;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = t + 1; s < L; ++s) {
        auto& id = changed[static_cast<std::size_t>(b * L + s)];
        // a different token for sure: shift by 1..V-1 (mod V)
        id = static_cast<std::int32_t>((id + 1 + gen.integer(static_cast<std::uint64_t>(V - 1))) % V);
      }
    const std::vector<float> logits = logits_on_host(model, changed, B, L, device);
    bool found = false;
    for (std::int64_t b = 0; b < B && !found; ++b)
      for (std::int64_t p = 0; p <= t && !found; ++p) {
        result.logits_compared += V;
        if (std::memcmp(&logits[at(b, p)], &reference[at(b, p)], sizeof(float) * V) == 0) continue;
        double diff = 0;
        for (std::int64_t v = 0; v < V; ++v)
          diff = std::max(diff, std::fabs(double(logits[at(b, p) + v]) - reference[at(b, p) + v]));
        result.violations.push_back(
            {"output", t, b, p, diff,
             fmt::format("NOT causal: changing the tokens after t={} changed the logits at "
                         "position {} (batch row {}, max |change| {:.3g})",
                         t, p, b, diff)});
        found = true;
      }
  }
  // course 19 end

  // ---- 2. d sum(logits[:, t, :]) / d h0[:, s, :] must be exactly 0 for s > t ----------
  Tensor h0;
  {
    NoGradGuard no_grad;
    h0 = embedded->embed_tokens(Tensor::from_vector(ids, {B, L}, device)).clone();
  }
  h0.set_requires_grad(true);
  const std::int64_t d = config.d_model;
  for (std::int64_t t : positions) {
    h0.zero_grad();
    const Tensor logits = embedded->forward_embedded(h0);
    ops::sum(ops::narrow(logits, 1, t, 1)).backward();
    const std::vector<float> grad = h0.grad().to_vector<float>();
    auto row_max = [&](std::int64_t b, std::int64_t s) {
      double m = 0;
      for (std::int64_t k = 0; k < d; ++k)
        m = std::max(m, std::fabs(double(grad[static_cast<std::size_t>((b * L + s) * d + k)])));
      return m;
    };
    bool found = false;
    for (std::int64_t b = 0; b < B && !found; ++b) {
      for (std::int64_t s = t + 1; s < L && !found; ++s) {
        result.gradients_checked += d;
        if (const double m = row_max(b, s); m != 0.0) {
          result.violations.push_back(
              {"gradient", t, b, s, m,
               fmt::format("NOT causal: the logits at t={} have a non-zero gradient (max {:.3g}) "
                           "with respect to the input at position {} (batch row {})",
                           t, m, s, b)});
          found = true;
        }
      }
      // An output that does not even depend on its own input would pass trivially.
      if (!found && row_max(b, t) == 0.0) {
        result.violations.push_back(
            {"vacuous-gradient", t, b, t, 0.0,
             fmt::format("audit invalid: the logits at t={} have zero gradient with respect to "
                         "their own input (batch row {}), so the gradient check proves nothing",
                         t, b)});
        found = true;
      }
    }
  }
  result.passed = result.violations.empty();
  return result;
}

}  // namespace wedge::models
