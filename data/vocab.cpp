#include "data/vocab.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "data/dataset_errors.h"
#include "data/hash.h"
#include "data/unicode.h"

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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(missing_file_message(path, "vocabulary"));
  std::vector<std::string> tokens;
  std::string line;
  std::size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!unicode::is_valid_utf8(line))
      throw std::runtime_error(fmt::format("{}:{}: the vocabulary line is not valid UTF-8", path.string(),
                                           line_number));
    line.resize(without_trailing_whitespace(line).size());
    tokens.push_back(std::move(line));
  }
  if (tokens.empty())
    throw std::runtime_error(fmt::format("{}: the vocabulary file is empty", path.string()));
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
  for (std::size_t i = 0; i < tokens_.size(); ++i) ids_[tokens_[i]] = static_cast<std::int32_t>(i);
  pad_id_ = find(kPad);
  unk_id_ = find(kUnk);
  cls_id_ = find(kCls);
  sep_id_ = find(kSep);
  mask_id_ = find(kMask);
}

void Vocab::save(const std::filesystem::path& path) const {
  for (const std::string& t : tokens_)
    if (t.find('\n') != std::string::npos || t.find('\r') != std::string::npos)
      throw std::runtime_error(fmt::format("cannot write token with a line break to {}", path.string()));
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(fmt::format("cannot write vocabulary file {}", tmp.string()));
    for (const std::string& t : tokens_) out << t << '\n';
    out.flush();
    if (!out) throw std::runtime_error(fmt::format("error while writing vocabulary file {}", tmp.string()));
  }
  std::filesystem::rename(tmp, path);
}

const std::string& Vocab::token(std::int32_t id) const {
  if (id < 0 || id >= size())
    throw std::out_of_range(fmt::format("token id {} is outside the vocabulary of {} tokens ({})", id, size(),
                                        source_name_));
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
  throw std::runtime_error("no vocabulary given and none found beside " + dir.string() +
                           " (looked for bert-base-uncased-vocab.txt there and in its parent); pass --vocab FILE. " +
                           how_to_get("vocabulary"));
}

}  // namespace wedge::data
