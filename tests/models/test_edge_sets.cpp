// The edge sets of the dependency simulation (models/edge_sets.h) against brute force over
// all pairs: each set's closed-form count and its count of contained true edges must equal
// an independent enumeration — GrassmannLM's stack by propagating the reachable positions
// layer by layer, SheafStateLM by listing each patch's cover and testing membership — for
// small and awkward n (one patch, n not a multiple of P, n below the largest offset).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "models/edge_sets.h"
#include "models/lm.h"

using namespace wedge::models;

namespace {

const std::vector<std::int64_t> kLengths = {0, 1, 2, 3, 7, 16, 17, 31, 33, 100, 255, 512};

// Some true edges for n tokens: a seeded tenth of all causal pairs plus the chain t -> t-1.
struct Edges {
  std::vector<std::int32_t> target, source;
};
Edges some_edges(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);  // the engine's output is fixed by the standard
  Edges e;
  for (std::int64_t t = 1; t < n; ++t)
    for (std::int64_t s = 0; s < t; ++s)
      if (s == t - 1 || rng() % 10 == 0) {
        e.target.push_back(static_cast<std::int32_t>(t));
        e.source.push_back(static_cast<std::int32_t>(s));
      }
  return e;
}

// Brute force: the set given by a predicate over pairs, counted and measured pair by pair.
template <class InSet>
void check_against_brute_force(const EdgeSet& set, std::int64_t n, InSet in_set) {
  CAPTURE(set.name());
  CAPTURE(n);
  std::int64_t pairs = 0, disagreements = 0;
  std::pair<std::int64_t, std::int64_t> first_disagreement{-1, -1};
  std::set<std::pair<std::int64_t, std::int64_t>> members;
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t s = 0; s < t; ++s) {
      const bool in = in_set(t, s);
      if (set.contains(t, s) != in && disagreements++ == 0) first_disagreement = {t, s};
      if (in) {
        ++pairs;
        members.emplace(t, s);
      }
    }
  CHECK_MESSAGE(disagreements == 0, "contains() disagrees first at (" << first_disagreement.first << ", "
                                                                       << first_disagreement.second << ")");
  CHECK(set.count(n) == pairs);
  const Edges e = some_edges(n, static_cast<std::uint64_t>(n) * 31 + 7);
  std::int64_t contained = 0;
  for (std::size_t i = 0; i < e.target.size(); ++i) contained += members.count({e.target[i], e.source[i]});
  const EdgeMeasure m = measure(set, n, e.target, e.source);
  CHECK(m.edges == pairs);
  CHECK(m.true_edges == static_cast<std::int64_t>(e.target.size()));
  CHECK(m.contained == contained);
}

// GrassmannLM's receptive field, literally: start from {t}; going down from the top layer,
// every reached position u also reaches u - Δ for each offset Δ of that layer (u - Δ >= 0).
std::set<std::int64_t> grassmann_reach(const LMConfig& c, std::int64_t t) {
  std::set<std::int64_t> reach = {t};
  for (std::int64_t layer = c.layers - 1; layer >= 0; --layer) {
    std::set<std::int64_t> next = reach;
    for (std::int64_t u : reach)
      for (std::int32_t delta : c.offsets_for_layer(layer))
        if (u - delta >= 0) next.insert(u - delta);
    reach = std::move(next);
  }
  reach.erase(t);
  return reach;
}

// SheafStateLM's cover of patch p, listed: {p - 1, p - 2, p - 4, ..., p - 2^(D-1)}, q >= 0.
std::vector<std::int64_t> cover_of(std::int64_t p, std::int64_t depth) {
  std::vector<std::int64_t> q;
  std::int64_t delta = 1;
  for (std::int64_t k = 0; k < depth; ++k, delta *= 2)
    if (p - delta >= 0) q.push_back(p - delta);
  return q;
}

bool sheaf_sees(std::int64_t t, std::int64_t s, std::int64_t P, std::int64_t D) {
  const std::int64_t p = t / P, q = s / P;
  if (p == q) return true;
  for (std::int64_t c : cover_of(p, D))
    if (c == q) return true;
  return false;
}

LMConfig grassmann(std::int64_t layers, std::vector<std::int32_t> windows, std::vector<std::int32_t> schedule = {}) {
  LMConfig c;
  c.model = "grassmann";
  c.layers = layers;
  c.windows = std::move(windows);
  c.window_schedule = std::move(schedule);
  return c;
}

}  // namespace

TEST_CASE("depsim edge sets: dense and window counts equal brute force") {
  for (std::int64_t n : kLengths) {
    check_against_brute_force(*dense_edges(), n, [](std::int64_t, std::int64_t) { return true; });
    for (std::int64_t w : {1, 3, 8, 40})
      check_against_brute_force(*window_edges(w), n, [w](std::int64_t t, std::int64_t s) { return t - s <= w; });
  }
}

TEST_CASE("depsim edge sets: the paper's dense count by hand, and no overflow at the limits") {
  CHECK(dense_edges()->count(32768) == 536'854'528);  // 32768 * 32767 / 2: the paper's ≈ 536 M
  CHECK(dense_edges()->count(std::int64_t{1} << 20) == 549'755'289'600);
  const __int128 big = kMaxEdgeSetLength;
  CHECK(dense_edges()->count(kMaxEdgeSetLength) == static_cast<std::int64_t>(big * (big - 1) / 2));
  CHECK(window_edges(8)->count(32768) == 8 * 32768 - 36);
  CHECK(window_edges(8)->count(kMaxEdgeSetLength) == 8 * kMaxEdgeSetLength - 36);
  CHECK_THROWS_AS(dense_edges()->count(kMaxEdgeSetLength + 1), std::invalid_argument);
  CHECK_THROWS_WITH_AS(window_edges(0), doctest::Contains("--window 0"), std::invalid_argument);
}

TEST_CASE("depsim edge sets: GrassmannLM, one layer and the composed stack, against propagated reach") {
  const std::vector<LMConfig> configs = {
      grassmann(6, {1, 2, 4, 8, 12, 16}),                                         // the paper's default
      grassmann(1, {1, 2, 4, 8, 12, 16}),                                         // one layer
      grassmann(3, {5}),                                                          // gaps: 5, 10, 15 only
      grassmann(2, {3, 700}),                                                     // an offset beyond every n
      grassmann(4, {1}, {16, 8, 4, 2}),                                           // a window schedule
      grassmann(12, {1}, {1, 1, 2, 2, 4, 4, 8, 8, 12, 12, 16, 16}),               // the paper's 12-layer schedule
  };
  for (const LMConfig& c : configs) {
    for (std::int64_t n : kLengths) {
      const auto stack = grassmann_stack_edges(c, 512);
      std::vector<std::set<std::int64_t>> reach;
      for (std::int64_t t = 0; t < n; ++t) reach.push_back(grassmann_reach(c, t));
      check_against_brute_force(*stack, n, [&](std::int64_t t, std::int64_t s) { return reach[t].count(s) > 0; });
      for (std::int64_t layer = 0; layer < c.layers; ++layer) {
        const auto offsets = c.offsets_for_layer(layer);
        check_against_brute_force(*grassmann_layer_edges(c, layer), n, [&](std::int64_t t, std::int64_t s) {
          for (std::int32_t d : offsets)
            if (t - s == d) return true;
          return false;
        });
      }
    }
  }
  // The default stack reaches as far as 6 x 16 = 96 tokens back, but not every distance
  // near the end: 95, for one, is no sum of six offsets from {1, 2, 4, 8, 12, 16}.
  const auto stack = grassmann_stack_edges(grassmann(6, {1, 2, 4, 8, 12, 16}), 1 << 20);
  std::vector<std::int64_t> missing;
  for (std::int64_t d = 1; d <= 100; ++d)
    if (!stack->contains(1000, 1000 - d)) missing.push_back(d);
  CHECK(missing == std::vector<std::int64_t>{71, 75, 79, 83, 85, 86, 87, 89, 90, 91, 93, 94, 95, 97, 98, 99, 100});
  // The horizon drops the distances no sequence of that length uses; a count for a longer
  // sequence would miss pairs, so it is refused.
  CHECK(grassmann_stack_distances(grassmann(6, {1, 2, 4, 8, 12, 16}), 50).back().second == 49);
  const auto short_stack = grassmann_stack_edges(grassmann(6, {1, 2, 4, 8, 12, 16}), 50);
  CHECK(short_stack->count(50) == dense_edges()->count(50));
  CHECK_THROWS_WITH_AS(short_stack->count(51), doctest::Contains("horizon"), std::invalid_argument);
}

TEST_CASE("depsim edge sets: SheafStateLM token level against listed covers") {
  for (std::int64_t P : {1, 4, 16, 600})
    for (std::int64_t D : {1, 2, 4, 6}) {
      LMConfig c;
      c.model = "sheaf";
      c.patch = P;
      c.cover_depth = D;
      const auto set = sheaf_token_edges(c);
      for (std::int64_t n : kLengths)
        check_against_brute_force(*set, n, [P, D](std::int64_t t, std::int64_t s) { return sheaf_sees(t, s, P, D); });
    }
}

TEST_CASE("depsim edge sets: SheafStateLM patch level against listed covers") {
  for (std::int64_t P : {1, 4, 16, 600})
    for (std::int64_t D : {1, 3, 4}) {
      const SheafPatchCover cover(P, D);
      for (std::int64_t n : kLengths) {
        CAPTURE(P);
        CAPTURE(D);
        CAPTURE(n);
        const std::int64_t m = (n + P - 1) / P;
        CHECK(cover.patches(n) == m);
        std::set<std::pair<std::int64_t, std::int64_t>> pairs;
        for (std::int64_t p = 0; p < m; ++p)
          for (std::int64_t q : cover_of(p, D)) pairs.emplace(p, q);
        CHECK(cover.count(n) == static_cast<std::int64_t>(pairs.size()));
        const Edges e = some_edges(n, static_cast<std::uint64_t>(n) + 1);
        std::int64_t crossing = 0, carried = 0;
        std::set<std::pair<std::int64_t, std::int64_t>> used;
        for (std::size_t i = 0; i < e.target.size(); ++i) {
          const std::int64_t p = e.target[i] / P, q = e.source[i] / P;
          if (p == q) continue;
          ++crossing;
          if (pairs.count({p, q}) == 0) continue;
          ++carried;
          used.emplace(p, q);
        }
        const PatchMeasure pm = measure(cover, n, e.target, e.source);
        CHECK(pm.pairs == static_cast<std::int64_t>(pairs.size()));
        CHECK(pm.crossing_edges == crossing);
        CHECK(pm.carried_edges == carried);
        CHECK(pm.used_pairs == static_cast<std::int64_t>(used.size()));
      }
    }
}

TEST_CASE("depsim edge sets: counts at n = 2^20 and beyond stay exact") {
  LMConfig c;
  c.model = "sheaf";
  const auto sheaf = sheaf_token_edges(c);  // P 16, D 4
  // 2^16 patches of 16: 120 pairs inside each, 256 per covered patch pair.
  const std::int64_t m = std::int64_t{1} << 16;
  CHECK(sheaf->count(std::int64_t{1} << 20) == m * 120 + 256 * ((m - 1) + (m - 2) + (m - 4) + (m - 8)));
  CHECK(sheaf->count(kMaxEdgeSetLength) > 0);
  CHECK(SheafPatchCover(c).count(std::int64_t{1} << 20) == (m - 1) + (m - 2) + (m - 4) + (m - 8));
  // The default stack's 83 distances (1..96 but the 13 listed in the test above), each
  // paired n - d times.
  const auto stack = grassmann_stack_edges(grassmann(6, {1, 2, 4, 8, 12, 16}), kMaxEdgeSetLength);
  const std::int64_t n = kMaxEdgeSetLength;
  std::int64_t expected = 0;
  for (std::int64_t d = 1; d <= 96; ++d)
    if (stack->contains(d, 0)) expected += n - d;
  CHECK(stack->count(n) == expected);
  CHECK(expected == 83 * n - (96 * 97 / 2 - (71 + 75 + 79 + 83 + 85 + 86 + 87 + 89 + 90 + 91 + 93 + 94 + 95)));
}

TEST_CASE("depsim edge sets: measure refuses edges that are not causal within n") {
  const std::vector<std::int32_t> t = {3}, s = {3};
  CHECK_THROWS_AS(measure(*dense_edges(), 10, t, s), std::invalid_argument);
  const std::vector<std::int32_t> t2 = {12}, s2 = {3};
  CHECK_THROWS_AS(measure(*dense_edges(), 10, t2, s2), std::invalid_argument);
}
