#include "engine/text_escape.h"

#include <cstdint>

namespace wedge {

namespace {

void append_byte_escape(std::string& out, unsigned char b) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out.push_back(kHex[b >> 4]);
  out.push_back(kHex[b & 0xF]);
}

void append_code_point_escape(std::string& out, char32_t c) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u{";
  for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(c >> shift) & 0xF]);
  out.push_back('}');
}

// Length of the well-formed UTF-8 sequence at s (Table 3-7 of the Unicode standard: no
// overlongs, no surrogates, nothing above U+10FFFF) and its code point; 0 when ill-formed.
std::size_t well_formed_length(const unsigned char* s, std::size_t n, char32_t& code_point) {
  const unsigned char b0 = s[0];
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    code_point = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    code_point = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    code_point = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (n < need + 1) return 0;
  for (std::size_t k = 1; k <= need; ++k) {
    const unsigned char b = s[k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
    code_point = (code_point << 6) | (b & 0x3F);
  }
  return need + 1;
}

bool hidden(char32_t c) {
  return (c >= 0x80 && c <= 0x9F) || c == 0x200E || c == 0x200F || (c >= 0x202A && c <= 0x202E) ||
         (c >= 0x2066 && c <= 0x2069);
}

// Appends the shown form of the character at text[i] and returns the bytes it consumed.
std::size_t append_shown(std::string& out, std::string_view text, std::size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  const unsigned char b = p[0];
  if (b < 0x80) {
    if (b < 0x20 || b == 0x7F) append_byte_escape(out, b);
    else out.push_back(static_cast<char>(b));
    return 1;
  }
  char32_t c = 0;
  const std::size_t length = well_formed_length(p, text.size() - i, c);
  if (length == 0) {  // one byte at a time, so the bytes that follow are judged on their own
    append_byte_escape(out, b);
    return 1;
  }
  if (hidden(c)) append_code_point_escape(out, c);
  else out.append(text.substr(i, length));
  return length;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) i += append_shown(out, text, i);
  return out;
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return printable(text);
  std::string out;
  std::size_t i = 0;
  while (i < max_bytes) i += append_shown(out, text, i);
  out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace wedge
