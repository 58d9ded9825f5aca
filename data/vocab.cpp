#include "data/vocab.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "data/dataset_errors.h"
#include "data/hash.h"
#include "data/unicode.h"
#include "engine/atomic_file.h"
#include "engine/text_escape.h"

namespace wedge::data {

namespace {

// Trailing whitespace (the \r of CRLF files, stray spaces, any Unicode White_Space) is not
// part of a token, as in the reference, which trims each line's end.
std::string_view without_trailing_whitespace(std::string_view line) {
  while (!line.empty()) {
    std::size_t start = line.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(line[start]) & 0xC0) == 0x80) --start;
    const auto* p = reinterpret_cast<const unsigned char*>(line.data()) + start;
    if (!unicode::is_whitespace(unicode::decode_utf8(p, line.size() - start).code_point)) break;
    line.remove_suffix(line.size() - start);
  }
  return line;
}

}  // namespace

Vocab Vocab::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error(fmt::format("vocabulary {} is a folder; --vocab takes the vocab.txt file itself",
                                         display_path(path)));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(missing_file_message(path, "vocabulary"));
  const std::string name = display_path(path);
  std::vector<std::string> tokens;
  std::string line;
  std::size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!unicode::is_valid_utf8(line))
      throw std::runtime_error(fmt::format("{}:{}: the vocabulary line is not valid UTF-8 ({}); is this a vocab.txt?",
                                           name, line_number, printable(line, 40)));
    line.resize(without_trailing_whitespace(line).size());
    if (line.empty())
      throw std::runtime_error(fmt::format("{}:{}: empty line; a vocabulary has one token on every line and a "
                                           "token's id is its line number (a blank line is usually an editing slip "
                                           "that moves every later id)",
                                           name, line_number));
    tokens.push_back(std::move(line));
  }
  if (in.bad()) throw std::runtime_error(fmt::format("{}: read error", name));
  if (tokens.empty()) throw std::runtime_error(fmt::format("{}: the vocabulary file is empty", name));
  // Built once every token is in place (a vector that grows moves its strings).
  std::unordered_map<std::string_view, std::size_t> first_line;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto [it, inserted] = first_line.try_emplace(tokens[i], i + 1);
    if (!inserted)
      throw std::runtime_error(fmt::format("{}:{}: the token \"{}\" is also on line {}; a vocabulary lists each token "
                                           "once (the id of a token is its line number, so a repeated one leaves an id "
                                           "that lookups never give)",
                                           name, i + 1, printable(tokens[i]), it->second));
  }
  return from_tokens(std::move(tokens), path.string());
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens, std::string source_name) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  v.source_name_ = std::move(source_name);
  v.index();
  return v;
}

void Vocab::index() {
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const auto [it, inserted] = ids_.try_emplace(tokens_[i], static_cast<std::int32_t>(i));
    if (!inserted)
      throw std::invalid_argument(fmt::format("vocabulary {}: the token \"{}\" has ids {} and {}; each token must "
                                              "appear once",
                                              printable(source_name_), printable(tokens_[i]), it->second, i));
  }
  pad_id_ = find(kPad);
  unk_id_ = find(kUnk);
  cls_id_ = find(kCls);
  sep_id_ = find(kSep);
  mask_id_ = find(kMask);
}

void Vocab::save(const std::filesystem::path& path) const {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    if (t.empty() || t.find('\n') != std::string::npos || t.find('\r') != std::string::npos)
      throw std::runtime_error(fmt::format("cannot write {}: token {} (\"{}\") is empty or holds a line break, which "
                                           "a vocab.txt cannot represent",
                                           display_path(path), i, printable(t)));
  }
  std::string text;
  for (const std::string& t : tokens_) {
    text += t;
    text += '\n';
  }
  // A temporary file beside the target, every write and the close checked, then renamed:
  // a failure leaves neither a half-written vocabulary nor a temporary file behind.
  write_file_atomic(path.string(), text, /*durable=*/false);
}

const std::string& Vocab::token(std::int32_t id) const {
  if (id < 0 || id >= size())
    throw std::out_of_range(fmt::format("token id {} is outside the vocabulary of {} tokens ({})", id, size(),
                                        printable(source_name_)));
  return tokens_[static_cast<std::size_t>(id)];
}

std::int32_t Vocab::find(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

std::uint64_t Vocab::content_hash() const {
  Fnv1a64 h;
  h.add_u64(tokens_.size());
  for (const std::string& t : tokens_) h.add(t);
  return h.value();
}

std::filesystem::path find_vocab_near(const std::filesystem::path& dir) {
  for (const std::filesystem::path& candidate : {dir / "bert-base-uncased-vocab.txt", dir / "vocab.txt",
                                                 dir.parent_path() / "bert-base-uncased-vocab.txt"}) {
    if (std::filesystem::is_regular_file(candidate)) return candidate;
  }
  throw std::runtime_error("no vocabulary given and none found beside " + display_path(dir) +
                           " (looked for bert-base-uncased-vocab.txt there and in its parent); pass --vocab FILE. " +
                           how_to_get("vocabulary"));
}

}  // namespace wedge::data
