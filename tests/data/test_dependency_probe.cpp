// The dependency probe corpus (data/dependency_probe.h): every probe's target is decided by
// the token its type and distance name, and by nothing closer; documents line up with the
// batcher's windows; distances spread over the buckets; the tally counts by hand.
#include <doctest/doctest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dependency_probe.h"
#include "data/wikitext.h"

using namespace wedge::data;

namespace {

DependencyProbeCorpus small_corpus(std::uint64_t seed, std::int64_t length = 128) {
  DependencyProbeSettings s;
  s.length = length;
  s.train_documents = 64;
  s.eval_documents = 200;
  s.seed = seed;
  return make_dependency_probe_corpus(s);
}

bool word_starts(const DependencyProbeCorpus& c, std::int32_t id, const std::string& prefix) {
  return c.vocab.at(static_cast<std::size_t>(id)).rfind(prefix, 0) == 0;
}

}  // namespace

TEST_CASE("depsim probe: the same seed gives the same corpus, another seed another one") {
  const auto a = small_corpus(7), b = small_corpus(7), c = small_corpus(8);
  CHECK(a.train == b.train);
  CHECK(a.valid == b.valid);
  CHECK(a.valid_probes.size() == b.valid_probes.size());
  CHECK(a.train != c.train);
  CHECK(a.valid != a.test);
}

TEST_CASE("depsim probe: each target is decided by the token its type and distance name") {
  for (const std::int64_t L : {16, 33, 128}) {
    CAPTURE(L);
    const auto c = small_corpus(3, L);
    const std::vector<std::int32_t>& s = c.valid;
    REQUIRE(static_cast<std::int64_t>(s.size()) == 200 * L + 1);
    std::map<std::int32_t, std::int32_t> local_rule, topic_word;
    std::map<std::string, std::int64_t> by_type;
    std::int64_t previous = -1;
    for (const DependencyProbe& p : c.valid_probes) {
      CHECK(p.target > previous);  // sorted, one probe per target
      previous = p.target;
      const std::int64_t doc = p.target / L, predict = p.target - 1, source = predict - p.distance;
      REQUIRE(p.distance >= 1);
      REQUIRE(p.target % L != 0);             // never a document's first token
      REQUIRE(source >= doc * L);             // the deciding token is in the same document
      ++by_type[kDependencyTypeNames[static_cast<std::size_t>(p.type)]];
      if (p.type == DependencyType::kLocal) {
        CHECK(p.distance == 1);
        CHECK(word_starts(c, s[source], "f"));
        CHECK(word_starts(c, s[p.target], "f"));
        auto [it, fresh] = local_rule.emplace(s[source], s[p.target]);
        CHECK(it->second == s[p.target]);  // the rule is a function of the token two back
      } else if (p.type == DependencyType::kAnchor) {
        CHECK(c.vocab[s[predict]] == "[TOPIC]");
        CHECK(word_starts(c, s[source], "T"));
        for (std::int64_t i = source + 1; i < predict; ++i) CHECK_FALSE(word_starts(c, s[i], "T"));  // the nearest anchor
        auto [it, fresh] = topic_word.emplace(s[source], s[p.target]);
        CHECK(it->second == s[p.target]);
        CHECK(word_starts(c, s[p.target], "w"));
      } else {
        const std::int32_t key = s[predict];
        CHECK(word_starts(c, key, "e"));
        CHECK(s[source - 1] == key);  // the key's first mention, its attribute right after
        CHECK(s[source] == s[p.target]);
        CHECK(word_starts(c, s[p.target], "v"));
        int mentions = 0;
        for (std::int64_t i = doc * L; i < (doc + 1) * L; ++i) mentions += s[i] == key ? 1 : 0;
        CHECK(mentions == 2);
      }
    }
    CHECK(by_type["local"] > 0);
    CHECK(by_type["anchor"] > 0);
    CHECK(by_type["entity"] > 0);
    // A real rule: not the identity and not constant.
    std::set<std::int32_t> images;
    int fixed_points = 0;
    for (const auto& [from, to] : local_rule) {
      images.insert(to);
      fixed_points += from == to ? 1 : 0;
    }
    CHECK(images.size() > 8);
    CHECK(fixed_points < 8);
  }
}

TEST_CASE("depsim probe: each document is one window of the batcher") {
  const auto c = small_corpus(5, 32);
  const LmBatcher batcher(c.valid, 32, 4, 0);
  CHECK(batcher.eval_blocks() == 200);
  const LmBatch b = batcher.eval_batch(0);
  for (std::size_t r = 0; r < b.rows; ++r) {
    CHECK(b.inputs[r * 32] == c.valid[r * 32]);
    CHECK(c.vocab[b.inputs[r * 32]].rfind("T", 0) == 0);  // every window starts at an anchor
  }
}

TEST_CASE("depsim probe: recall distances spread over every bucket") {
  DependencyProbeSettings s;
  s.length = 128;
  s.train_documents = 1;
  s.eval_documents = 1000;
  const auto c = make_dependency_probe_corpus(s);
  std::vector<int> per_bucket(distance_bucket_names(128).size());
  int recalls = 0;
  for (const DependencyProbe& p : c.valid_probes)
    if (p.type == DependencyType::kEntity) {
      ++per_bucket[distance_bucket(p.distance)];
      ++recalls;
    }
  CHECK(recalls > 10000);  // 12 per document, nearly all placed
  for (const int n : per_bucket) CHECK(n > recalls / 14);  // log-uniform: about 1/7 each
}

TEST_CASE("depsim probe: distance buckets and the tally, by hand") {
  CHECK(distance_bucket_names(128) == std::vector<std::string>{"1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127"});
  CHECK(distance_bucket_names(20) == std::vector<std::string>{"1", "2-3", "4-7", "8-15", "16-19"});
  CHECK(distance_bucket(1) == 0);
  CHECK(distance_bucket(3) == 1);
  CHECK(distance_bucket(4) == 2);
  CHECK(distance_bucket(127) == 6);
  DependencyTally t(20);
  t.add({10, 1, DependencyType::kLocal}, true);
  t.add({11, 1, DependencyType::kLocal}, false);
  t.add({12, 5, DependencyType::kEntity}, true);
  t.add({13, 19, DependencyType::kAnchor}, false);
  CHECK(t.probes() == 4);
  const nlohmann::json j = t.to_json();
  CHECK(j["accuracy"][0].get<double>() == doctest::Approx(0.5));
  CHECK(j["probes"][0] == 2);
  CHECK(j["accuracy"][1].is_null());
  CHECK(j["accuracy"][2].get<double>() == 1.0);
  CHECK(j["accuracy"][4].get<double>() == 0.0);
  CHECK(j["types"]["entity"]["accuracy"].get<double>() == 1.0);
  CHECK(j["types"]["anchor"]["probes"] == 1);
  CHECK(j["types"]["local"]["probes_by_distance"][0] == 2);
}

TEST_CASE("depsim probe: settings out of range are refused, naming the setting") {
  DependencyProbeSettings s;
  s.length = 8;
  CHECK_THROWS_WITH_AS(make_dependency_probe_corpus(s), doctest::Contains("document length (--block) is 8"),
                       std::invalid_argument);
  s = {};
  s.local_rule_rate = 1.5;
  CHECK_THROWS_WITH_AS(make_dependency_probe_corpus(s), doctest::Contains("local rule rate"), std::invalid_argument);
}
