// The dependency simulation's true graph G*: deterministic per seed, different across
// seeds, causal, free of duplicates, a prefix of any longer sequence's graph, and counts
// by type within a tolerance derived from the rates (defaults: ≈ 67 k edges at n = 32,768).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <utility>

#include "data/dependency_graph.h"
#include "data/hash.h"

using namespace wedge::data;

namespace {

DependencyGraph graph(std::int64_t n, std::uint64_t seed = 0) {
  DependencyGraphConfig c;
  c.n = n;
  c.seed = seed;
  return make_dependency_graph(c);
}

std::uint64_t fingerprint(const DependencyGraph& g) {
  Fnv1a64 h;
  h.add(g.target.data(), g.target.size() * sizeof(std::int32_t));
  h.add(g.source.data(), g.source.size() * sizeof(std::int32_t));
  h.add(g.type.data(), g.type.size() * sizeof(DependencyType));
  return h.value();
}

std::int64_t count(const DependencyGraph& g, DependencyType t) { return g.count_by_type[static_cast<std::size_t>(t)]; }

}  // namespace

TEST_CASE("dependency graph: deterministic per seed, different across seeds") {
  const DependencyGraph a = graph(20000, 7), b = graph(20000, 7), c = graph(20000, 8);
  CHECK(a.target == b.target);
  CHECK(a.source == b.source);
  CHECK(a.type == b.type);
  CHECK(fingerprint(a) == fingerprint(b));
  CHECK(fingerprint(a) != fingerprint(c));
  // The draws are integer hashes (no libm, no standard-library distribution), so this graph
  // is the same on every platform; the value pins it against accidental changes.
  CHECK(fingerprint(graph(4096)) == 13929005614829657276ull);
}

TEST_CASE("dependency graph: causal, sorted, no duplicate pair, counts add up") {
  for (std::uint64_t seed : {0u, 1u, 2u}) {
    const DependencyGraph g = graph(30000, seed);
    REQUIRE(g.target.size() == g.source.size());
    REQUIRE(g.target.size() == g.type.size());
    std::int64_t by_type[kDependencyTypes] = {};
    for (std::size_t i = 0; i < g.target.size(); ++i) {
      CHECK_MESSAGE(0 <= g.source[i], i);
      CHECK_MESSAGE(g.source[i] < g.target[i], i);
      CHECK(g.target[i] < 30000);
      if (i > 0) {
        const auto prev = std::make_pair(g.target[i - 1], g.source[i - 1]);
        CHECK_MESSAGE(prev < std::make_pair(g.target[i], g.source[i]), "edge " << i << " repeats or is out of order");
      }
      ++by_type[static_cast<std::size_t>(g.type[i])];
    }
    for (int k = 0; k < kDependencyTypes; ++k) CHECK(by_type[k] == g.count_by_type[static_cast<std::size_t>(k)]);
    // Every token t >= 1 depends on t - 1, as a local edge.
    std::set<std::pair<std::int32_t, std::int32_t>> local;
    for (std::size_t i = 0; i < g.target.size(); ++i)
      if (g.type[i] == DependencyType::kLocal) local.emplace(g.target[i], g.source[i]);
    for (std::int32_t t = 1; t < 30000; ++t) CHECK(local.count({t, t - 1}) == 1);
  }
}

TEST_CASE("dependency graph: the graph of n tokens is the prefix of a longer one's") {
  const DependencyGraph shorter = graph(3000, 5), longer = graph(9000, 5);
  std::size_t k = 0;
  while (k < longer.target.size() && longer.target[k] < 3000) ++k;
  REQUIRE(k == shorter.target.size());
  for (std::size_t i = 0; i < k; ++i) {
    CHECK(shorter.target[i] == longer.target[i]);
    CHECK(shorter.source[i] == longer.source[i]);
    CHECK(shorter.type[i] == longer.type[i]);
  }
}

TEST_CASE("dependency graph: counts by type at n = 32,768 match the rates") {
  const DependencyGraphConfig c;  // the defaults
  REQUIRE(c.n == 32768);
  const DependencyGraph g = make_dependency_graph(c);
  const double n = double(c.n);
  // local: t - 1 for every t >= 1, exactly, plus a Bernoulli(local_extra) second edge whose
  // distance (uniform in 2..reach) must not reach before token 0.
  double extra_mean = 0, extra_var = 0;
  for (std::int64_t t = 1; t < c.n; ++t) {
    const double q = c.local_extra * double(std::min<std::int64_t>(t - 1, c.local_reach - 1)) / double(c.local_reach - 1);
    extra_mean += q;
    extra_var += q * (1 - q);
  }
  const double local = count(g, DependencyType::kLocal) - (n - 1);
  CHECK(std::abs(local - extra_mean) < 6 * std::sqrt(extra_var));
  // anchors: every non-starting token with probability anchor_rate, less the few that
  // coincide with a local edge (the anchor at distance 1, or the drawn extra distance).
  const double segment_p = 1 / c.segment_mean;
  const double anchor_mean = c.anchor_rate * (n - 1) * (1 - segment_p);
  CHECK(std::abs(double(g.segments) - (1 + (n - 1) * segment_p)) < 6 * std::sqrt(n * segment_p));
  CHECK(std::abs(double(count(g, DependencyType::kAnchor)) - anchor_mean) < 6 * std::sqrt(anchor_mean) + 10);
  // entities: every mention but the first of its entity; E[first mentions] from the Zipf
  // weights. A handful coincide with local or anchor edges (consecutive mentions).
  const double mention_mean = c.entity_rate * n;
  CHECK(std::abs(double(g.mentions) - mention_mean) < 6 * std::sqrt(mention_mean));
  double harmonic = 0, first_mentions = 0;
  for (std::int64_t k = 1; k <= c.entities; ++k) harmonic += 1.0 / double(k);
  for (std::int64_t k = 1; k <= c.entities; ++k)
    first_mentions += 1 - std::pow(1 - c.entity_rate / (double(k) * harmonic), n);
  const double entity_mean = mention_mean - first_mentions;
  CHECK(std::abs(double(count(g, DependencyType::kEntity)) - entity_mean) < 6 * std::sqrt(entity_mean) + 20);
  // ≈ 67 k in all, the paper's count at this n.
  MESSAGE("true edges at n = 32,768: " << g.edges() << " (local " << count(g, DependencyType::kLocal) << ", anchor "
                                       << count(g, DependencyType::kAnchor) << ", entity "
                                       << count(g, DependencyType::kEntity) << ")");
  CHECK(g.edges() > 66'000);
  CHECK(g.edges() < 68'000);
}

TEST_CASE("dependency graph: rates at their extremes") {
  DependencyGraphConfig c;
  c.n = 1000;
  c.local_extra = 0;
  c.anchor_rate = 0;
  c.entity_rate = 0;
  DependencyGraph g = make_dependency_graph(c);
  CHECK(g.edges() == 999);  // the chain t -> t-1 alone
  c.local_extra = 1;
  c.local_reach = 2;
  g = make_dependency_graph(c);
  CHECK(g.edges() == 999 + 998);  // t-1 and t-2 for every t >= 2
  c.entity_rate = 1;
  c.entities = 1;  // every token mentions the one entity: its previous mention is t-1
  g = make_dependency_graph(c);
  CHECK(g.edges() == 999 + 998);  // the entity links all coincide with local edges
  CHECK(g.count_by_type[static_cast<std::size_t>(DependencyType::kEntity)] == 0);
  c.n = 2;
  CHECK(make_dependency_graph(c).edges() == 1);
}

TEST_CASE("dependency graph: a million tokens") {
  const DependencyGraph g = graph(std::int64_t{1} << 20);
  CHECK(g.edges() > 2'000'000);
  CHECK(g.edges() < 2'200'000);
}

TEST_CASE("dependency graph: bad settings are one line naming the flag") {
  auto fails = [](auto edit, const char* flag) {
    DependencyGraphConfig c;
    edit(c);
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(flag), std::invalid_argument);
  };
  fails([](DependencyGraphConfig& c) { c.n = 1; }, "--n 1");
  fails([](DependencyGraphConfig& c) { c.n = kMaxDependencyTokens + 1; }, "--n");
  fails([](DependencyGraphConfig& c) { c.local_extra = 1.5; }, "--local-extra");
  fails([](DependencyGraphConfig& c) { c.anchor_rate = -0.1; }, "--anchor-rate");
  fails([](DependencyGraphConfig& c) { c.entity_rate = std::nan(""); }, "--entity-rate");
  fails([](DependencyGraphConfig& c) { c.segment_mean = 0.5; }, "--segment-mean");
  fails([](DependencyGraphConfig& c) { c.local_reach = 0; }, "--local-reach");
  fails([](DependencyGraphConfig& c) { c.entities = 0; }, "--entities");
}
