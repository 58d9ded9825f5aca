// Where can each model look? The edge set of a model family over n tokens: the causal
// pairs (target t, source s < t) along which information at s can reach the output at t.
// Each set is a structured object, never a list of pairs: it counts its edges for any n
// in closed form (exact 64-bit integers; n up to kMaxEdgeSetLength, where n^2/2 still fits)
// and answers contains(t, s) in O(1) or O(log) — so the dependency simulation (`wedge
// depsim`) measures coverage and waste against a true dependency graph at n = 2^20 in
// milliseconds, where the dense set alone has 5.5e11 pairs.
//
//   dense                 TransformerLM's causal attention, every layer: all s < t
//   window w              a local window: t - w <= s < t
//   GrassmannLM, 1 layer  s = t - Δ for Δ in the layer's offsets
//   GrassmannLM, N layers the receptive field of the stack: each layer a token keeps its own
//                         state (the gate mixes h_t with the pair term) and adds t - Δ, so
//                         t reaches t - d for every d that is a sum of at most one offset
//                         per layer — bounded by the sum of the layers' largest offsets
//   SheafStateLM, tokens  one layer's direct edges: s < t in the same patch of P tokens (the
//                         scan) and every token of patch p to every token of the patches in
//                         its cover N(p) = {p-1, p-2, p-4, ..., p-2^(D-1)} (the gluing)
//   SheafStateLM, patches the (p, q) pairs the gluing uses (below, SheafPatchCover)
//
// One SheafState layer's DIRECT edges are the set above, but its chain over patches is
// sequential (c_p reads s_{p-1}, which was glued from c_{p-1}, ...), so within one layer
// information hops patch to patch: the multi-hop reach of a single layer is the whole past.
// GrassmannLM's reach does not grow that way: N layers reach at most the sum of their
// largest offsets back.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "models/lm.h"

namespace wedge::models {

// n(n-1)/2 < 2^63 up to here; positions fit in 32 bits.
inline constexpr std::int64_t kMaxEdgeSetLength = (std::int64_t{1} << 31) - 1;

class EdgeSet {
 public:
  virtual ~EdgeSet() = default;
  virtual std::string name() const = 0;  // e.g. "window 8"
  // Pairs (t, s) with 0 <= s < t < n. Throws std::invalid_argument for n outside
  // [0, kMaxEdgeSetLength].
  virtual std::int64_t count(std::int64_t n) const = 0;
  // Whether the pair (t, s), 0 <= s < t, is in the set (independent of n).
  virtual bool contains(std::int64_t t, std::int64_t s) const = 0;
};

// TransformerLM's causal attention: all s < t.
std::unique_ptr<EdgeSet> dense_edges();
// t - w <= s < t (w >= 1).
std::unique_ptr<EdgeSet> window_edges(std::int64_t w);

// Sorted, disjoint, non-adjacent closed intervals of distances d >= 1: s = t - d.
using DistanceIntervals = std::vector<std::pair<std::int64_t, std::int64_t>>;
// The pairs s = t - d for d in the intervals.
std::unique_ptr<EdgeSet> distance_edges(std::string name, DistanceIntervals distances);
// The distances layer `layer` of a GrassmannLM pairs with (config.offsets_for_layer).
DistanceIntervals grassmann_layer_distances(const LMConfig& config, std::int64_t layer);
// The stack's reachable distances: sums of at most one offset per layer (each layer may
// also keep the token's own state), the sum-set built layer by layer as intervals.
// Distances >= horizon are dropped (a sequence of n <= horizon tokens never uses them;
// pass the largest n you will ask about) — that also bounds the work for any schedule.
// The stack's edge set refuses to count a sequence longer than its horizon.
DistanceIntervals grassmann_stack_distances(const LMConfig& config, std::int64_t horizon);
std::unique_ptr<EdgeSet> grassmann_layer_edges(const LMConfig& config, std::int64_t layer);
std::unique_ptr<EdgeSet> grassmann_stack_edges(const LMConfig& config, std::int64_t horizon);

// SheafStateLM, one layer, token level: the scan within a patch of config.patch tokens plus
// the gluing cover of depth config.cover_depth expanded to tokens.
std::unique_ptr<EdgeSet> sheaf_token_edges(const LMConfig& config);

// SheafStateLM's gluing at patch level: the pairs (p, q) with q in N(p), q >= 0, over the
// ceil(n / P) patches of n tokens. A true edge (t, s) crosses patches when its patches
// differ; the cover carries it when that patch pair is one of the cover's.
class SheafPatchCover {
 public:
  SheafPatchCover(std::int64_t patch, std::int64_t cover_depth);
  explicit SheafPatchCover(const LMConfig& config) : SheafPatchCover(config.patch, config.cover_depth) {}
  std::int64_t patches(std::int64_t n) const;  // ceil(n / P)
  std::int64_t count(std::int64_t n) const;    // (p, q) pairs of the cover
  bool crosses(std::int64_t t, std::int64_t s) const { return t / patch_ != s / patch_; }
  bool carries(std::int64_t t, std::int64_t s) const;  // a crossing edge whose patch pair is in the cover
  std::int64_t patch() const { return patch_; }
  std::int64_t cover_depth() const { return depth_; }

 private:
  std::int64_t patch_, depth_;
};

// An edge set measured against a true dependency graph of n tokens (edges given as
// parallel arrays of targets and sources, each s < t < n).
struct EdgeMeasure {
  std::int64_t edges = 0;      // the set's edges over n tokens
  std::int64_t true_edges = 0; // the graph's edges
  std::int64_t contained = 0;  // true edges in the set
  // Share of true edges the set contains (1 when there are none).
  double coverage() const { return true_edges == 0 ? 1.0 : double(contained) / double(true_edges); }
  // Share of the set's edges that are not true edges (0 for an empty set).
  double waste() const { return edges == 0 ? 0.0 : 1.0 - double(contained) / double(edges); }
};
EdgeMeasure measure(const EdgeSet& set, std::int64_t n, std::span<const std::int32_t> targets,
                    std::span<const std::int32_t> sources);

// The gluing measured at patch level: coverage over the true edges that cross patches,
// waste over the cover's patch pairs that carry no true edge at all.
struct PatchMeasure {
  std::int64_t pairs = 0;            // the cover's (p, q) pairs
  std::int64_t crossing_edges = 0;   // true edges whose two tokens lie in different patches
  std::int64_t carried_edges = 0;    // of those, the ones whose patch pair is in the cover
  std::int64_t used_pairs = 0;       // cover pairs that carry at least one true edge
  double coverage() const { return crossing_edges == 0 ? 1.0 : double(carried_edges) / double(crossing_edges); }
  double waste() const { return pairs == 0 ? 0.0 : 1.0 - double(used_pairs) / double(pairs); }
};
PatchMeasure measure(const SheafPatchCover& cover, std::int64_t n, std::span<const std::int32_t> targets,
                     std::span<const std::int32_t> sources);

}  // namespace wedge::models
