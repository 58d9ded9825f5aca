// Random bytes and mangled text into the tokenizer and the SNLI JSONL parser: nothing may
// crash, the tokenizer's output must keep its invariants, and the parser may only answer
// with rows or a std::runtime_error naming the line.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/basic_tokenizer.h"
#include "data/snli.h"
#include "data/tokenizer.h"
#include "data/unicode.h"

using namespace wedge::data;

namespace {

std::string random_bytes(std::mt19937_64& rng, std::size_t max_length) {
  std::string s(rng() % (max_length + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

// Text built from characters that stress each step: marks, CJK, controls, odd spaces,
// punctuation, special-token spellings, broken UTF-8.
std::string random_tricky_text(std::mt19937_64& rng) {
  static const std::vector<std::string> pieces = {
      "a", "Z", " ", "\t", "\n", "\r\n", ".", ",", "'", "[CLS]", "[SEP", "[MASK]", "##", "\u00e9", "e\u0301",
      "\u0323\u0302", "\u4e2d", "\uf900", "\U00020000", "\u3000", "\u2028", "\u00a0", "\u200b", "\ufeff",
      "\ufffd", "\u0130", "\u03a3", "\u00df", "\U0001F600", "\u200d", "\ufe0f", "\u0645", "\u05b8", "\u094d",
      "\uac00", "\uff21", "\x01", std::string(1, '\0'), "\x7f", "\xc2\x85", "\xff", "\xe2\x82", "\xed\xa0\x80",
      "\xf4\x90\x80\x80", "\xc0\xaf", std::string(120, 'x')};
  std::string s;
  const std::size_t n = rng() % 40;
  for (std::size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
  return s;
}

void check_tokenizer_invariants(const BasicTokenizer& basic, const Tokenizer& tokenizer, const std::string& text) {
  const std::vector<std::string> words = basic.split(text);
  for (const std::string& w : words) {
    REQUIRE_FALSE(w.empty());
    REQUIRE(unicode::is_valid_utf8(w));
    // no whitespace inside a word, and a punctuation character is always a word by itself
    const auto* p = reinterpret_cast<const unsigned char*>(w.data());
    std::size_t i = 0, chars = 0;
    bool has_punctuation = false;
    while (i < w.size()) {
      const auto d = unicode::decode_utf8(p + i, w.size() - i);
      REQUIRE_FALSE(unicode::is_whitespace(d.code_point));
      has_punctuation |= unicode::is_punctuation(d.code_point);
      ++chars;
      i += d.length;
    }
    if (has_punctuation) REQUIRE(chars == 1);
  }
  // the replacement policy: each ill-formed sequence leaves exactly one U+FFFD in the words
  // (a U+FFFD written in the text is deleted), and a word holding one is [UNK]
  std::size_t replacements = 0;
  for (const std::string& w : words)
    for (std::size_t at = w.find(unicode::kReplacementUtf8); at != std::string::npos;
         at = w.find(unicode::kReplacementUtf8, at + 1))
      ++replacements;
  const std::size_t ill_formed = unicode::find_ill_formed_utf8(text).count;
  REQUIRE(replacements == ill_formed);

  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  for (const std::int32_t id : ids) REQUIRE((id >= 0 && id < tokenizer.vocab().size()));
  if (ill_formed > 0) REQUIRE(std::count(ids.begin(), ids.end(), tokenizer.vocab().unk_id()) > 0);
  (void)tokenizer.decode(ids);
  const Encoding pair = tokenizer.encode_pair(text, text, 16);
  REQUIRE(pair.ids.size() <= 16);
  REQUIRE(pair.ids.size() == pair.type_ids.size());
}

Tokenizer small_tokenizer() {
  return Tokenizer(Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a", "x", "##x", "e",
                                       "\u4e2d", ".", ",", "'", "#", "z", "\u00df", "\u03c3", "i"}));
}

}  // namespace

TEST_CASE("random bytes never break the tokenizer") {
  std::mt19937_64 rng(20240611);
  const BasicTokenizer basic;
  const Tokenizer tokenizer = small_tokenizer();
  for (int i = 0; i < 3000; ++i) {
    const std::string text = random_bytes(rng, 64);
    CAPTURE(i);
    check_tokenizer_invariants(basic, tokenizer, text);
  }
}

TEST_CASE("random tricky text never breaks the tokenizer") {
  std::mt19937_64 rng(7);
  const BasicTokenizer basic;
  const Tokenizer tokenizer = small_tokenizer();
  for (int i = 0; i < 3000; ++i) {
    const std::string text = random_tricky_text(rng);
    CAPTURE(i);
    check_tokenizer_invariants(basic, tokenizer, text);
    // cased variants go through the other branches
    NormalizerOptions cased;
    cased.lowercase = false;
    REQUIRE_NOTHROW(BasicTokenizer(cased).split(text));
    NormalizerOptions raw;
    raw.clean_text = false;
    raw.handle_chinese_chars = false;
    REQUIRE_NOTHROW(BasicTokenizer(raw).split(text));
  }
}

TEST_CASE("random and mangled JSONL gives rows or a file:line error, nothing else") {
  std::mt19937_64 rng(99);
  const std::string good = R"({"gold_label": "neutral", "sentence1": "A man.", "sentence2": "A person."})";
  std::size_t parsed = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    switch (i % 3) {
      case 0: text = random_bytes(rng, 200); break;
      case 1: {  // a valid line with a few bytes changed, inserted or removed
        text = good;
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
          const std::size_t at = rng() % text.size();
          switch (rng() % 3) {
            case 0: text[at] = static_cast<char>(rng() & 0xFF); break;
            case 1: text.insert(at, 1, static_cast<char>(rng() & 0xFF)); break;
            default: text.erase(at, 1); break;
          }
        }
        break;
      }
      default: text = good + "\n" + random_bytes(rng, 30) + "\n" + good; break;
    }
    std::istringstream in(text);
    try {
      const SnliFile f = parse_snli(in, "fuzz.jsonl", SnliFormat::kJsonl);
      REQUIRE(f.rows >= 1);
      ++parsed;
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()).starts_with("fuzz.jsonl"));
      ++rejected;
    }
    std::istringstream tsv(text);
    try {
      (void)parse_snli(tsv, "fuzz.txt", SnliFormat::kTsv);
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()).starts_with("fuzz.txt"));
    }
  }
  CHECK(parsed > 0);
  CHECK(rejected > 0);
}
