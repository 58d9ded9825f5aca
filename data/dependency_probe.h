// The dependency probe: a synthetic language-modelling task in which some targets can be
// predicted ONLY through a dependency of known type and distance, so that a trained model's
// accuracy on them says how far back, and along which kind of edge, it actually looks.
//
// The stream is cut into documents of exactly `length` tokens (the training block, so each
// training and evaluation window is one whole document). A document holds three kinds of
// dependent targets, the three edge types of the dependency simulation (`wedge depsim`):
//
//   local   filler words follow a fixed random rule: where the token two back is a filler,
//           with probability `local_rule_rate` the next filler is rule[x_{t-2}] (otherwise a
//           uniformly random filler) — a skip-bigram, which the token just before cannot
//           predict. Each rule-made filler is a probe at distance 1.
//   anchor  the document has one or two segments; each starts with an anchor (a topic
//           token). Later in the segment the marker [TOPIC] appears, and the next token
//           must be the topic word of that segment's anchor (a fixed random pairing).
//   entity  an entity key e is introduced with a random attribute v ("e v"); later e recurs
//           and the next token must be v again: a key-value recall. Distances are drawn
//           log-uniformly, so every distance bucket holds about as many recalls.
//
// A probe's distance counts from the position that predicts the target (the token before
// it) back to the token that decides it: 1 for the local rule (x_{t-2}), the marker's
// distance to its segment's anchor, and the recurrence's distance to the attribute after
// the key's first mention. Accuracy (argmax = target) is bucketed by distance in powers of
// two — 1, 2-3, 4-7, ... — and by type.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/dependency_graph.h"  // DependencyType: the simulation's edge types

namespace wedge::data {


struct DependencyProbe {
  std::int64_t target = 0;    // index in its split's stream of the token to predict
  std::int32_t distance = 0;  // from the predicting position (target - 1) back to the deciding token
  DependencyType type = DependencyType::kLocal;
};

struct DependencyProbeSettings {
  std::int64_t length = 128;             // tokens per document (the training block); at least 16
  std::int64_t train_documents = 1 << 16;  // 8 M tokens at length 128: a long run seldom sees one twice
  std::int64_t eval_documents = 512;     // per evaluation split (valid, test)
  // Key-value recalls per document; at most one per 10 tokens (so a short document keeps
  // room for filler), and fewer when they find no free place.
  std::int64_t entities = 12;
  std::int64_t topic_markers = 2;        // [TOPIC] markers per segment
  double local_rule_rate = 0.5;
  std::uint64_t seed = 0;

  // Throws std::invalid_argument naming the setting when one is out of range.
  void validate() const;
};

struct DependencyProbeCorpus {
  std::vector<std::string> vocab;  // id -> word; ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]
  std::vector<std::int32_t> train, valid, test;
  std::vector<DependencyProbe> train_probes, valid_probes, test_probes;  // sorted by target
};

// Deterministic for the settings (seed included). Each split is whole documents followed by
// one [SEP], so that the language-model batcher (blocks of length + 1 tokens overlapping by
// one) sees every document as exactly one window.
DependencyProbeCorpus make_dependency_probe_corpus(const DependencyProbeSettings& settings);

// The distance buckets for a context of `length` tokens: [1], [2,3], [4,7], ..., the last
// ending at length - 1. bucket_of(d) is the index of d's bucket (d >= 1).
std::vector<std::string> distance_bucket_names(std::int64_t length);
std::size_t distance_bucket(std::int32_t distance);

// Counts of probes and of correct predictions, by type and distance bucket.
class DependencyTally {
 public:
  explicit DependencyTally(std::int64_t length);
  void add(const DependencyProbe& probe, bool correct);
  std::int64_t probes() const;
  // {"buckets": [...], "accuracy": [...], "probes": [...],
  //  "types": {"local": {"accuracy": a, "probes": n, "by_distance": [...],
  //                       "probes_by_distance": [...]}, ...}}
  // An accuracy over no probes is null.
  nlohmann::json to_json() const;

 private:
  std::int64_t length_;
  // [type][bucket]
  std::array<std::vector<std::int64_t>, 3> count_, correct_;
};

}  // namespace wedge::data
