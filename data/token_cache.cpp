#include "data/token_cache.h"

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "data/dataset_errors.h"
#include "data/hash.h"
#include "engine/atomic_file.h"

namespace wedge::data {

namespace {

static_assert(std::endian::native == std::endian::little, "the cache format is little-endian");

constexpr char kMagic[8] = {'W', 'E', 'D', 'G', 'E', 'I', 'D', 'S'};
constexpr std::uint32_t kFormatVersion = 1;
constexpr std::size_t kHeaderBytes = 56;

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t zero;
  std::uint64_t text_hash, vocab_hash, options_hash, count, checksum;
};
static_assert(sizeof(Header) == kHeaderBytes);

std::uint64_t checksum_of(const std::vector<std::int32_t>& ids) {
  return Fnv1a64().add(ids.data(), ids.size() * sizeof(std::int32_t)).value();
}

}  // namespace

const char* to_string(CacheStatus status) {
  switch (status) {
    case CacheStatus::kDisabled: return "disabled";
    case CacheStatus::kHit: return "hit";
    case CacheStatus::kMissing: return "missing";
    case CacheStatus::kStale: return "stale";
    case CacheStatus::kCorrupt: return "corrupt";
  }
  return "?";
}

CacheStatus read_token_cache(const std::filesystem::path& file, const TokenCacheKey& key,
                             std::vector<std::int32_t>& ids, std::int32_t id_limit, std::string* problem) {
  ids.clear();
  auto corrupt = [&](std::string why) {
    ids.clear();
    if (problem) *problem = std::move(why);
    return CacheStatus::kCorrupt;
  };
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return CacheStatus::kMissing;
  if (!std::filesystem::is_regular_file(file, ec)) return corrupt("not a regular file");
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  std::ifstream in(file, std::ios::binary);
  if (ec || !in) return corrupt("cannot be read");
  if (size < kHeaderBytes) return corrupt(fmt::format("{} bytes, shorter than the {}-byte header", size, kHeaderBytes));
  Header h{};
  in.read(reinterpret_cast<char*>(&h), kHeaderBytes);
  if (!in) return corrupt("cannot read the header");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kFormatVersion || h.zero != 0)
    return corrupt("not a wedge token cache of format version 1");
  if ((size - kHeaderBytes) % sizeof(std::int32_t) != 0 || (size - kHeaderBytes) / sizeof(std::int32_t) != h.count)
    return corrupt(fmt::format("{} bytes of ids where the header announces {} ids", size - kHeaderBytes, h.count));
  // Check the key before reading the payload: a stale file is not worth reading.
  if (!(TokenCacheKey{h.text_hash, h.vocab_hash, h.options_hash} == key)) return CacheStatus::kStale;
  ids.resize(h.count);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(h.count * sizeof(std::int32_t)));
  if (!in) return corrupt("cannot read the ids");
  if (checksum_of(ids) != h.checksum) return corrupt("the ids do not match their checksum");
  // An id the vocabulary does not have would only fail far from here (an embedding lookup,
  // a decode), in a message that cannot name this file.
  if (id_limit > 0) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= id_limit)
        return corrupt(fmt::format("id {} at position {} is outside the vocabulary's {} ids", ids[i], i, id_limit));
    }
  }
  return CacheStatus::kHit;
}

void write_token_cache(const std::filesystem::path& file, const TokenCacheKey& key,
                       const std::vector<std::int32_t>& ids) {
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  if (ec)
    throw std::runtime_error(fmt::format("cannot create cache folder {}: {}", display_path(file.parent_path()), ec.message()));
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.text_hash = key.text_hash;
  h.vocab_hash = key.vocab_hash;
  h.options_hash = key.options_hash;
  h.count = ids.size();
  h.checksum = checksum_of(ids);
  // A temporary file unique to this process and write (two processes filling the same cache
  // never mix their bytes), every write and the close checked, then renamed into place.
  AtomicFile out(file.string(), /*durable=*/false);
  out.write(&h, kHeaderBytes);
  out.write(ids.data(), ids.size() * sizeof(std::int32_t));
  out.commit();
}

std::filesystem::path default_cache_dir() {
  if (const char* dir = std::getenv("WEDGE_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "wedge";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "wedge";
  return {};
}

}  // namespace wedge::data
