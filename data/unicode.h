// The character classes the BERT tokenizer is defined by, answered from utf8proc's Unicode
// tables, plus a UTF-8 decoder with an explicit policy for bytes that are not UTF-8.
//
// "BERT-compatible" here means: identical to the Hugging Face `tokenizers` library
// (BertNormalizer + BertPreTokenizer), which is what bert-base-uncased users actually run.
// Where that library's Rust definitions differ from the original Python BERT code, the Rust
// definition wins; each function says which one it follows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace wedge::data::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;
inline constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// One decoded code point and the number of bytes it consumed (always >= 1). `ill_formed`
// tells a U+FFFD that stands for bad bytes from a U+FFFD written in the text (EF BF BD).
struct DecodedChar {
  char32_t code_point;
  std::size_t length;
  bool ill_formed = false;
};

// Decodes the code point starting at `bytes` (size >= 1). Ill-formed input follows the
// Unicode "maximal subpart" practice (the same as Python's errors="replace" and Rust's
// from_utf8_lossy): the longest prefix that could start a valid sequence becomes one
// U+FFFD. Overlong forms, surrogates and values above U+10FFFF are ill-formed.
DecodedChar decode_utf8(const unsigned char* bytes, std::size_t size);

// Appends the UTF-8 encoding of a valid code point.
void append_utf8(std::string& out, char32_t code_point);

// The text with every ill-formed UTF-8 sequence replaced by U+FFFD.
std::string to_valid_utf8(std::string_view text);
bool is_valid_utf8(std::string_view text);

// The ill-formed sequences of a text, each one what decode_utf8 turns into one U+FFFD: how
// many, and the byte offset of the first (meaningful only when count > 0).
struct IllFormedUtf8 {
  std::size_t count = 0;
  std::size_t first_offset = 0;
};
IllFormedUtf8 find_ill_formed_utf8(std::string_view text);

// Rust's char::is_whitespace, i.e. the Unicode White_Space property: the Zs, Zl and Zp
// categories plus U+0009..U+000D and U+0085. (Python BERT used only Zs plus \t \n \r.)
bool is_whitespace(char32_t c);

// Category questions (control, punctuation, non-spacing mark) are answered as the reference
// answers them: from Unicode 8.0 data. utf8proc carries a newer Unicode; the few hundred code
// points whose answer changed since 8.0 are listed in unicode.cpp and answered the old way.
// Unassigned code points (Cn) are ordinary word characters, as in the reference.

// BertNormalizer's "control": the Unicode categories Cc, Cf and Co except \t \n \r, which
// it counts as whitespace. Cleaning deletes these.
bool is_control(char32_t c);

// BertPreTokenizer's punctuation: the ASCII symbol ranges 33-47, 58-64, 91-96, 123-126
// (so $ + < = > ^ ` | ~ count although Unicode calls them symbols) and every Unicode P*
// category.
bool is_punctuation(char32_t c);

// The CJK Unified Ideograph blocks BERT isolates into one-character words. (Hangul, kana
// and other scripts are not in them: they are written with spaces.) The ranges are the
// reference's, which differ from BERT's in one place (see unicode.cpp).
bool is_cjk_ideograph(char32_t c);

// Unicode category Mn (what strip_accents removes after NFD).
bool is_nonspacing_mark(char32_t c);

// Canonical combining class (0 for starters), used to put combining marks in canonical order.
int combining_class(char32_t c);

// Full canonical decomposition (NFD of a single character, recursively, Hangul included),
// written to `out`; returns the number of code points (at most 4 for any Unicode character,
// the buffer holds 8).
int canonical_decomposition(char32_t c, char32_t out[8]);

// Lower-case mapping of one character. utf8proc gives the simple (1:1) mapping; Rust's
// char::to_lowercase, which the reference uses, gives the full mapping, and the two differ
// only for U+0130 (İ → "i" + U+0307). The tokenizer never lower-cases U+0130 itself: when
// accents are stripped it is decomposed first, and otherwise this function expands it, so
// both paths agree with the reference. The 55 capital letters added in Unicode 16 and 17,
// which utf8proc does not know, are lower-cased from a small table (see unicode.cpp).
// Writes 1 or 2 code points to `out` and returns how many.
int to_lower_full(char32_t c, char32_t out[2]);

}  // namespace wedge::data::unicode
