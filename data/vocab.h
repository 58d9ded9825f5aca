// A WordPiece vocabulary: vocab.txt, one token per line, id = line number (from 0).
// Word-initial pieces are stored as they are ("play"); continuation pieces carry the "##"
// prefix in the file ("##ing"). Special tokens are found by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace wedge::data {

class Vocab {
 public:
  static constexpr const char* kPad = "[PAD]";
  static constexpr const char* kUnk = "[UNK]";
  static constexpr const char* kCls = "[CLS]";
  static constexpr const char* kSep = "[SEP]";
  static constexpr const char* kMask = "[MASK]";

  Vocab() = default;

  // Reads vocab.txt. Line endings may be \n or \r\n; trailing whitespace of a line is not
  // part of its token (as in the reference). Throws std::runtime_error naming the file (and
  // the line) for a missing, unreadable or empty file, a folder, a line that is not UTF-8, an
  // empty line, and a token that appears twice (both lines named): the reference would
  // silently give such a token its later id and leave the earlier one unreachable.
  static Vocab load(const std::filesystem::path& path);

  // A vocabulary from tokens in id order. Throws std::invalid_argument when a token appears
  // twice.
  static Vocab from_tokens(std::vector<std::string> tokens, std::string source_name = "<memory>");

  // Writes vocab.txt atomically (engine/atomic_file.h): a temporary file beside it, every
  // write checked, then renamed; on failure nothing is left behind. Throws naming the file,
  // also for an empty token or one with a line break, which the format cannot hold.
  void save(const std::filesystem::path& path) const;

  std::int32_t size() const { return static_cast<std::int32_t>(tokens_.size()); }
  const std::string& token(std::int32_t id) const;  // throws std::out_of_range
  const std::vector<std::string>& tokens() const { return tokens_; }

  // Id of a token spelled exactly so, or -1.
  std::int32_t find(std::string_view token) const;
  bool contains(std::string_view token) const { return find(token) >= 0; }

  // Special tokens: their id or -1 when the vocabulary lacks them.
  std::int32_t pad_id() const { return pad_id_; }
  std::int32_t unk_id() const { return unk_id_; }
  std::int32_t cls_id() const { return cls_id_; }
  std::int32_t sep_id() const { return sep_id_; }
  std::int32_t mask_id() const { return mask_id_; }

  // The file it came from (or "<memory>"), for error messages.
  const std::string& source_name() const { return source_name_; }

  // 64-bit content hash of the token list (what a token cache is keyed by).
  std::uint64_t content_hash() const;

 private:
  struct TransparentHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void index();

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t, TransparentHash, std::equal_to<>> ids_;
  std::int32_t pad_id_ = -1, unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, mask_id_ = -1;
  std::string source_name_ = "<memory>";
};

// The vocabulary to use with a dataset folder when none was named: the BERT-uncased
// vocab.txt inside `data_dir` or beside it (its parent). Throws std::runtime_error saying
// where it looked and how to get one.
std::filesystem::path find_vocab_near(const std::filesystem::path& data_dir);

}  // namespace wedge::data
