// The WordPiece tokenizer: any bytes as text (the first byte picks the normaliser options,
// as a user's TokenizerOptions would), encoded with the fixed vocabulary of
// fuzz_support.h. The tokenizer never fails on any input, so no exception is expected at
// all; what is checked is what it promises: ids inside the vocabulary, tokenize() the
// tokens of encode(), texts joined by a space encode to the concatenation of their ids, and
// the length limits of encode_single / encode_pair.
#include <string>
#include <vector>

#include "data/basic_tokenizer.h"
#include "data/tokenizer.h"
#include "data/unicode.h"
#include "fuzz_support.h"
#include "fuzz_tokenizer.h"

using namespace wedge;
using namespace wedge::data;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t flags = data[0];
  TokenizerOptions options;
  options.normalizer.lowercase = !(flags & 1);
  if (flags & 2) options.normalizer.strip_accents = (flags & 4) != 0;
  options.normalizer.clean_text = !(flags & 8);
  options.normalizer.handle_chinese_chars = !(flags & 16);
  options.match_special_tokens = !(flags & 32);
  if (flags & 64) options.max_input_chars_per_word = 4;
  const Tokenizer tokenizer = fuzz::small_tokenizer(options);
  const std::string_view text = fuzz::as_text(data + 1, size - 1);

  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  FUZZ_CHECK(fuzz::ids_in_vocab(ids, tokenizer));
  FUZZ_CHECK(tokenizer.tokenize(text) == tokenizer.id_to_tokens(ids));
  (void)tokenizer.decode(ids);
  (void)tokenizer.decode(ids, DecodeOptions{.skip_special_tokens = true, .cleanup = false});

  for (const std::string& word : tokenizer.basic_tokenizer().split(text)) {
    FUZZ_CHECK(!word.empty() && unicode::is_valid_utf8(word));
  }

  // Split at the first tab into a pair, as `wedge classify` reads premise<TAB>hypothesis.
  const std::size_t tab = text.find('\t');
  const std::string_view a = text.substr(0, tab);
  const std::string_view b = tab == std::string_view::npos ? std::string_view() : text.substr(tab + 1);
  std::vector<std::int32_t> joined = tokenizer.encode(a);
  const std::vector<std::int32_t> second = tokenizer.encode(b);
  joined.insert(joined.end(), second.begin(), second.end());
  FUZZ_CHECK(tokenizer.encode(std::string(a) + " " + std::string(b)) == joined);

  const std::size_t limit = 3 + (flags >> 7) * 5 + size % 7;
  const Encoding single = tokenizer.encode_single(text, limit);
  FUZZ_CHECK(single.ids.size() <= limit && single.ids.size() >= 2 && single.type_ids.size() == single.ids.size());
  FUZZ_CHECK(single.ids.front() == tokenizer.vocab().cls_id() && single.ids.back() == tokenizer.vocab().sep_id());
  const Encoding pair = tokenizer.encode_pair(a, b, limit);
  FUZZ_CHECK(pair.ids.size() <= limit && pair.ids.size() >= 3 && pair.type_ids.size() == pair.ids.size());
  const Encoding whole = tokenizer.encode_pair(a, b);
  FUZZ_CHECK(whole.ids.size() == joined.size() + 3);
  return 0;
}
