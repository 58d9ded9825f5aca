// printable(): what a message may show of text read from a file. Every expected string is
// written out by hand.
#include <doctest/doctest.h>

#include <string>

#include "engine/text_escape.h"

using wedge::printable;

TEST_CASE("printable keeps printable UTF-8 and a backslash as they are") {
  CHECK(printable("") == "");
  CHECK(printable("hello, world ##s [UNK] \\ ~") == "hello, world ##s [UNK] \\ ~");
  CHECK(printable("H\u00e9llo \u4e2d \U0001F600 \u00a0 \ufffd") == "H\u00e9llo \u4e2d \U0001F600 \u00a0 \ufffd");
}

TEST_CASE("printable escapes control bytes, DEL and each byte of ill-formed UTF-8") {
  CHECK(printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("tab\tline\nret\r\x7f") == "tab\\x09line\\x0aret\\x0d\\x7f");
  CHECK(printable("caf\xe9") == "caf\\xe9");                             // Latin-1, not UTF-8
  CHECK(printable("\xff\xfe" "x") == "\\xff\\xfex");
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");                          // cut short at the end
  CHECK(printable("\xe2\x82" "A") == "\\xe2\\x82A");                     // cut short before ASCII
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");                          // overlong '/'
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");                 // a surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");        // above U+10FFFF
  CHECK(printable("\xe2\x82\xe2\x82\xac") == "\\xe2\\x82\u20ac");        // the euro sign after a broken one
}

TEST_CASE("printable escapes C1 controls and the direction controls as code points") {
  CHECK(printable("\xc2\x9b" "2J") == "\\u{009b}2J");  // CSI, an escape sequence on some terminals
  CHECK(printable("\xc2\x85") == "\\u{0085}");
  CHECK(printable("abc\u202edcba") == "abc\\u{202e}dcba");
  CHECK(printable("\u2066x\u2069\u200e\u200f") == "\\u{2066}x\\u{2069}\\u{200e}\\u{200f}");
  CHECK(printable("\xc2\xa0") == "\xc2\xa0");  // U+00A0, the first character after the C1 block, stays
}

TEST_CASE("printable with a limit cuts on a character boundary and says how long the text was") {
  CHECK(printable("short", 10) == "short");
  CHECK(printable("abcdefghij", 10) == "abcdefghij");
  CHECK(printable("abcdefghijk", 4) == "abcd... (11 bytes)");
  CHECK(printable("ab\u00e9cdef", 3) == "ab\u00e9... (8 bytes)");  // é is not split
  CHECK(printable("\x1b\x1b\x1b\x1b", 2) == "\\x1b\\x1b... (4 bytes)");
}
