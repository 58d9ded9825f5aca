// What the training tools need from a dataset: three token-id streams, the vocabulary
// size, and how to turn text into ids and back (for prompts and samples).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/dependency_probe.h"
#include "data/tokenizer.h"

namespace wedge::tools {

// How text becomes token ids and back. A run folder keeps the vocabulary (vocab.txt), so a
// trained model reads and writes text without its corpus (tools/run_continuation.h).
struct TextCodec {
  // "wordpiece": a WordPiece vocab.txt (WikiText-2, your own text); "words": a generated
  // corpus's word list (the synthetic corpus, the dependency probe), split on whitespace.
  std::string kind;
  std::int64_t vocab_size = 0;
  // The vocabulary as vocab.txt holds it, one entry per line: the bytes of the WordPiece
  // file as read, or the word list written out.
  std::string vocab_text;
  std::function<std::vector<std::int32_t>(const std::string&)> encode;
  std::function<std::string(const std::vector<std::int32_t>&)> decode;
  // Ids a sampler must never produce: the tokenizer's special tokens ([PAD], [UNK], [CLS],
  // [SEP], [MASK]) and the vocabulary's placeholders ([unused0], ...). Empty for the
  // generated corpora, whose every id is a word.
  std::vector<std::int32_t> never_sampled;
  std::shared_ptr<const data::Tokenizer> tokenizer;  // "wordpiece" only
};

// A WordPiece vocabulary file's codec (errors name the file).
TextCodec wordpiece_codec(const std::string& vocab_file);
// A word list's codec: id i is words[i].
TextCodec words_codec(std::vector<std::string> words);
// The codec a vocab.txt of `kind` holds ("wordpiece" or "words", as TextCodec::kind).
TextCodec read_codec(const std::string& kind, const std::string& vocab_file);

struct Corpus {
  std::string name;  // "synthetic" | "wikitext2" | "text" | "depsim"
  std::int64_t vocab_size = 0;
  std::vector<std::int32_t> train, valid, test;
  TextCodec codec;

  std::vector<std::string> notes;  // how the splits were formed, when the user should know

  // --data depsim: the targets that only a dependency of known type and distance decides
  // (data/dependency_probe.h), per split; empty for every other corpus.
  std::vector<data::DependencyProbe> valid_probes, test_probes, train_probes;
  const std::vector<data::DependencyProbe>& probes(const std::string& split) const;

  // The split by name (train | valid | test); throws naming what is missing when the
  // corpus has no such split (a text corpus trained without --test).
  const std::vector<std::int32_t>& split(const std::string& name) const;
};

struct CorpusSpec {
  std::string data;      // "" or "synthetic" -> the built-in corpus; "wikitext2"; "text"; "depsim"
  std::string data_dir;  // for wikitext2
  std::string vocab;     // vocab.txt (wikitext2 default: <data_dir>/../bert-base-uncased-vocab.txt if present)
  // --data text: the user's files. Without a validation file, the last
  // kCarvedValidFraction of the training file's tokens become the validation split.
  std::string train_file, valid_file, test_file;
  std::uint64_t seed = 0;
  std::int64_t block = 128;  // --data depsim: the document length (the run's training block)
  // Non-empty: read only this split (train | valid | test), as `wedge eval --split` asks;
  // the others stay empty (a validation split carved from the training file still reads it).
  std::string only_split;
  bool wants(const std::string& split) const { return only_split.empty() || only_split == split; }

  // The fields a run folder records (config.json "train": data, data_dir, vocab and the
  // text files, as absolute paths), and the spec read back from them.
  void write_to(nlohmann::json& settings) const;
  static CorpusSpec read_from(const nlohmann::json& settings);
};

inline constexpr double kCarvedValidFraction = 0.05;

// Loads (and for WikiText-2 tokenizes, through the data room's cache) the corpus.
// Throws std::runtime_error naming the missing file/flag.
Corpus load_corpus(const CorpusSpec& spec);

// WikiText-2 through the data room's loader, tokenizer and cache, and the user's text files
// through the same tokenizer and cache (tools/corpus_wikitext.cpp).
Corpus wikitext2_corpus(const CorpusSpec& spec);
Corpus text_corpus(const CorpusSpec& spec);
// The dependency probe task of data/dependency_probe.h, one document per training block.
Corpus depsim_corpus(const CorpusSpec& spec);

}  // namespace wedge::tools
