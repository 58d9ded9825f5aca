// BERT's "basic" tokenizer: text normalisation followed by splitting into words. It is the
// first half of the BERT tokenizer; WordPiece (wordpiece.h) cuts each word into vocabulary
// pieces afterwards.
//
// The steps, in the order of the Hugging Face BertNormalizer and BertPreTokenizer:
//   1. clean:   delete NUL, U+FFFD and control/format characters; whitespace becomes a space
//   2. CJK:     put spaces around every CJK ideograph, so each becomes a one-character word
//   3. accents: canonical decomposition (NFD), then delete non-spacing marks (Mn)
//   4. case:    lower-case every character
//   5. split:   on whitespace (dropped) and around punctuation (kept, one character a word)
// Steps 3 and 4 follow the `lowercase` and `strip_accents` options (uncased BERT: both on).
//
// Bytes that are not UTF-8 are decoded as U+FFFD (see unicode.h), one per ill-formed
// sequence, and that U+FFFD stays in its word, which WordPiece then turns into [UNK] (no
// vocabulary wedge trains has a piece for U+FFFD). A U+FFFD written in the text (the bytes
// EF BF BD) is deleted by step 1, as in the reference. So the tokenizer never fails on any
// input, a damaged word is visibly unknown rather than silently shortened, and valid UTF-8 is
// tokenized exactly as by the reference (which cannot take anything else).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wedge::data {

struct NormalizerOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool lowercase = true;
  std::optional<bool> strip_accents;  // unset: follows `lowercase`, as in BERT
};

// Words stored back to back in one string, so splitting a whole corpus allocates only twice.
class WordList {
 public:
  std::size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::string_view operator[](std::size_t i) const {
    const std::size_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(chars_).substr(begin, ends_[i] - begin);
  }
  void clear() {
    chars_.clear();
    ends_.clear();
  }

 private:
  friend class BasicTokenizer;
  std::string chars_;
  std::vector<std::size_t> ends_;
};

class BasicTokenizer {
 public:
  explicit BasicTokenizer(NormalizerOptions options = {});

  // Appends the words of `text` to `words` (which is not cleared first).
  void split(std::string_view text, WordList& words) const;

  // Convenience form for tests and tools.
  std::vector<std::string> split(std::string_view text) const;

  // Only the normalisation (steps 1-4), as one string; for inspection and tests.
  std::string normalize(std::string_view text) const;

  const NormalizerOptions& options() const { return options_; }

 private:
  NormalizerOptions options_;
  bool strip_accents_;
};

}  // namespace wedge::data
