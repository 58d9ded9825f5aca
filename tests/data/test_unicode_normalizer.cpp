// Character classes, the UTF-8 replacement policy and BERT normalisation / word splitting,
// checked on hand-worked cases (expected values from the Unicode standard and from the
// reference tokenizer's behaviour as documented in data/unicode.h).
#include <doctest/doctest.h>

#include <iterator>
#include <string>
#include <vector>

#include "data/basic_tokenizer.h"
#include "data/unicode.h"

using namespace wedge::data;
namespace uc = wedge::data::unicode;

namespace {

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto d = uc::decode_utf8(p + i, s.size() - i);
    out.push_back(d.code_point);
    i += d.length;
  }
  return out;
}

using Words = std::vector<std::string>;

// A string literal with embedded NULs kept.
template <std::size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

}  // namespace

TEST_CASE("decode_utf8 decodes every encoding length") {
  const std::string s = "a\u00e9\u20ac\U0001F600";
  CHECK(code_points(s) == std::vector<char32_t>{'a', 0xE9, 0x20AC, 0x1F600});
  std::string round;
  for (char32_t c : code_points(s)) uc::append_utf8(round, c);
  CHECK(round == s);
}

TEST_CASE("ill-formed UTF-8 becomes U+FFFD per maximal subpart") {
  // Same counts as Python's bytes.decode("utf-8", errors="replace").
  CHECK(code_points("a\xff" "b") == std::vector<char32_t>{'a', 0xFFFD, 'b'});
  CHECK(code_points("\xc0\x80") == std::vector<char32_t>{0xFFFD, 0xFFFD});          // overlong NUL
  CHECK(code_points("\xed\xa0\x80") == std::vector<char32_t>{0xFFFD, 0xFFFD, 0xFFFD});  // surrogate
  CHECK(code_points("\xf4\x90\x80\x80") == std::vector<char32_t>(4, 0xFFFD));        // above U+10FFFF
  CHECK(code_points("\xe2\x82") == std::vector<char32_t>{0xFFFD});                   // truncated: one subpart
  CHECK(code_points("\xe2\x82" "x") == std::vector<char32_t>{0xFFFD, 'x'});
  CHECK(code_points("\xf0\x9f\x98") == std::vector<char32_t>{0xFFFD});
  CHECK(uc::to_valid_utf8("ok\x80") == "ok\ufffd");
  CHECK(uc::is_valid_utf8("caf\u00e9 \ufffd"));
  CHECK_FALSE(uc::is_valid_utf8("caf\xe9"));
}

TEST_CASE("ill-formed sequences are told from a U+FFFD in the text, counted, and the first one found") {
  const auto* genuine = reinterpret_cast<const unsigned char*>("\xef\xbf\xbd");
  CHECK_FALSE(uc::decode_utf8(genuine, 3).ill_formed);
  const auto* cut = reinterpret_cast<const unsigned char*>("\xef\xbf");
  CHECK(uc::decode_utf8(cut, 2).ill_formed);
  CHECK(uc::decode_utf8(cut, 2).code_point == 0xFFFD);

  CHECK(uc::find_ill_formed_utf8("plain ascii \ufffd caf\u00e9").count == 0);
  const uc::IllFormedUtf8 latin1 = uc::find_ill_formed_utf8("ok\ncaf\xe9 na\xefve");
  CHECK(latin1.count == 2);
  CHECK(latin1.first_offset == 6);
  // one per maximal subpart, as decode_utf8 replaces them
  CHECK(uc::find_ill_formed_utf8("\xed\xa0\x80").count == 3);
  CHECK(uc::find_ill_formed_utf8("\xe2\x82" "x\xf0\x9f\x98").count == 2);
}

TEST_CASE("character classes follow the reference tokenizer") {
  // whitespace: Unicode White_Space (Rust's char::is_whitespace)
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', char32_t(0x0B), char32_t(0x85), char32_t(0xA0), char32_t(0x2028),
                     char32_t(0x2029), char32_t(0x3000), char32_t(0x202F)})
    CHECK(uc::is_whitespace(c));
  for (char32_t c : {U'a', char32_t(0x200B), char32_t(0x180E), char32_t(0x1C)}) CHECK_FALSE(uc::is_whitespace(c));

  // control: Cc, Cf, Co but not \t \n \r and not unassigned code points
  for (char32_t c : {char32_t(0x00), char32_t(0x07), char32_t(0x7F), char32_t(0x200B), char32_t(0xFEFF),
                     char32_t(0x00AD), char32_t(0xE000), char32_t(0xF0000)})
    CHECK(uc::is_control(c));
  for (char32_t c : {U'\t', U'\n', U'\r', U'a', char32_t(0x0378), char32_t(0x0890)}) CHECK_FALSE(uc::is_control(c));

  // punctuation: the ASCII symbol ranges plus Unicode P*
  for (char32_t c : {U'!', U'$', U'+', U'<', U'^', U'`', U'|', U'~', char32_t(0xA7), char32_t(0x2014),
                     char32_t(0x201C), char32_t(0x3001), char32_t(0x166D), char32_t(0x111C9)})
    CHECK(uc::is_punctuation(c));
  for (char32_t c : {U'a', U'0', U' ', char32_t(0x20AC), char32_t(0xA9), char32_t(0x061D), char32_t(0x2E52)})
    CHECK_FALSE(uc::is_punctuation(c));

  // CJK: BERT's blocks, with the reference's Extension E start
  for (char32_t c : {char32_t(0x4E2D), char32_t(0x3400), char32_t(0x20000), char32_t(0xF900), char32_t(0x2B920),
                     char32_t(0x2F800)})
    CHECK(uc::is_cjk_ideograph(c));
  for (char32_t c : {char32_t(0x3042), char32_t(0x30AB), char32_t(0xAC00), char32_t(0x2B820), char32_t(0x3007)})
    CHECK_FALSE(uc::is_cjk_ideograph(c));

  // non-spacing marks, as of Unicode 8.0 where the answer has changed since
  CHECK(uc::is_nonspacing_mark(0x0301));
  CHECK(uc::is_nonspacing_mark(0x1734));      // Mn in 8.0, Mc today
  CHECK_FALSE(uc::is_nonspacing_mark(0x07FD));  // assigned in 11.0
  CHECK_FALSE(uc::is_nonspacing_mark(0x0903));  // Mc
}

TEST_CASE("canonical decomposition and lower-casing") {
  char32_t out[8];
  REQUIRE(uc::canonical_decomposition(0x1EAD, out) == 3);  // ậ = a + dot below + circumflex
  CHECK(out[0] == U'a');
  CHECK(out[1] == 0x0323);
  CHECK(out[2] == 0x0302);
  REQUIRE(uc::canonical_decomposition(0xAC00, out) == 2);  // 가 = ᄀ + ᅡ
  CHECK(out[0] == 0x1100);
  CHECK(out[1] == 0x1161);
  REQUIRE(uc::canonical_decomposition(0xF900, out) == 1);  // compatibility ideograph → unified
  CHECK(out[0] == 0x8C48);
  REQUIRE(uc::canonical_decomposition(0x11938, out) == 1);  // decomposable only since Unicode 13
  CHECK(out[0] == 0x11938);
  CHECK(uc::combining_class(0x0301) == 230);
  CHECK(uc::combining_class(0x0323) == 220);

  char32_t lower[2];
  REQUIRE(uc::to_lower_full(0x130, lower) == 2);
  CHECK(lower[0] == U'i');
  CHECK(lower[1] == 0x307);
  REQUIRE(uc::to_lower_full(0x3A3, lower) == 1);
  CHECK(lower[0] == 0x3C3);
  REQUIRE(uc::to_lower_full(U'Z', lower) == 1);
  CHECK(lower[0] == U'z');
}

TEST_CASE("uncased BERT normalisation") {
  const BasicTokenizer bert;
  CHECK(bert.normalize("H\u00e9llo, W\u00f6rld!") == "hello, world!");
  CHECK(bert.normalize("\u00c5NGSTR\u00d6M") == "angstrom");
  CHECK(bert.normalize("\u4e2d\u56fd") == " \u4e2d  \u56fd ");  // each ideograph padded with spaces
  CHECK(bert.normalize("a\tb\nc\u00a0d") == "a b c d");           // whitespace becomes a space
  CHECK(bert.normalize(bytes("a\x00" "b\x07" "c\u200bd\ufeff")) == "abcd");  // deleted
  CHECK(bert.normalize("x\xff" "y") == "x\ufffdy");  // a bad byte is a U+FFFD that stays in its word
  CHECK(bert.normalize("x\ufffdy") == "xy");          // a U+FFFD in the text is deleted, as by the reference
  CHECK(bert.normalize("\u0130") == "i");           // İ: decomposed, dot dropped, lower-cased
  CHECK(bert.normalize("\u1e9e\u00df") == "\u00df\u00df");  // ẞ lower-cases to ß, which stays
  CHECK(bert.normalize("\uff21") == "\uff41");      // full-width letters are not folded (no NFKC)
  // canonical reordering sees through deleted characters: 1D16D (ccc 226) after 1D165 (ccc 216)
  CHECK(bert.normalize("x\U0001D16D\u200b\U0001D165y") == "x\U0001D165\U0001D16Dy");
}

TEST_CASE("cased options keep what uncased BERT removes") {
  NormalizerOptions cased;
  cased.lowercase = false;  // strip_accents follows: off
  CHECK(BasicTokenizer(cased).normalize("H\u00e9llo \u0130") == "H\u00e9llo \u0130");

  NormalizerOptions lower_only;
  lower_only.strip_accents = false;
  CHECK(BasicTokenizer(lower_only).normalize("\u0130X\u00c9") == "i\u0307x\u00e9");  // full lower-case mapping

  NormalizerOptions strip_only;
  strip_only.lowercase = false;
  strip_only.strip_accents = true;
  CHECK(BasicTokenizer(strip_only).normalize("H\u00e9LLO") == "HeLLO");

  NormalizerOptions raw;
  raw.clean_text = false;
  raw.handle_chinese_chars = false;
  CHECK(BasicTokenizer(raw).split("a\x07" "b\u4e2d\u56fd") == Words{"a\x07" "b\u4e2d\u56fd"});
}

TEST_CASE("splitting on whitespace and punctuation") {
  const BasicTokenizer bert;
  CHECK(bert.split("Hello, world!") == Words{"hello", ",", "world", "!"});
  CHECK(bert.split("  many   spaces  ") == Words{"many", "spaces"});
  CHECK(bert.split("e-mail $5.00 (a|b)") == Words{"e", "-", "mail", "$", "5", ".", "00", "(", "a", "|", "b", ")"});
  CHECK(bert.split("don't") == Words{"don", "'", "t"});
  CHECK(bert.split("\u201cquoted\u201d\u2014dash") == Words{"\u201c", "quoted", "\u201d", "\u2014", "dash"});
  CHECK(bert.split("\u4e2d\u56fd\u4eba") == Words{"\u4e2d", "\u56fd", "\u4eba"});
  CHECK(bert.split("ab\u4e2dcd") == Words{"ab", "\u4e2d", "cd"});
  CHECK(bert.split("x\u2028y\u3000z") == Words{"x", "y", "z"});
  CHECK(bert.split("\u00e9\u0301\u0301") == Words{"e"});
  CHECK(bert.split("").empty());
  CHECK(bert.split(" \t\n").empty());
}

// The capital letters added in Unicode 16 and 17, which utf8proc 2.8 does not know. Each
// expected value was recorded from the reference tokenizer (BertNormalizer with accent
// stripping and lower-casing, then BertPreTokenizer) run on the character alone: one word of
// one character, the lower-case letter below.
TEST_CASE("capital letters newer than utf8proc are lower-cased as by the reference") {
  struct Recorded {
    char32_t capital, reference_lower;
  };
  constexpr Recorded kRecorded[] = {
      {0x1C89, 0x1C8A}, {0xA7CB, 0x0264}, {0xA7CC, 0xA7CD}, {0xA7CE, 0xA7CF}, {0xA7D2, 0xA7D3},
      {0xA7D4, 0xA7D5}, {0xA7DA, 0xA7DB}, {0xA7DC, 0x019B}, {0x10D50, 0x10D70}, {0x10D51, 0x10D71},
      {0x10D52, 0x10D72}, {0x10D53, 0x10D73}, {0x10D54, 0x10D74}, {0x10D55, 0x10D75}, {0x10D56, 0x10D76},
      {0x10D57, 0x10D77}, {0x10D58, 0x10D78}, {0x10D59, 0x10D79}, {0x10D5A, 0x10D7A}, {0x10D5B, 0x10D7B},
      {0x10D5C, 0x10D7C}, {0x10D5D, 0x10D7D}, {0x10D5E, 0x10D7E}, {0x10D5F, 0x10D7F}, {0x10D60, 0x10D80},
      {0x10D61, 0x10D81}, {0x10D62, 0x10D82}, {0x10D63, 0x10D83}, {0x10D64, 0x10D84}, {0x10D65, 0x10D85},
      {0x16EA0, 0x16EBB}, {0x16EA1, 0x16EBC}, {0x16EA2, 0x16EBD}, {0x16EA3, 0x16EBE}, {0x16EA4, 0x16EBF},
      {0x16EA5, 0x16EC0}, {0x16EA6, 0x16EC1}, {0x16EA7, 0x16EC2}, {0x16EA8, 0x16EC3}, {0x16EA9, 0x16EC4},
      {0x16EAA, 0x16EC5}, {0x16EAB, 0x16EC6}, {0x16EAC, 0x16EC7}, {0x16EAD, 0x16EC8}, {0x16EAE, 0x16EC9},
      {0x16EAF, 0x16ECA}, {0x16EB0, 0x16ECB}, {0x16EB1, 0x16ECC}, {0x16EB2, 0x16ECD}, {0x16EB3, 0x16ECE},
      {0x16EB4, 0x16ECF}, {0x16EB5, 0x16ED0}, {0x16EB6, 0x16ED1}, {0x16EB7, 0x16ED2}, {0x16EB8, 0x16ED3},
  };
  static_assert(std::size(kRecorded) == 55);

  const BasicTokenizer bert;
  NormalizerOptions lower_only;
  lower_only.strip_accents = false;
  const BasicTokenizer bert_lower_only(lower_only);
  for (const Recorded& r : kRecorded) {
    CAPTURE(static_cast<unsigned>(r.capital));
    std::string capital, lower;
    uc::append_utf8(capital, r.capital);
    uc::append_utf8(lower, r.reference_lower);

    char32_t out[2];
    REQUIRE(uc::to_lower_full(r.capital, out) == 1);
    CHECK(out[0] == r.reference_lower);
    // Nothing in NFD or accent stripping touches these letters, in either direction.
    REQUIRE(uc::canonical_decomposition(r.capital, out) == 1);
    CHECK(out[0] == r.capital);
    CHECK(uc::combining_class(r.capital) == 0);
    CHECK_FALSE(uc::is_nonspacing_mark(r.capital));
    CHECK(bert.split(capital) == Words{lower});
    CHECK(bert_lower_only.split(capital) == Words{lower});
    // Already lower-case: unchanged (the reference gives the same character back).
    CHECK(bert.split(lower) == Words{lower});
  }

  // Neighbours of the table rows, recorded from the reference the same way: capitals that
  // utf8proc already maps, small letters, and unassigned code points stay as they should.
  CHECK(bert.normalize("\ua7d0") == "\ua7d1");                // LATIN CAPITAL LETTER CLOSED INSULAR G (14.0)
  CHECK(bert.normalize("\ua7dd") == "\ua7dd");                // outside the rows
  CHECK(bert.normalize("\U00010d4f\U00010d66") == "\U00010d4f\U00010d66");
  CHECK(bert.normalize("\U00016e9f\U00016eb9\U00016eba") == "\U00016e9f\U00016eb9\U00016eba");

  // In context, with accents to strip, as recorded from the reference.
  CHECK(bert.split("\u00c0B\ua7cb\u0301\u00c9D\u0264\u030a\ua7cb\u200b") == Words{"ab\u0264ed\u0264\u0264"});
  CHECK(bert.split("\ua7dc\ua7dc. \ua7dc\u4e2d\ua7dc") == Words{"\u019b\u019b", ".", "\u019b", "\u4e2d", "\u019b"});
  CHECK(bert.split("\U00010d50\u0323\u0301\u0308-\U00016ea0\u0301") == Words{"\U00010d70", "-", "\U00016ebb"});
}
