#include "models/edge_sets.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace wedge::models {

namespace {

void check_length(std::int64_t n) {
  if (n < 0 || n > kMaxEdgeSetLength)
    throw std::invalid_argument(fmt::format("edge sets: n {} must lie in [0, {}]", n, kMaxEdgeSetLength));
}

// Sorts and merges closed intervals, joining those that overlap or touch.
DistanceIntervals merged(DistanceIntervals v) {
  std::sort(v.begin(), v.end());
  DistanceIntervals out;
  for (const auto& [a, b] : v) {
    if (!out.empty() && a <= out.back().second + 1) out.back().second = std::max(out.back().second, b);
    else out.emplace_back(a, b);
  }
  return out;
}

// Pairs s = t - d, d in a union of intervals: Σ_{d} (n - d) over the distances d < n,
// (b - a + 1) n - (a + b)(b - a + 1) / 2 per interval [a, b] clipped to [1, n - 1].
class DistanceEdges final : public EdgeSet {
 public:
  // max_n: the longest sequence the intervals are complete for (a stack's horizon).
  DistanceEdges(std::string name, DistanceIntervals d, std::int64_t max_n = kMaxEdgeSetLength)
      : name_(std::move(name)), d_(merged(std::move(d))), max_n_(max_n) {
    for (const auto& [a, b] : d_)
      if (a < 1 || b < a) throw std::invalid_argument(fmt::format("{}: distance interval [{}, {}] is not within d >= 1", name_, a, b));
  }
  std::string name() const override { return name_; }
  std::int64_t count(std::int64_t n) const override {
    check_length(n);
    if (n > max_n_)
      throw std::invalid_argument(fmt::format("{}: n {} is beyond the horizon {} its distances were built for", name_, n, max_n_));
    __int128 total = 0;
    for (const auto& [a, b0] : d_) {
      if (a > n - 1) break;
      const std::int64_t b = std::min(b0, n - 1);
      const __int128 k = b - a + 1;
      total += k * n - (__int128(a) + b) * k / 2;
    }
    return static_cast<std::int64_t>(total);  // <= n(n-1)/2 < 2^63
  }
  bool contains(std::int64_t t, std::int64_t s) const override {
    const std::int64_t d = t - s;
    // the last interval starting at or before d
    auto it = std::upper_bound(d_.begin(), d_.end(), d, [](std::int64_t x, const auto& iv) { return x < iv.first; });
    return it != d_.begin() && d <= std::prev(it)->second;
  }

 private:
  std::string name_;
  DistanceIntervals d_;
  std::int64_t max_n_;
};

std::vector<std::int64_t> cover_distances(std::int64_t depth) {
  std::vector<std::int64_t> d;
  for (std::int64_t k = 0; k < depth; ++k) d.push_back(std::int64_t{1} << k);
  return d;
}

// Sizes and the count of every token pair the cover puts between patches p and p - δ.
class SheafTokenEdges final : public EdgeSet {
 public:
  SheafTokenEdges(std::int64_t patch, std::int64_t depth) : patch_(patch), depth_(depth) {
    if (patch < 1 || depth < 1 || depth > 62)
      throw std::invalid_argument(fmt::format("sheaf edges: patch {} and cover depth {} must be >= 1 (depth <= 62)", patch, depth));
  }
  std::string name() const override { return fmt::format("SheafState tokens (P {}, D {})", patch_, depth_); }
  std::int64_t count(std::int64_t n) const override {
    check_length(n);
    if (n == 0) return 0;
    const std::int64_t P = patch_, m = (n + P - 1) / P, r = n - (m - 1) * P;  // patches; tokens of the last
    __int128 total = __int128(m - 1) * (P * (P - 1) / 2) + __int128(r) * (r - 1) / 2;  // within patches
    for (std::int64_t delta : cover_distances(depth_)) {
      if (delta > m - 1) break;
      // targets p = delta .. m-2 are full patches, p = m-1 has r tokens; every source patch is full
      total += __int128(m - 1 - delta) * P * P + __int128(r) * P;
    }
    return static_cast<std::int64_t>(total);
  }
  bool contains(std::int64_t t, std::int64_t s) const override {
    const std::int64_t delta = t / patch_ - s / patch_;
    if (delta == 0) return true;  // the scan within the patch (s < t)
    return (delta & (delta - 1)) == 0 && delta <= (std::int64_t{1} << (depth_ - 1));
  }

 private:
  std::int64_t patch_, depth_;
};

}  // namespace

std::unique_ptr<EdgeSet> dense_edges() {
  return std::make_unique<DistanceEdges>("dense causal attention", DistanceIntervals{{1, kMaxEdgeSetLength}});
}

std::unique_ptr<EdgeSet> window_edges(std::int64_t w) {
  if (w < 1) throw std::invalid_argument(fmt::format("--window {} must be at least 1", w));
  return std::make_unique<DistanceEdges>(fmt::format("local window {}", w), DistanceIntervals{{1, w}});
}

std::unique_ptr<EdgeSet> distance_edges(std::string name, DistanceIntervals distances) {
  return std::make_unique<DistanceEdges>(std::move(name), std::move(distances));
}

DistanceIntervals grassmann_layer_distances(const LMConfig& config, std::int64_t layer) {
  DistanceIntervals d;
  for (std::int32_t offset : config.offsets_for_layer(layer)) {
    if (offset < 1) throw std::invalid_argument(fmt::format("Grassmann offset {} must be >= 1", offset));
    d.emplace_back(offset, offset);
  }
  return merged(std::move(d));
}

DistanceIntervals grassmann_stack_distances(const LMConfig& config, std::int64_t horizon) {
  if (horizon < 1) throw std::invalid_argument(fmt::format("Grassmann stack: horizon {} must be >= 1", horizon));
  DistanceIntervals reach = {{0, 0}};  // distance 0: the token's own state
  for (std::int64_t i = 0; i < config.layers; ++i) {
    DistanceIntervals next = reach;  // the gate keeps h_t: every distance reached so far stays
    // the sum-set of two intervals is an interval: [lo, hi] + [a, b] = [lo + a, hi + b]
    for (const auto& [a, b] : grassmann_layer_distances(config, i))
      for (const auto& [lo, hi] : reach) {
        if (lo + a >= horizon) break;
        next.emplace_back(lo + a, std::min(hi + b, horizon - 1));
      }
    reach = merged(std::move(next));
  }
  // drop distance 0 (not an edge)
  if (reach.front().second == 0) reach.erase(reach.begin());
  else reach.front().first = 1;
  return reach;
}

std::unique_ptr<EdgeSet> grassmann_layer_edges(const LMConfig& config, std::int64_t layer) {
  const auto offsets = config.offsets_for_layer(layer);
  return distance_edges(fmt::format("GrassmannLM layer {} (offsets {})", layer, fmt::join(offsets, ",")),
                        grassmann_layer_distances(config, layer));
}

std::unique_ptr<EdgeSet> grassmann_stack_edges(const LMConfig& config, std::int64_t horizon) {
  DistanceIntervals d = grassmann_stack_distances(config, horizon);
  return std::make_unique<DistanceEdges>(fmt::format("GrassmannLM {} layers composed", config.layers), std::move(d),
                                         horizon);
}

std::unique_ptr<EdgeSet> sheaf_token_edges(const LMConfig& config) {
  return std::make_unique<SheafTokenEdges>(config.patch, config.cover_depth);
}

SheafPatchCover::SheafPatchCover(std::int64_t patch, std::int64_t cover_depth) : patch_(patch), depth_(cover_depth) {
  if (patch < 1 || cover_depth < 1 || cover_depth > 62)
    throw std::invalid_argument(
        fmt::format("sheaf cover: patch {} and cover depth {} must be >= 1 (depth <= 62)", patch, cover_depth));
}

std::int64_t SheafPatchCover::patches(std::int64_t n) const {
  check_length(n);
  return (n + patch_ - 1) / patch_;
}

std::int64_t SheafPatchCover::count(std::int64_t n) const {
  const std::int64_t m = patches(n);
  std::int64_t total = 0;
  for (std::int64_t delta : cover_distances(depth_)) total += std::max<std::int64_t>(0, m - delta);
  return total;
}

bool SheafPatchCover::carries(std::int64_t t, std::int64_t s) const {
  const std::int64_t delta = t / patch_ - s / patch_;
  return delta > 0 && (delta & (delta - 1)) == 0 && delta <= (std::int64_t{1} << (depth_ - 1));
}

namespace {

void check_edges(std::int64_t n, std::span<const std::int32_t> targets, std::span<const std::int32_t> sources) {
  check_length(n);
  if (targets.size() != sources.size())
    throw std::invalid_argument(fmt::format("edge sets: {} targets but {} sources", targets.size(), sources.size()));
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!(0 <= sources[i] && sources[i] < targets[i] && targets[i] < n))
      throw std::invalid_argument(
          fmt::format("edge sets: edge ({}, {}) is not causal within n = {}", targets[i], sources[i], n));
}

}  // namespace

EdgeMeasure measure(const EdgeSet& set, std::int64_t n, std::span<const std::int32_t> targets,
                    std::span<const std::int32_t> sources) {
  check_edges(n, targets, sources);
  EdgeMeasure m;
  m.edges = set.count(n);
  m.true_edges = static_cast<std::int64_t>(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) m.contained += set.contains(targets[i], sources[i]) ? 1 : 0;
  return m;
}

PatchMeasure measure(const SheafPatchCover& cover, std::int64_t n, std::span<const std::int32_t> targets,
                     std::span<const std::int32_t> sources) {
  check_edges(n, targets, sources);
  PatchMeasure m;
  m.pairs = cover.count(n);
  std::vector<std::int64_t> used;  // (target patch, distance) of every carried edge
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!cover.crosses(targets[i], sources[i])) continue;
    ++m.crossing_edges;
    if (!cover.carries(targets[i], sources[i])) continue;
    ++m.carried_edges;
    const std::int64_t p = targets[i] / cover.patch(), q = sources[i] / cover.patch();
    used.push_back(p * 64 + std::bit_width(static_cast<std::uint64_t>(p - q)));
  }
  std::sort(used.begin(), used.end());
  m.used_pairs = std::unique(used.begin(), used.end()) - used.begin();
  return m;
}

}  // namespace wedge::models
