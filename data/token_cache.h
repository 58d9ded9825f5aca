// A binary file of token ids, so a corpus is tokenized once and later runs start at once.
//
// The file is keyed by what produced it: the hash of the text, of the vocabulary and of the
// tokenization options. A file whose key differs is stale, one that fails its own checks
// (size, magic, checksum, ids inside the vocabulary) is corrupt; either way the caller
// tokenizes again and rewrites it.
//
// Layout (little-endian):
//   0   8 bytes  magic "WEDGEIDS"
//   8   u32      format version (1)
//   12  u32      zero
//   16  u64      text hash
//   24  u64      vocabulary hash
//   32  u64      options hash
//   40  u64      number of ids n
//   48  u64      FNV-1a hash of the id bytes
//   56  n × i32  the ids
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace wedge::data {

struct TokenCacheKey {
  std::uint64_t text_hash = 0;
  std::uint64_t vocab_hash = 0;
  std::uint64_t options_hash = 0;
  bool operator==(const TokenCacheKey&) const = default;
};

enum class CacheStatus {
  kDisabled,  // no cache folder configured
  kHit,       // ids read from the cache
  kMissing,   // no cache file yet; tokenized and written
  kStale,     // the file was for another text, vocabulary or options; rebuilt
  kCorrupt,   // the file failed its checks; rebuilt
};

const char* to_string(CacheStatus status);

// Reads the ids if the file exists, is intact and carries `key`. Otherwise returns
// kMissing / kStale / kCorrupt and leaves `ids` empty. With id_limit > 0 every id must lie
// in [0, id_limit) (the vocabulary's size), else the file is corrupt however good its
// checksum. For kCorrupt, `problem` (when given) receives what was wrong, in a few words.
CacheStatus read_token_cache(const std::filesystem::path& file, const TokenCacheKey& key,
                             std::vector<std::int32_t>& ids, std::int32_t id_limit = 0,
                             std::string* problem = nullptr);

// Writes atomically (temporary file, then rename), creating the folder. Throws
// std::runtime_error when it cannot write.
void write_token_cache(const std::filesystem::path& file, const TokenCacheKey& key,
                       const std::vector<std::int32_t>& ids);

// The folder caches go to by default: $WEDGE_CACHE_DIR, else $XDG_CACHE_HOME/wedge, else
// $HOME/.cache/wedge; empty (no caching) when none of these is set.
std::filesystem::path default_cache_dir();

}  // namespace wedge::data
