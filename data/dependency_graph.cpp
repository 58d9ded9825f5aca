#include "data/dependency_graph.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/core.h>

namespace wedge::data {

namespace {

// The splitmix64 finaliser: a bijective, well-mixed 64-bit hash.
constexpr std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One stream of counter-based draws: draw(t) depends on (seed, stream, t) alone.
class Stream {
 public:
  Stream(std::uint64_t seed, std::uint64_t stream) : key_(mix(seed ^ mix(0xD1B54A32D192ED03ull * (stream + 1)))) {}
  std::uint64_t draw(std::int64_t t) const { return mix(key_ + 0x9E3779B97F4A7C15ull * (static_cast<std::uint64_t>(t) + 1)); }
  // True with probability p: the draw's top 53 bits against p * 2^53, both exact in a
  // double, so the answer is the same on every platform (no libm involved).
  bool coin(std::int64_t t, double p) const { return static_cast<double>(draw(t) >> 11) < p * 0x1p53; }
  // Uniform in [0, k) (Lemire's multiply-shift; bias below 2^-40 for k < 2^24).
  std::uint64_t below(std::int64_t t, std::uint64_t k) const {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(draw(t)) * k) >> 64);
  }

 private:
  std::uint64_t key_;
};

enum StreamId : std::uint64_t { kLocalCoin, kLocalDistance, kSegmentStart, kAnchorCoin, kMentionCoin, kEntityId };

}  // namespace

const char* to_string(DependencyType type) {
  const auto k = static_cast<std::size_t>(type);
  return k < kDependencyTypeNames.size() ? kDependencyTypeNames[k] : "?";
}

void DependencyGraphConfig::validate() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (n < 2 || n > kMaxDependencyTokens)
    bad(fmt::format("--n {} must lie in [2, {}] (a dependency needs two tokens)", n, kMaxDependencyTokens));
  if (local_reach < 1 || local_reach > (std::int64_t{1} << 20))
    bad(fmt::format("--local-reach {} must lie in [1, {}]", local_reach, std::int64_t{1} << 20));
  auto rate = [&](const char* flag, double p) {
    if (!std::isfinite(p) || p < 0.0 || p > 1.0) bad(fmt::format("{} {} must be a probability in [0, 1]", flag, p));
  };
  rate("--local-extra", local_extra);
  rate("--anchor-rate", anchor_rate);
  rate("--entity-rate", entity_rate);
  if (!std::isfinite(segment_mean) || segment_mean < 1.0)
    bad(fmt::format("--segment-mean {} must be a finite number >= 1 (tokens per segment)", segment_mean));
  if (entities < 1 || entities > (std::int64_t{1} << 24))
    bad(fmt::format("--entities {} must lie in [1, {}]", entities, std::int64_t{1} << 24));
}

DependencyGraph make_dependency_graph(const DependencyGraphConfig& config) {
  config.validate();
  DependencyGraph g;
  g.config = config;
  const std::int64_t n = config.n;
  const Stream local_coin(config.seed, kLocalCoin), local_distance(config.seed, kLocalDistance),
      segment_start(config.seed, kSegmentStart), anchor_coin(config.seed, kAnchorCoin),
      mention_coin(config.seed, kMentionCoin), entity_id(config.seed, kEntityId);

  // Zipf weights 1/k as a cumulative table; a draw picks the first k whose cumulative
  // weight exceeds u * total (IEEE sums and divisions: the same everywhere).
  std::vector<double> cumulative(static_cast<std::size_t>(config.entities));
  double total = 0;
  for (std::int64_t k = 0; k < config.entities; ++k) cumulative[static_cast<std::size_t>(k)] = total += 1.0 / double(k + 1);
  std::vector<std::int64_t> last_mention(static_cast<std::size_t>(config.entities), -1);

  const double segment_start_p = 1.0 / config.segment_mean;
  const std::size_t expected = static_cast<std::size_t>(double(n) * (1.0 + config.local_extra + config.anchor_rate + config.entity_rate)) + 16;
  g.target.reserve(expected);
  g.source.reserve(expected);
  g.type.reserve(expected);

  std::int64_t anchor = 0;
  g.segments = 1;
  for (std::int64_t t = 0; t < n; ++t) {
    // At most four candidate sources per token, in priority order; duplicates dropped.
    std::array<std::pair<std::int64_t, DependencyType>, 4> candidates;
    int count = 0;
    auto add = [&](std::int64_t s, DependencyType type) {
      for (int i = 0; i < count; ++i)
        if (candidates[static_cast<std::size_t>(i)].first == s) return;
      candidates[static_cast<std::size_t>(count++)] = {s, type};
    };
    if (t >= 1) {
      add(t - 1, DependencyType::kLocal);
      if (config.local_reach >= 2 && local_coin.coin(t, config.local_extra)) {
        const std::int64_t d = 2 + static_cast<std::int64_t>(local_distance.below(t, static_cast<std::uint64_t>(config.local_reach - 1)));
        if (t - d >= 0) add(t - d, DependencyType::kLocal);
      }
      if (segment_start.coin(t, segment_start_p)) {
        anchor = t;
        ++g.segments;
      } else if (anchor_coin.coin(t, config.anchor_rate)) {
        add(anchor, DependencyType::kAnchor);
      }
    }
    if (mention_coin.coin(t, config.entity_rate)) {
      ++g.mentions;
      const double u = static_cast<double>(entity_id.draw(t) >> 11) * 0x1p-53 * total;
      const auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
      const auto e = static_cast<std::size_t>(std::min<std::ptrdiff_t>(it - cumulative.begin(), config.entities - 1));
      if (last_mention[e] >= 0) add(last_mention[e], DependencyType::kEntity);
      last_mention[e] = t;
    }
    for (int i = 1; i < count; ++i)  // insertion sort of at most four, by source
      for (int j = i; j > 0 && candidates[static_cast<std::size_t>(j)].first < candidates[static_cast<std::size_t>(j - 1)].first; --j)
        std::swap(candidates[static_cast<std::size_t>(j)], candidates[static_cast<std::size_t>(j - 1)]);
    for (int i = 0; i < count; ++i) {
      const auto& [s, type] = candidates[static_cast<std::size_t>(i)];
      g.target.push_back(static_cast<std::int32_t>(t));
      g.source.push_back(static_cast<std::int32_t>(s));
      g.type.push_back(type);
      ++g.count_by_type[static_cast<std::size_t>(type)];
    }
  }
  return g;
}

}  // namespace wedge::data
