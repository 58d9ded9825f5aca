#include "data/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>

namespace wedge::data::unicode {

namespace {

// The reference library answers "is this a control character / punctuation / a
// non-spacing mark" from a Unicode 8.0 table, while utf8proc carries Unicode 15. The
// characters where that matters are the ones assigned (or re-categorised) after 8.0 whose
// category today is P*, Cf or Mn, and U+11938, whose decomposition is newer than the
// reference's normalisation tables: the reference sees them as unassigned, i.e. as ordinary
// word characters with no decomposition and combining class 0. This list is exactly those
// code points, found by running every code point through the reference normaliser and
// pre-tokenizer and comparing with utf8proc's answers. It is a compatibility list, not a
// Unicode table: every other question still goes to utf8proc.
struct CodePointRange {
  char32_t first, last;
};
constexpr CodePointRange kUnassignedInReference[] = {
    {0x061D, 0x061D}, {0x07FD, 0x07FD}, {0x0890, 0x0891}, {0x0898, 0x089F}, {0x08CA, 0x08E2},
    {0x09FD, 0x09FE}, {0x0A76, 0x0A76}, {0x0AFA, 0x0AFF}, {0x0B55, 0x0B55}, {0x0C04, 0x0C04},
    {0x0C3C, 0x0C3C}, {0x0C77, 0x0C77}, {0x0C84, 0x0C84}, {0x0D00, 0x0D00}, {0x0D3B, 0x0D3C},
    {0x0D81, 0x0D81}, {0x0EBA, 0x0EBA}, {0x0ECE, 0x0ECE}, {0x180F, 0x180F}, {0x1885, 0x1886},
    {0x1ABF, 0x1ACE}, {0x1B7D, 0x1B7E}, {0x1DF6, 0x1DFB}, {0x2E43, 0x2E4F}, {0x2E52, 0x2E5D},
    {0xA82C, 0xA82C}, {0xA8C5, 0xA8C5}, {0xA8FF, 0xA8FF}, {0xA9BD, 0xA9BD}, {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAD}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F55, 0x10F59},
    {0x10F82, 0x10F89}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110C2, 0x110C2},
    {0x110CD, 0x110CD}, {0x111CF, 0x111CF}, {0x1123E, 0x1123E}, {0x11241, 0x11241},
    {0x1133B, 0x1133B}, {0x11438, 0x1143F}, {0x11442, 0x11444}, {0x11446, 0x11446},
    {0x1144B, 0x1144F}, {0x1145A, 0x1145B}, {0x1145D, 0x1145E}, {0x11660, 0x1166C},
    {0x116B9, 0x116B9}, {0x1182F, 0x11837}, {0x11839, 0x1183B}, {0x11938, 0x11938},
    {0x1193B, 0x1193C}, {0x1193E, 0x1193E}, {0x11943, 0x11946}, {0x119D4, 0x119D7},
    {0x119DA, 0x119DB}, {0x119E0, 0x119E0}, {0x119E2, 0x119E2}, {0x11A01, 0x11A0A},
    {0x11A33, 0x11A38}, {0x11A3B, 0x11A47}, {0x11A51, 0x11A56}, {0x11A59, 0x11A5B},
    {0x11A8A, 0x11A96}, {0x11A98, 0x11A9C}, {0x11A9E, 0x11AA2}, {0x11B00, 0x11B09},
    {0x11C30, 0x11C36}, {0x11C38, 0x11C3D}, {0x11C3F, 0x11C3F}, {0x11C41, 0x11C45},
    {0x11C70, 0x11C71}, {0x11C92, 0x11CA7}, {0x11CAA, 0x11CB0}, {0x11CB2, 0x11CB3},
    {0x11CB5, 0x11CB6}, {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D},
    {0x11D3F, 0x11D45}, {0x11D47, 0x11D47}, {0x11D90, 0x11D91}, {0x11D95, 0x11D95},
    {0x11D97, 0x11D97}, {0x11EF3, 0x11EF4}, {0x11EF7, 0x11EF8}, {0x11F00, 0x11F01},
    {0x11F36, 0x11F3A}, {0x11F40, 0x11F40}, {0x11F42, 0x11F4F}, {0x11FFF, 0x11FFF},
    {0x12FF1, 0x12FF2}, {0x13430, 0x13440}, {0x13447, 0x13455}, {0x16E97, 0x16E9A},
    {0x16F4F, 0x16F4F}, {0x16FE2, 0x16FE2}, {0x16FE4, 0x16FE4}, {0x1CF00, 0x1CF2D},
    {0x1CF30, 0x1CF46}, {0x1E000, 0x1E006}, {0x1E008, 0x1E018}, {0x1E01B, 0x1E021},
    {0x1E023, 0x1E024}, {0x1E026, 0x1E02A}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1E944, 0x1E94A},
    {0x1E95E, 0x1E95F},
};

// Three characters changed category between Unicode 8.0 and 15.0 in a way that matters:
// U+166D CANADIAN SYLLABICS CHI SIGN and U+111C9 SHARADA SANDHI MARK were punctuation (Po),
// U+1734 HANUNOO SIGN PAMUDPOD was a non-spacing mark (Mn).
constexpr char32_t kPunctuationInReference[] = {0x166D, 0x111C9};
constexpr char32_t kNonspacingMarkInReference = 0x1734;

// For lower-casing the gap runs the other way: the reference uses Rust's char::to_lowercase,
// whose tables are newer than utf8proc 2.8 (Unicode 15.0), which predates Unicode 16. The
// reference (tokenizers 0.23) lower-cases 55 capital letters that utf8proc does not know: 27 new in Unicode 16 (U+1C89 Cyrillic TJE,
// four Latin letters, the 22 of Garay) and 28 new in Unicode 17 (three Latin letters, the 25
// of Beria Erfe). This list is exactly those case pairs, found by lower-casing every code
// point with the reference normaliser and comparing with utf8proc; every other character is
// lower-cased by utf8proc. None of these letters decomposes, is a mark, or lower-cases to
// more than one character, in the reference or in utf8proc, so the table is the whole fix.
// Each row maps first..last onto lower_first.. one to one.
struct CaseMapping {
  char32_t first, last, lower_first;
};
constexpr CaseMapping kLowercaseNewerThanUtf8proc[] = {
    {0x1C89, 0x1C89, 0x1C8A},    // CYRILLIC CAPITAL LETTER TJE (16)
    {0xA7CB, 0xA7CB, 0x0264},    // LATIN CAPITAL LETTER RAMS HORN -> U+0264 (16)
    {0xA7CC, 0xA7CC, 0xA7CD},    // LATIN CAPITAL LETTER S WITH DIAGONAL STROKE (16)
    {0xA7CE, 0xA7CE, 0xA7CF},    // LATIN CAPITAL LETTER PHARYNGEAL VOICED FRICATIVE (17)
    {0xA7D2, 0xA7D2, 0xA7D3},    // LATIN CAPITAL LETTER DOUBLE THORN (17)
    {0xA7D4, 0xA7D4, 0xA7D5},    // LATIN CAPITAL LETTER DOUBLE WYNN (17)
    {0xA7DA, 0xA7DA, 0xA7DB},    // LATIN CAPITAL LETTER LAMBDA (16)
    {0xA7DC, 0xA7DC, 0x019B},    // LATIN CAPITAL LETTER LAMBDA WITH STROKE -> U+019B (16)
    {0x10D50, 0x10D65, 0x10D70},  // Garay capital letters (16)
    {0x16EA0, 0x16EB8, 0x16EBB},  // Beria Erfe capital letters (17)
};

bool unassigned_in_reference(char32_t c) {
  if (c < kUnassignedInReference[0].first) return false;
  const auto* end = std::end(kUnassignedInReference);
  const auto* it = std::upper_bound(std::begin(kUnassignedInReference), end, c,
                                    [](char32_t v, const CodePointRange& r) { return v < r.first; });
  return it != std::begin(kUnassignedInReference) && c <= (it - 1)->last;
}

utf8proc_category_t category(char32_t c) {
  if (unassigned_in_reference(c)) return UTF8PROC_CATEGORY_CN;
  if (c == kPunctuationInReference[0] || c == kPunctuationInReference[1]) return UTF8PROC_CATEGORY_PO;
  if (c == kNonspacingMarkInReference) return UTF8PROC_CATEGORY_MN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

}  // namespace

DecodedChar decode_utf8(const unsigned char* s, std::size_t n) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return {b0, 1};
  // Table 3-7 of the Unicode standard: the lead byte fixes the length and the allowed
  // range of the second byte (which is what excludes overlongs, surrogates and > U+10FFFF).
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1; cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2; cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3; cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {kReplacementChar, 1, true};  // stray continuation byte, C0/C1, or F5..FF
  }
  std::size_t i = 1;
  for (int k = 0; k < need; ++k, ++i) {
    if (i >= n) return {kReplacementChar, i, true};  // truncated at end of input
    const unsigned char b = s[i];
    const unsigned char min = (k == 0) ? lo : 0x80;
    const unsigned char max = (k == 0) ? hi : 0xBF;
    if (b < min || b > max) return {kReplacementChar, i, true};  // maximal subpart ends here
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, i};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    const DecodedChar d = decode_utf8(p + i, text.size() - i);
    append_utf8(out, d.code_point);
    i += d.length;
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    const DecodedChar d = decode_utf8(p + i, text.size() - i);
    if (d.ill_formed) return false;
    i += d.length;
  }
  return true;
}

IllFormedUtf8 find_ill_formed_utf8(std::string_view text) {
  IllFormedUtf8 found;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII, almost all of a typical corpus
      ++i;
      continue;
    }
    const DecodedChar d = decode_utf8(p + i, n - i);
    if (d.ill_formed && found.count++ == 0) found.first_offset = i;
    i += d.length;
  }
  return found;
}

bool is_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO;
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
    return true;
  if (c < 0x80) return false;
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// BERT's list, except that the reference starts Extension E at U+2B920 where BERT has
// U+2B820: the 256 ideographs U+2B820..U+2B91F stay inside words there, and so here.
bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_nonspacing_mark(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

int combining_class(char32_t c) {
  if (unassigned_in_reference(c)) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

int canonical_decomposition(char32_t c, char32_t out[8]) {
  if (unassigned_in_reference(c)) {
    out[0] = c;
    return 1;
  }
  utf8proc_int32_t buffer[8];
  int boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer, 8,
                                                     UTF8PROC_DECOMPOSE, &boundclass);
  if (n < 1 || n > 8) {  // cannot happen for a valid code point; keep the character as it is
    out[0] = c;
    return 1;
  }
  for (utf8proc_ssize_t i = 0; i < n; ++i) out[i] = static_cast<char32_t>(buffer[i]);
  return static_cast<int>(n);
}

int to_lower_full(char32_t c, char32_t out[2]) {
  if (c == 0x130) {  // the one character whose full lower-case mapping is two characters
    out[0] = 'i';
    out[1] = 0x307;
    return 2;
  }
  // One range test keeps the table off the path of almost every character.
  if (c >= kLowercaseNewerThanUtf8proc[0].first && c <= std::rbegin(kLowercaseNewerThanUtf8proc)->last) {
    for (const CaseMapping& m : kLowercaseNewerThanUtf8proc) {
      if (c >= m.first && c <= m.last) {
        out[0] = m.lower_first + (c - m.first);
        return 1;
      }
    }
  }
  out[0] = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
  return 1;
}

}  // namespace wedge::data::unicode
