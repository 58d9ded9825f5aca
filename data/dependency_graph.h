// A synthetic dependency graph G* over a sequence of n tokens: which earlier token each
// token truly needs. The Sheaf-State paper ("From Attention to Gluing") tests its claim on
// such a simulation — local dependencies at short distances, long-range discourse/topic
// anchors, entity-recurrence links — but does not publish its generator, so this is
// wedge's own, with every rate a documented default:
//
//   local   every token t >= 1 depends on t-1; with probability local_extra (0.97) also on
//           one more token at a distance uniform in 2..local_reach (8)
//   anchor  the sequence is cut into segments (each token t >= 1 starts a new segment with
//           probability 1/segment_mean: geometric lengths, mean 512); a segment's first
//           token is its anchor, and every later token of the segment depends on it with
//           probability anchor_rate (0.03) — "topic words"
//   entity  a token is an entity mention with probability entity_rate (0.05); its entity is
//           drawn from a pool of `entities` (200) with Zipf weights 1/k; a mention depends
//           on the previous mention of the same entity
//
// An edge (target t, source s) always has s < t. A pair produced twice is kept once, with
// the first type of the priority local > anchor > entity (a topic word next to its anchor
// is a local dependency first).
//
// Every random draw is a hash of (seed, stream, t) — counter-based, not a running
// generator — so the graph is the same on every platform, each feature has its own stream
// (changing one rate leaves the other features' draws alone), and the graph of n tokens is
// the first n tokens' part of the graph of any longer sequence with the same settings.
// The defaults give about 67,000 edges at n = 32,768, the paper's count, of which a
// causal window of 8 contains about 96 % (every local edge, few long-range ones).
#pragma once

#include <array>
#include <array>
#include <cstdint>
#include <vector>

namespace wedge::data {

// The largest sequence the generator builds: about 2 edges per token of 9 bytes each, so
// 2^24 tokens take ~300 MB. Far beyond the paper's 32,768.
inline constexpr std::int64_t kMaxDependencyTokens = std::int64_t{1} << 24;

// The edge types of G*, and of the dependency probe's targets (data/dependency_probe.h).
enum class DependencyType : std::uint8_t { kLocal = 0, kAnchor = 1, kEntity = 2 };
inline constexpr int kDependencyTypes = 3;
inline constexpr std::array<const char*, kDependencyTypes> kDependencyTypeNames = {"local", "anchor", "entity"};
const char* to_string(DependencyType type);

struct DependencyGraphConfig {
  std::int64_t n = 32768;         // --n: tokens
  std::uint64_t seed = 0;         // --seed
  std::int64_t local_reach = 8;   // --local-reach: the extra local edge's largest distance
  double local_extra = 0.97;      // --local-extra: probability of that extra local edge
  double segment_mean = 512;      // --segment-mean: mean segment length (geometric), >= 1
  double anchor_rate = 0.03;      // --anchor-rate: a segment token depends on its anchor
  double entity_rate = 0.05;      // --entity-rate: a token is an entity mention
  std::int64_t entities = 200;    // --entities: size of the entity pool (Zipf weights 1/k)

  // Throws std::invalid_argument naming the flag (n outside [2, 2^24], a rate outside
  // [0, 1] or not finite, local reach outside [1, 2^20], segment mean < 1, entities < 1).
  void validate() const;
};

// Edges sorted by target, then source; one structure of arrays (positions fit in 32 bits).
struct DependencyGraph {
  DependencyGraphConfig config;
  std::vector<std::int32_t> target, source;
  std::vector<DependencyType> type;
  std::array<std::int64_t, kDependencyTypes> count_by_type{};  // indexed by DependencyType
  std::int64_t segments = 0;  // segments the sequence was cut into
  std::int64_t mentions = 0;  // entity mentions (the first of each entity has no edge)

  std::int64_t edges() const { return static_cast<std::int64_t>(target.size()); }
};

// Deterministic for a config (validated first). About 0.1 s per million tokens.
DependencyGraph make_dependency_graph(const DependencyGraphConfig& config);

}  // namespace wedge::data
