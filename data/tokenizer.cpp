#include "data/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "engine/text_escape.h"

namespace wedge::data {

namespace {

bool is_continuation_byte(char b) { return (static_cast<unsigned char>(b) & 0xC0) == 0x80; }

std::size_t count_chars(std::string_view s) {
  std::size_t n = 0;
  for (const char b : s) n += !is_continuation_byte(b);
  return n;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
}

// Runs fn(i) for i in [0, n) on `threads` threads, each taking a contiguous slice.
template <class Fn>
void parallel_for(std::size_t n, unsigned threads, Fn fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(n, 1)));
  if (threads <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::size_t begin = n * t / threads, end = n * (t + 1) / threads;
      for (std::size_t i = begin; i < end; ++i) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

std::pair<std::size_t, std::size_t> truncate_pair_longest_first(std::size_t length_a, std::size_t length_b,
                                                                std::size_t budget) {
  if (length_a + length_b <= budget) return {length_a, length_b};
  const bool a_is_longer = length_a > length_b;
  std::size_t shorter = a_is_longer ? length_b : length_a;
  std::size_t longer = shorter > budget ? shorter : std::max(shorter, budget - shorter);
  if (shorter + longer > budget) {  // both must be cut
    shorter = budget / 2;
    longer = shorter + budget % 2;
  }
  return a_is_longer ? std::pair{longer, shorter} : std::pair{shorter, longer};
}

void Tokenizer::PieceTable::insert(std::string_view piece, std::int32_t id) {
  ids.insert_or_assign(std::string(piece), id);
  max_bytes = std::max(max_bytes, piece.size());
}

Tokenizer::Tokenizer(Vocab vocab, TokenizerOptions options)
    : vocab_(std::move(vocab)), options_(options), basic_(options.normalizer) {
  if (vocab_.unk_id() < 0)
    throw std::runtime_error(fmt::format("the vocabulary {} has no {} token; a WordPiece vocabulary needs one",
                                         printable(vocab_.source_name()), Vocab::kUnk));
  const auto& tokens = vocab_.tokens();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view t = tokens[i];
    const auto id = static_cast<std::int32_t>(i);
    word_start_.insert(t, id);
    if (t.size() > kContinuingPrefix.size() && t.starts_with(kContinuingPrefix))
      continuation_.insert(t.substr(kContinuingPrefix.size()), id);
  }
  for (const char* name : {Vocab::kPad, Vocab::kUnk, Vocab::kCls, Vocab::kSep, Vocab::kMask}) {
    const std::int32_t id = vocab_.find(name);
    if (id >= 0) specials_.emplace_back(name, id);
  }
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& vocab_txt, TokenizerOptions options) {
  return Tokenizer(Vocab::load(vocab_txt), options);
}

bool Tokenizer::is_special(std::int32_t id) const {
  return std::any_of(specials_.begin(), specials_.end(), [id](const auto& s) { return s.second == id; });
}

void Tokenizer::wordpiece(std::string_view word, std::vector<std::int32_t>& ids) const {
  if (count_chars(word) > options_.max_input_chars_per_word) {
    ids.push_back(vocab_.unk_id());
    return;
  }
  // course 20 begin: WordPiece: the longest vocabulary piece first, ## pieces after the first, and a word that will not split is one [UNK]
  const std::size_t first_piece = ids.size();
  std::size_t start = 0;
  while (start < word.size()) {
    const PieceTable& table = start == 0 ? word_start_ : continuation_;
    // No vocabulary piece is longer than max_bytes, so the search starts there, on a
    // character boundary, and walks back one character at a time.
    std::size_t end = std::min(word.size(), start + table.max_bytes);
    while (end > start && end < word.size() && is_continuation_byte(word[end])) --end;
    std::int32_t id = -1;
    while (end > start) {
      id = table.find(word.substr(start, end - start));
      if (id >= 0) break;
      do {
        --end;
      } while (end > start && is_continuation_byte(word[end]));
    }
    if (id < 0) {  // some part of the word matches nothing: the whole word is unknown
      ids.resize(first_piece);
      ids.push_back(vocab_.unk_id());
      return;
    }
    ids.push_back(id);
    start = end;
  }
  // course 20 end
}

void Tokenizer::encode_text_part(std::string_view text, std::vector<std::int32_t>& ids, WordList& words) const {
  words.clear();
  basic_.split(text, words);
  for (std::size_t i = 0; i < words.size(); ++i) wordpiece(words[i], ids);
}

void Tokenizer::encode_append(std::string_view text, std::vector<std::int32_t>& ids) const {
  WordList words;
  if (!options_.match_special_tokens || specials_.empty()) {
    encode_text_part(text, ids, words);
    return;
  }
  // Leftmost-longest match of the special tokens' exact spelling; all begin with '['.
  std::size_t done = 0, pos = 0;
  while ((pos = text.find('[', pos)) != std::string_view::npos) {
    std::size_t best_length = 0;
    std::int32_t best_id = -1;
    for (const auto& [name, id] : specials_) {
      if (name.size() > best_length && text.substr(pos).starts_with(name)) {
        best_length = name.size();
        best_id = id;
      }
    }
    if (best_id < 0) {
      ++pos;
      continue;
    }
    encode_text_part(text.substr(done, pos - done), ids, words);
    ids.push_back(best_id);
    pos += best_length;
    done = pos;
  }
  encode_text_part(text.substr(done), ids, words);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  encode_append(text, ids);
  return ids;
}

std::vector<std::string> Tokenizer::tokenize(std::string_view text) const { return id_to_tokens(encode(text)); }

Encoding Tokenizer::encode_single(std::string_view text, std::size_t max_length) const {
  if (vocab_.cls_id() < 0 || vocab_.sep_id() < 0)
    throw std::runtime_error(fmt::format("the vocabulary {} lacks [CLS] or [SEP]", printable(vocab_.source_name())));
  if (max_length != 0 && max_length < 2)
    throw std::invalid_argument(fmt::format("max_length {} leaves no room for [CLS] and [SEP]", max_length));
  std::vector<std::int32_t> body = encode(text);
  if (max_length != 0 && body.size() + 2 > max_length) body.resize(max_length - 2);
  Encoding e;
  e.ids.reserve(body.size() + 2);
  e.ids.push_back(vocab_.cls_id());
  e.ids.insert(e.ids.end(), body.begin(), body.end());
  e.ids.push_back(vocab_.sep_id());
  e.type_ids.assign(e.ids.size(), 0);
  return e;
}

Encoding Tokenizer::encode_pair(std::string_view a, std::string_view b, std::size_t max_length) const {
  if (vocab_.cls_id() < 0 || vocab_.sep_id() < 0)
    throw std::runtime_error(fmt::format("the vocabulary {} lacks [CLS] or [SEP]", printable(vocab_.source_name())));
  if (max_length != 0 && max_length < 3)
    throw std::invalid_argument(fmt::format("max_length {} leaves no room for [CLS] and two [SEP]", max_length));
  std::vector<std::int32_t> first = encode(a), second = encode(b);
  if (max_length != 0) {
    const auto [keep_a, keep_b] = truncate_pair_longest_first(first.size(), second.size(), max_length - 3);
    first.resize(keep_a);
    second.resize(keep_b);
  }
  Encoding e;
  e.ids.reserve(first.size() + second.size() + 3);
  e.ids.push_back(vocab_.cls_id());
  e.ids.insert(e.ids.end(), first.begin(), first.end());
  e.ids.push_back(vocab_.sep_id());
  e.type_ids.assign(e.ids.size(), 0);
  e.ids.insert(e.ids.end(), second.begin(), second.end());
  e.ids.push_back(vocab_.sep_id());
  e.type_ids.resize(e.ids.size(), 1);
  return e;
}

std::vector<Encoding> Tokenizer::encode_batch(std::span<const std::string> texts, std::size_t max_length,
                                              unsigned threads) const {
  std::vector<Encoding> out(texts.size());
  parallel_for(texts.size(), threads, [&](std::size_t i) { out[i] = encode_single(texts[i], max_length); });
  return out;
}

std::vector<Encoding> Tokenizer::encode_pair_batch(std::span<const std::pair<std::string, std::string>> pairs,
                                                   std::size_t max_length, unsigned threads) const {
  std::vector<Encoding> out(pairs.size());
  parallel_for(pairs.size(), threads,
               [&](std::size_t i) { out[i] = encode_pair(pairs[i].first, pairs[i].second, max_length); });
  return out;
}

std::vector<std::string> Tokenizer::id_to_tokens(std::span<const std::int32_t> ids) const {
  std::vector<std::string> out;
  out.reserve(ids.size());
  for (const std::int32_t id : ids) out.push_back(vocab_.token(id));
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, const DecodeOptions& options) const {
  // The reference's WordPiece decoder works token by token: every token but the first gets
  // a leading space unless it is a "##" piece, then the clean-up rules run on that token
  // alone (so only " ." " ," " !" " ?" can ever fire).
  std::string text;
  bool first = true;
  for (const std::int32_t id : ids) {
    if (options.skip_special_tokens && is_special(id)) continue;
    std::string token = vocab_.token(id);
    if (!first) {
      if (token.starts_with(kContinuingPrefix)) token.erase(0, kContinuingPrefix.size());
      else token.insert(token.begin(), ' ');
    }
    first = false;
    if (options.cleanup) {
      static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
          {" .", "."},   {" ?", "?"},     {" !", "!"},          {" ,", ","},   {" ' ", "'"},  {" n't", "n't"},
          {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
      for (const auto& [from, to] : kRules) replace_all(token, from, to);
    }
    text += token;
  }
  return text;
}

}  // namespace wedge::data
