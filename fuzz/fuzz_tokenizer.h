// The fixed tokenizer of the harnesses that need one (wordpiece, snli, wikitext).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "data/vocab.h"

namespace wedge::fuzz {

// A vocabulary small enough to read at a glance and rich enough to reach every branch of
// WordPiece: the special tokens, word-initial and "##" pieces of several lengths, accented,
// CJK and non-Latin pieces, punctuation, and WikiText's artifacts.
inline data::Tokenizer small_tokenizer(data::TokenizerOptions options = {}) {
  std::vector<std::string> tokens = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a",  "##a",   "b",    "##b",   "the", "##s", "##ing", "play",
      "un",    "##k",   "<",     ">",     "@",      "-",  ",",     ".",    "'",     "#",   "##x", "e",     "\u00e9",
      "\u4e2d", "\u00df", "\u03c3", "\u0645", "##\u0645", "i",  "##i", "\u0307", "1",   "##0", "man", "guitar",
      "person", "music", "is",  "plays", "##\u00e9", "\U0001F600", "x", "z"};
  return data::Tokenizer(data::Vocab::from_tokens(std::move(tokens), "<fuzz vocabulary>"), options);
}

// Every id a tokenizer gave lies inside its vocabulary.
inline bool ids_in_vocab(const std::vector<std::int32_t>& ids, const data::Tokenizer& tokenizer) {
  for (const std::int32_t id : ids)
    if (id < 0 || id >= tokenizer.vocab().size()) return false;
  return true;
}

}  // namespace wedge::fuzz
