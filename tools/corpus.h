// What the training tools need from a dataset: three token-id streams, the vocabulary
// size, and how to turn text into ids and back (for prompts and samples).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wedge::tools {

struct Corpus {
  std::string name;  // "synthetic" | "wikitext2"
  std::int64_t vocab_size = 0;
  std::vector<std::int32_t> train, valid, test;
  std::function<std::vector<std::int32_t>(const std::string&)> encode;
  std::function<std::string(const std::vector<std::int32_t>&)> decode;

  const std::vector<std::int32_t>& split(const std::string& name) const;  // train|valid|test
};

struct CorpusSpec {
  std::string data;      // "" or "synthetic" -> the built-in corpus; "wikitext2"
  std::string data_dir;  // for wikitext2
  std::string vocab;     // vocab.txt for wikitext2 (default: <data_dir>/../bert-base-uncased-vocab.txt if present)
  std::uint64_t seed = 0;
  bool load_train = true;  // eval/generate skip tokenizing the training split
};

// Loads (and for WikiText-2 tokenizes, through the data room's cache) the corpus.
// Throws std::runtime_error naming the missing file/flag.
Corpus load_corpus(const CorpusSpec& spec);

// WikiText-2 through the data room's loader, tokenizer and cache (tools/corpus_wikitext.cpp).
Corpus wikitext2_corpus(const CorpusSpec& spec);

}  // namespace wedge::tools
