// Text from files (tokens, labels, tensor names, file names) made safe to put in a message
// for a terminal: a byte that could move the cursor, recolour the screen or end the line
// must not reach it raw. printable() keeps valid, printable UTF-8 as it is and writes
// everything else as an escape:
//   - the C0 control bytes (0x00-0x1F, tab and line break included) and DEL as \xNN;
//   - each byte of an ill-formed UTF-8 sequence as \xNN;
//   - the C1 controls U+0080-U+009F (0x9B opens an escape sequence on some terminals) and
//     the invisible direction controls U+200E, U+200F, U+202A-U+202E, U+2066-U+2069 (which
//     reorder what is displayed) as \u{XXXX}.
// A backslash is kept as it is, so most text reads unchanged; the escapes only ever appear
// where the original had a byte that is not shown.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace wedge {

std::string printable(std::string_view text);

// The same, cut after `max_bytes` bytes of input (on a character boundary) with
// "... (N bytes)" appended, for text that may be a whole line of a file.
std::string printable(std::string_view text, std::size_t max_bytes);

}  // namespace wedge
