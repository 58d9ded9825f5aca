// Learns a WordPiece vocabulary from text, so nobody needs a downloaded vocab.txt.
//
// The scheme (Schuster & Nakajima's WordPiece as BERT describes it): every word starts as
// its characters, the first one plain and the rest with the "##" prefix ("low" → l ##o ##w).
// Then, repeatedly, the adjacent pair (a, b) with the highest score
//
//     score(a, b) = freq(ab) / (freq(a) · freq(b))
//
// is merged into one new piece, everywhere, until the vocabulary has the requested size.
// Unlike BPE, which merges the most frequent pair, this prefers pairs whose parts rarely
// occur apart, i.e. merging them loses the least likelihood of a unigram model.
//
// Words come from the same normalisation and splitting the tokenizer uses, so every piece
// learned can be matched at encoding time. Ties are broken by the higher pair frequency
// and then by the pieces' spelling, and scores are compared exactly (as integer products),
// so the same input always gives the same vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/basic_tokenizer.h"
#include "data/vocab.h"

namespace wedge::data {

struct WordPieceTrainerOptions {
  std::size_t vocab_size = 30522;
  std::uint64_t min_word_frequency = 1;  // rarer words do not take part
  // Pairs seen fewer times are never merged. 1 is the plain scheme; since the score favours
  // pairs of rare pieces, the plain scheme spends many merges completing words seen once or
  // twice, and a higher value keeps the vocabulary for pieces that recur.
  std::uint64_t min_pair_frequency = 1;
  std::size_t max_word_chars = 100;      // longer words are [UNK] at encoding time anyway
  NormalizerOptions normalizer;          // must match the tokenizer's (default: uncased)
  // Written first, in this order; [UNK] is required by the tokenizer.
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
};

struct WordPieceTrainerProgress {
  std::size_t merges = 0;      // merges done so far
  std::size_t vocab_size = 0;  // tokens in the vocabulary so far
  std::size_t target = 0;      // requested size
};

// What add_file saw: its lines, and the ill-formed UTF-8 sequences in them (each read as
// U+FFFD, see basic_tokenizer.h) with the line of the first.
struct TrainingTextReport {
  std::size_t lines = 0;
  std::size_t ill_formed_utf8 = 0;
  std::size_t first_ill_formed_line = 0;
};

class WordPieceTrainer {
 public:
  explicit WordPieceTrainer(WordPieceTrainerOptions options = {});

  // Counts the words of a text; call as often as needed before train(). Words that hold
  // bytes which are not UTF-8 (a U+FFFD after normalisation) are left out and counted.
  void add_text(std::string_view text);
  // Streams a file through add_text (line by line). Throws if it cannot be read.
  TrainingTextReport add_file(const std::filesystem::path& path);

  std::size_t distinct_words() const { return word_counts_.size(); }
  std::uint64_t total_words() const { return total_words_; }
  std::uint64_t skipped_words() const { return skipped_words_; }

  // Learns the vocabulary: special tokens, then the alphabet (sorted by spelling), then the
  // merged pieces in the order they were learned. If the corpus has more distinct characters
  // than fit, the most frequent ones are kept and words with the others are left out. The
  // result can be smaller than requested when no pair is left to merge.
  // `progress` (optional) is called every `progress_every` merges and once at the end.
  Vocab train(const std::function<void(const WordPieceTrainerProgress&)>& progress = {},
              std::size_t progress_every = 1000) const;

 private:
  WordPieceTrainerOptions options_;
  BasicTokenizer basic_;
  std::unordered_map<std::string, std::uint64_t> word_counts_;
  std::uint64_t total_words_ = 0;
  std::uint64_t skipped_words_ = 0;
};

}  // namespace wedge::data
