// A built-in synthetic corpus, so wedge can train a language model on a fresh machine
// with no downloaded text: sentences from a small stochastic English grammar.
//
//   sentence  := NP VP "."          NP := det [adj] noun [prep det noun]
//   VP        := transitive NP | intransitive
//   follow-up := "it" transitive "the" <object noun of the previous sentence> "."
//
// The follow-up sentence (half the time) repeats a noun seen several tokens earlier, so a
// model has to look back past the immediate context to predict it — the loss falls in
// two visible stages: first the grammar, then the long-range copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wedge::data {

struct SyntheticCorpus {
  std::vector<std::string> vocab;  // id -> word; ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]
  std::vector<std::int32_t> train, valid, test;
};

// Deterministic for a seed. Sizes are in tokens (each split ends on a sentence boundary
// at or just after the requested size).
SyntheticCorpus make_synthetic_corpus(std::uint64_t seed, std::size_t train_tokens = 200000,
                                      std::size_t eval_tokens = 20000);

// Space-joined words of `ids` (unknown ids print as [UNK]).
std::string synthetic_decode(const SyntheticCorpus& corpus, const std::vector<std::int32_t>& ids);
// Whitespace-split words -> ids ([UNK] for words outside the vocabulary).
std::vector<std::int32_t> synthetic_encode(const SyntheticCorpus& corpus, const std::string& text);

}  // namespace wedge::data
