#include "data/dependency_probe.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/splitmix.h"

namespace wedge::data {

namespace {

constexpr std::int32_t kSpecials = 5;  // [PAD] [UNK] [CLS] [SEP] [MASK]
constexpr std::int32_t kSep = 3;
constexpr std::int32_t kFillers = 64;
constexpr std::int32_t kEntities = 32;
constexpr std::int32_t kAttributes = 16;
constexpr std::int32_t kTopics = 16;

// The id ranges of the vocabulary, in order.
constexpr std::int32_t kFiller0 = kSpecials;
constexpr std::int32_t kEntity0 = kFiller0 + kFillers;
constexpr std::int32_t kAttribute0 = kEntity0 + kEntities;
constexpr std::int32_t kAnchor0 = kAttribute0 + kAttributes;
constexpr std::int32_t kTopicWord0 = kAnchor0 + kTopics;
constexpr std::int32_t kTopicMarker = kTopicWord0 + kTopics;
constexpr std::int32_t kVocabulary = kTopicMarker + 1;

// What every split shares: the local rule and the anchor -> topic word pairing.
struct Language {
  std::vector<std::int32_t> rule;        // filler index -> filler id
  std::vector<std::int32_t> topic_word;  // anchor index -> topic word id
};

Language make_language(std::uint64_t seed) {
  SplitMix64 rng{seed ^ 0x5DEECE66Dull};
  Language lang;
  lang.rule.resize(kFillers);
  for (auto& r : lang.rule) r = kFiller0 + static_cast<std::int32_t>(rng.below(kFillers));
  std::vector<std::int32_t> words(kTopics);
  for (std::int32_t i = 0; i < kTopics; ++i) words[i] = kTopicWord0 + i;
  for (std::size_t i = words.size(); i > 1; --i) std::swap(words[i - 1], words[rng.below(i)]);
  lang.topic_word = words;
  return lang;
}

bool is_filler(std::int32_t id) { return id >= kFiller0 && id < kFiller0 + kFillers; }

// Draws k distinct values of [0, n) (k <= n).
std::vector<std::int32_t> distinct(SplitMix64& rng, std::int32_t n, std::int64_t k) {
  std::vector<std::int32_t> all(n);
  for (std::int32_t i = 0; i < n; ++i) all[i] = i;
  for (std::int64_t i = 0; i < k; ++i) std::swap(all[i], all[i + rng.below(n - i)]);
  all.resize(k);
  return all;
}

// Appends one document of s.length tokens at the end of `out`, its probes to `probes`.
void write_document(const DependencyProbeSettings& s, const Language& lang, SplitMix64& rng,
                    std::vector<std::int32_t>& out, std::vector<DependencyProbe>& probes) {
  const std::int64_t L = s.length;
  const auto base = static_cast<std::int64_t>(out.size());
  std::vector<std::int32_t> tok(L, -1);
  std::vector<DependencyProbe> doc_probes;
  auto free = [&](std::int64_t i) { return tok[i] < 0; };

  // Segments and their anchors: one, or two when the document is long enough to hold both.
  std::vector<std::int64_t> starts = {0};
  if (L >= 32) starts.push_back(L / 4 + static_cast<std::int64_t>(rng.below(L / 2)));
  const std::vector<std::int32_t> anchors = distinct(rng, kTopics, static_cast<std::int64_t>(starts.size()));
  for (std::size_t g = 0; g < starts.size(); ++g) tok[starts[g]] = kAnchor0 + anchors[g];

  // Key-value recalls first: their spans are the longest and the hardest to place. The
  // distance is log-uniform in [1, L - 3]; a recall that finds no free place is left out.
  const std::vector<std::int32_t> keys = distinct(rng, kEntities, std::min<std::int64_t>(s.entities, std::max<std::int64_t>(1, L / 10)));
  for (const std::int32_t key : keys) {
    const double u = rng.uniform();
    const auto d = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::exp(u * std::log(double(L - 2)))), 1, L - 3);
    for (int attempt = 0; attempt < 64; ++attempt) {
      const std::int64_t i = static_cast<std::int64_t>(rng.below(static_cast<std::size_t>(L - d - 2)));
      const std::int64_t r = i + 1 + d;
      if (!free(i) || !free(i + 1) || !free(r) || !free(r + 1)) continue;
      const std::int32_t value = kAttribute0 + static_cast<std::int32_t>(rng.below(kAttributes));
      tok[i] = tok[r] = kEntity0 + key;
      tok[i + 1] = tok[r + 1] = value;
      doc_probes.push_back({base + r + 1, static_cast<std::int32_t>(d), DependencyType::kEntity});
      break;
    }
  }

  // [TOPIC] markers inside each segment; the token after one is its anchor's topic word.
  for (std::size_t g = 0; g < starts.size(); ++g) {
    const std::int64_t s0 = starts[g], s1 = g + 1 < starts.size() ? starts[g + 1] : L;
    if (s1 - s0 < 3) continue;
    const std::int32_t word = lang.topic_word[anchors[g]];
    for (std::int64_t k = 0; k < s.topic_markers; ++k) {
      for (int attempt = 0; attempt < 64; ++attempt) {
        const std::int64_t m = s0 + 1 + static_cast<std::int64_t>(rng.below(static_cast<std::size_t>(s1 - s0 - 2)));
        if (!free(m) || !free(m + 1)) continue;
        tok[m] = kTopicMarker;
        tok[m + 1] = word;
        doc_probes.push_back({base + m + 1, static_cast<std::int32_t>(m - s0), DependencyType::kAnchor});
        break;
      }
    }
  }

  // Filler everywhere else, by the local rule where the token two back is filler.
  for (std::int64_t t = 0; t < L; ++t) {
    if (!free(t)) continue;
    if (t >= 2 && is_filler(tok[t - 2]) && rng.coin(s.local_rule_rate)) {
      tok[t] = lang.rule[tok[t - 2] - kFiller0];
      doc_probes.push_back({base + t, 1, DependencyType::kLocal});
    } else {
      tok[t] = kFiller0 + static_cast<std::int32_t>(rng.below(kFillers));
    }
  }
  out.insert(out.end(), tok.begin(), tok.end());
  std::sort(doc_probes.begin(), doc_probes.end(),
            [](const DependencyProbe& a, const DependencyProbe& b) { return a.target < b.target; });
  probes.insert(probes.end(), doc_probes.begin(), doc_probes.end());
}

void write_split(const DependencyProbeSettings& s, const Language& lang, std::uint64_t stream, std::int64_t documents,
                 std::vector<std::int32_t>& out, std::vector<DependencyProbe>& probes) {
  SplitMix64 rng{s.seed * 0x9E3779B97F4A7C15ull + stream};
  out.reserve(static_cast<std::size_t>(documents * s.length + 1));
  for (std::int64_t d = 0; d < documents; ++d) write_document(s, lang, rng, out, probes);
  out.push_back(kSep);
}

}  // namespace

void DependencyProbeSettings::validate() const {
  auto bad = [](const std::string& what, auto value, const std::string& allowed) {
    throw std::invalid_argument(fmt::format("depsim: {} is {}; it must be {}", what, value, allowed));
  };
  if (length < 16 || length > (1 << 20)) bad("the document length (--block)", length, "between 16 and 1048576");
  if (train_documents < 1) bad("the training size", train_documents, "at least 1 document");
  if (eval_documents < 1) bad("the evaluation size", eval_documents, "at least 1 document");
  if (entities < 0 || entities > kEntities) bad("the recalls per document", entities, fmt::format("between 0 and {}", kEntities));
  if (topic_markers < 0 || topic_markers > 64) bad("the [TOPIC] markers per segment", topic_markers, "between 0 and 64");
  if (!(local_rule_rate >= 0 && local_rule_rate <= 1)) bad("the local rule rate", local_rule_rate, "in [0, 1]");
}

DependencyProbeCorpus make_dependency_probe_corpus(const DependencyProbeSettings& s) {
  s.validate();
  DependencyProbeCorpus c;
  c.vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (std::int32_t i = 0; i < kFillers; ++i) c.vocab.push_back(fmt::format("f{}", i));
  for (std::int32_t i = 0; i < kEntities; ++i) c.vocab.push_back(fmt::format("e{}", i));
  for (std::int32_t i = 0; i < kAttributes; ++i) c.vocab.push_back(fmt::format("v{}", i));
  for (std::int32_t i = 0; i < kTopics; ++i) c.vocab.push_back(fmt::format("T{}", i));
  for (std::int32_t i = 0; i < kTopics; ++i) c.vocab.push_back(fmt::format("w{}", i));
  c.vocab.push_back("[TOPIC]");
  if (static_cast<std::int32_t>(c.vocab.size()) != kVocabulary) throw std::logic_error("dependency probe vocabulary");
  const Language lang = make_language(s.seed);
  write_split(s, lang, 1, s.train_documents, c.train, c.train_probes);
  write_split(s, lang, 2, s.eval_documents, c.valid, c.valid_probes);
  write_split(s, lang, 3, s.eval_documents, c.test, c.test_probes);
  return c;
}

std::size_t distance_bucket(std::int32_t distance) {
  return static_cast<std::size_t>(std::bit_width(static_cast<std::uint32_t>(std::max(distance, 1)))) - 1;
}

std::vector<std::string> distance_bucket_names(std::int64_t length) {
  const std::int64_t longest = std::max<std::int64_t>(length - 1, 1);
  std::vector<std::string> names;
  for (std::int64_t lo = 1; lo <= longest; lo *= 2) {
    const std::int64_t hi = std::min(2 * lo - 1, longest);
    names.push_back(hi == lo ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi));
  }
  return names;
}

DependencyTally::DependencyTally(std::int64_t length) : length_(length) {
  const std::size_t buckets = distance_bucket_names(length).size();
  for (auto& v : count_) v.assign(buckets, 0);
  for (auto& v : correct_) v.assign(buckets, 0);
}

void DependencyTally::add(const DependencyProbe& probe, bool correct) {
  const auto type = static_cast<std::size_t>(probe.type);
  const std::size_t b = std::min(distance_bucket(probe.distance), count_[type].size() - 1);
  ++count_[type][b];
  correct_[type][b] += correct ? 1 : 0;
}

std::int64_t DependencyTally::probes() const {
  std::int64_t n = 0;
  for (const auto& v : count_)
    for (const std::int64_t c : v) n += c;
  return n;
}

nlohmann::json DependencyTally::to_json() const {
  auto accuracy = [](std::int64_t correct, std::int64_t count) {
    return count == 0 ? nlohmann::json(nullptr) : nlohmann::json(double(correct) / double(count));
  };
  const std::vector<std::string> names = distance_bucket_names(length_);
  nlohmann::json j{{"buckets", names}};
  nlohmann::json all_acc = nlohmann::json::array(), all_n = nlohmann::json::array(), types = nlohmann::json::object();
  for (std::size_t b = 0; b < names.size(); ++b) {
    std::int64_t n = 0, ok = 0;
    for (std::size_t t = 0; t < kDependencyTypeNames.size(); ++t) {
      n += count_[t][b];
      ok += correct_[t][b];
    }
    all_acc.push_back(accuracy(ok, n));
    all_n.push_back(n);
  }
  for (std::size_t t = 0; t < kDependencyTypeNames.size(); ++t) {
    std::int64_t n = 0, ok = 0;
    nlohmann::json by = nlohmann::json::array();
    for (std::size_t b = 0; b < names.size(); ++b) {
      n += count_[t][b];
      ok += correct_[t][b];
      by.push_back(accuracy(correct_[t][b], count_[t][b]));
    }
    types[kDependencyTypeNames[t]] = {
        {"accuracy", accuracy(ok, n)}, {"probes", n}, {"by_distance", by}, {"probes_by_distance", count_[t]}};
  }
  j["accuracy"] = all_acc;
  j["probes"] = all_n;
  j["types"] = types;
  return j;
}

}  // namespace wedge::data
