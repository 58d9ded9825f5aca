// The BERT WordPiece tokenizer: text → token ids and back, identical to the Hugging Face
// `tokenizers` library's bert-base-uncased.
//
// encode() runs three stages:
//   1. special tokens written in the text ("[CLS]", "[SEP]", ... exactly so spelled) are cut
//      out first and map straight to their ids, as the reference's added-token matching does;
//   2. the basic tokenizer (basic_tokenizer.h) normalises the rest and splits it into words;
//   3. WordPiece cuts every word into vocabulary pieces: greedy longest match first, pieces
//      after the first looked up with the "##" prefix. A word with no complete cut, or longer
//      than 100 characters, becomes one [UNK].
//
// Start reading at Tokenizer::encode_append in tokenizer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/basic_tokenizer.h"
#include "data/vocab.h"

namespace wedge::data {

inline constexpr std::string_view kContinuingPrefix = "##";

struct TokenizerOptions {
  NormalizerOptions normalizer;  // defaults: uncased BERT
  std::size_t max_input_chars_per_word = 100;
  // "[CLS]" etc. written in the input are the special tokens, not text (the reference's
  // default). Turn off to tokenize such strings as ordinary text: "[", "cl", "##s", "]".
  bool match_special_tokens = true;
};

// One encoded sequence with its segment ("token type") ids: 0 for the first sentence and
// its [CLS]/[SEP], 1 for the second sentence and its final [SEP].
struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::int32_t> type_ids;
  std::size_t size() const { return ids.size(); }
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // The reference's WordPiece decoder clean-up: no space before . , ! ? (on by default there).
  bool cleanup = true;
};

// How many tokens of a pair to keep so that a + b fits in `budget`: the reference's
// "longest first" rule. Only the longer sequence loses tokens while the shorter one fits in
// half the budget; otherwise each gets half and the longer one (the second on a tie) the odd
// token. Returns the kept lengths. (tokenizers 0.23 and later stop tokenizing each sequence
// after max_length words before applying this rule, which changes the split in rare cases
// where a sentence has more words than max_length; this is the rule of all earlier releases.)
std::pair<std::size_t, std::size_t> truncate_pair_longest_first(std::size_t length_a, std::size_t length_b,
                                                                std::size_t budget);

class Tokenizer {
 public:
  // Throws std::runtime_error when the vocabulary has no [UNK] token.
  explicit Tokenizer(Vocab vocab, TokenizerOptions options = {});
  static Tokenizer from_file(const std::filesystem::path& vocab_txt, TokenizerOptions options = {});

  // Ids of `text` with no special tokens added.
  std::vector<std::int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<std::int32_t>& ids) const;

  // The token strings encode() would give ids for.
  std::vector<std::string> tokenize(std::string_view text) const;

  // [CLS] text [SEP], with the text cut so the whole has at most max_length tokens
  // (0 = no limit; otherwise max_length must be at least 2).
  Encoding encode_single(std::string_view text, std::size_t max_length = 0) const;

  // [CLS] a [SEP] b [SEP] with segment ids, at most max_length tokens (0 = no limit;
  // otherwise at least 3), cut longest first.
  Encoding encode_pair(std::string_view a, std::string_view b, std::size_t max_length = 0) const;

  // Many texts at once, spread over `threads` threads (0 = all cores); the result is the
  // same as encoding them one by one.
  std::vector<Encoding> encode_batch(std::span<const std::string> texts, std::size_t max_length = 0,
                                     unsigned threads = 1) const;
  std::vector<Encoding> encode_pair_batch(std::span<const std::pair<std::string, std::string>> pairs,
                                          std::size_t max_length = 0, unsigned threads = 1) const;

  // Ids back to text: pieces with "##" are glued to the previous token, other tokens are
  // separated by a space. Lower-casing and accent stripping cannot be undone.
  std::string decode(std::span<const std::int32_t> ids, const DecodeOptions& options = {}) const;

  std::vector<std::string> id_to_tokens(std::span<const std::int32_t> ids) const;

  const Vocab& vocab() const { return vocab_; }
  const BasicTokenizer& basic_tokenizer() const { return basic_; }
  const TokenizerOptions& options() const { return options_; }
  bool is_special(std::int32_t id) const;

  // WordPiece on one already-normalised word (exposed for tests and the trainer).
  void wordpiece(std::string_view word, std::vector<std::int32_t>& ids) const;

 private:
  struct PieceTable {
    struct Hash {
      using is_transparent = void;
      std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> ids;
    std::size_t max_bytes = 0;
    std::int32_t find(std::string_view piece) const {
      const auto it = ids.find(piece);
      return it == ids.end() ? -1 : it->second;
    }
    void insert(std::string_view piece, std::int32_t id);
  };

  void encode_text_part(std::string_view text, std::vector<std::int32_t>& ids, WordList& words) const;

  Vocab vocab_;
  TokenizerOptions options_;
  BasicTokenizer basic_;
  PieceTable word_start_;    // every token, as spelled
  PieceTable continuation_;  // "##" tokens, without the prefix
  std::vector<std::pair<std::string, std::int32_t>> specials_;  // present special tokens
};

}  // namespace wedge::data
