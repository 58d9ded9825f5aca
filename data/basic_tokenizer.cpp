#include "data/basic_tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "data/unicode.h"

namespace wedge::data {

namespace {

// What the pipeline does with an ASCII byte; precomputed because ASCII is almost all of
// WikiText and SNLI and this table keeps it off the Unicode lookups.
enum class AsciiClass : std::uint8_t { kDelete, kSpace, kPunct, kOther };

constexpr std::array<AsciiClass, 128> make_ascii_classes() {
  std::array<AsciiClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if (c == '\t' || c == '\n' || c == '\r' || c == ' ') t[c] = AsciiClass::kSpace;
    else if (c < 0x20 || c == 0x7F) t[c] = AsciiClass::kDelete;  // Cc (incl. \v \f, deleted by cleaning)
    else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
      t[c] = AsciiClass::kPunct;
    else t[c] = AsciiClass::kOther;
  }
  return t;
}
constexpr std::array<AsciiClass, 128> kAsciiClass = make_ascii_classes();

// Steps 1-4 of the header, as a stream: characters go in one at a time, normalised
// characters come out through Sink::put. Canonical reordering of combining marks (part of
// NFD) needs a small look-behind: non-starters wait in `pending_` until the next starter.
template <class Sink>
class NormalizingStream {
 public:
  NormalizingStream(const NormalizerOptions& options, bool strip_accents, Sink& sink)
      : options_(options), strip_accents_(strip_accents), sink_(sink) {}

  void feed(std::string_view text) {
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    std::size_t i = 0;
    while (i < n) {
      const unsigned char b = p[i];
      if (b < 0x80) {
        ++i;
        feed_ascii(b);
        continue;
      }
      const unicode::DecodedChar d = unicode::decode_utf8(p + i, n - i);
      i += d.length;
      if (d.ill_formed) feed_ill_formed();
      else feed_char(d.code_point);
    }
  }

  void finish() { flush_pending(); }

 private:
  void feed_ascii(unsigned char b) {
    const AsciiClass cls = kAsciiClass[b];
    if (cls == AsciiClass::kDelete && options_.clean_text) return;
    flush_pending();  // every ASCII character is a starter
    if (cls == AsciiClass::kSpace && options_.clean_text) {
      sink_.put(' ');
      return;
    }
    char32_t c = b;
    if (options_.lowercase && c >= 'A' && c <= 'Z') c += 'a' - 'A';
    sink_.put(c);
  }

  // Bytes that are not UTF-8 become one U+FFFD that cleaning keeps (unlike a U+FFFD
  // written in the text, which it deletes as the reference does): an ordinary word
  // character, so the damaged word stays one word and WordPiece makes it [UNK] instead of
  // cutting what is left of it into pieces. It is a starter with no decomposition or case.
  void feed_ill_formed() { decompose(unicode::kReplacementChar); }

  // Step 1 and 2 on the original character, then on to decomposition.
  void feed_char(char32_t c) {
    if (options_.clean_text) {
      if (c == 0 || c == unicode::kReplacementChar || unicode::is_control(c)) return;
      if (unicode::is_whitespace(c)) c = ' ';
    }
    if (options_.handle_chinese_chars && unicode::is_cjk_ideograph(c)) {
      decompose(' ');
      decompose(c);
      decompose(' ');
      return;
    }
    decompose(c);
  }

  // Step 3: NFD. Starters (combining class 0) are emitted at once, after any pending marks
  // in canonical order (stable sort by combining class); marks wait for the next starter.
  void decompose(char32_t c) {
    if (!strip_accents_) {
      flush_pending();
      lower_and_put(c);
      return;
    }
    char32_t parts[8];
    const int n = unicode::canonical_decomposition(c, parts);
    for (int k = 0; k < n; ++k) {
      const char32_t x = parts[k];
      const int ccc = unicode::combining_class(x);
      if (ccc == 0) {
        flush_pending();
        if (!unicode::is_nonspacing_mark(x)) lower_and_put(x);
      } else {
        pending_.push_back({x, ccc});
      }
    }
  }

  void flush_pending() {
    if (pending_.empty()) return;
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const Mark& a, const Mark& b) { return a.combining_class < b.combining_class; });
    for (const Mark& m : pending_)
      if (!strip_accents_ || !unicode::is_nonspacing_mark(m.code_point)) lower_and_put(m.code_point);
    pending_.clear();
  }

  // Step 4.
  void lower_and_put(char32_t c) {
    if (!options_.lowercase) {
      sink_.put(c);
      return;
    }
    char32_t lower[2];
    const int n = unicode::to_lower_full(c, lower);
    for (int k = 0; k < n; ++k) sink_.put(lower[k]);
  }

  struct Mark {
    char32_t code_point;
    int combining_class;
  };

  const NormalizerOptions& options_;
  bool strip_accents_;
  Sink& sink_;
  std::vector<Mark> pending_;
};

// Step 5: splits the normalised stream into words.
class WordSplitter {
 public:
  WordSplitter(std::string& chars, std::vector<std::size_t>& ends) : chars_(chars), ends_(ends) {
    word_begin_ = chars_.size();
  }

  void put(char32_t c) {
    if (c < 0x80) {
      const AsciiClass cls = kAsciiClass[c];
      // \v and \f are whitespace to the splitter; other control characters only reach it
      // when cleaning is off, and then they are ordinary word characters.
      if (cls == AsciiClass::kSpace || c == 0x0B || c == 0x0C) {
        end_word();
      } else if (cls == AsciiClass::kOther || cls == AsciiClass::kDelete) {
        chars_.push_back(static_cast<char>(c));
      } else {
        end_word();
        chars_.push_back(static_cast<char>(c));
        end_word();
      }
      return;
    }
    if (unicode::is_whitespace(c)) {
      end_word();
    } else if (unicode::is_punctuation(c)) {
      end_word();
      unicode::append_utf8(chars_, c);
      end_word();
    } else {
      unicode::append_utf8(chars_, c);
    }
  }

  void end_word() {
    if (chars_.size() > word_begin_) {
      ends_.push_back(chars_.size());
      word_begin_ = chars_.size();
    }
  }

 private:
  std::string& chars_;
  std::vector<std::size_t>& ends_;
  std::size_t word_begin_;
};

struct StringSink {
  std::string& out;
  void put(char32_t c) { unicode::append_utf8(out, c); }
};

}  // namespace

BasicTokenizer::BasicTokenizer(NormalizerOptions options)
    : options_(options), strip_accents_(options.strip_accents.value_or(options.lowercase)) {}

void BasicTokenizer::split(std::string_view text, WordList& words) const {
  WordSplitter splitter(words.chars_, words.ends_);
  NormalizingStream<WordSplitter> stream(options_, strip_accents_, splitter);
  stream.feed(text);
  stream.finish();
  splitter.end_word();
}

std::vector<std::string> BasicTokenizer::split(std::string_view text) const {
  WordList words;
  split(text, words);
  std::vector<std::string> out;
  out.reserve(words.size());
  for (std::size_t i = 0; i < words.size(); ++i) out.emplace_back(words[i]);
  return out;
}

std::string BasicTokenizer::normalize(std::string_view text) const {
  std::string out;
  StringSink sink{out};
  NormalizingStream<StringSink> stream(options_, strip_accents_, sink);
  stream.feed(text);
  stream.finish();
  return out;
}

}  // namespace wedge::data
