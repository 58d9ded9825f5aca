#include "data/token_cache.h"

#include <fmt/format.h>

#include <bit>
#include <cstdlib>
#include <random>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "data/hash.h"

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
                             std::vector<std::int32_t>& ids) {
  ids.clear();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return CacheStatus::kMissing;
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  std::ifstream in(file, std::ios::binary);
  if (ec || !in || size < kHeaderBytes) return CacheStatus::kCorrupt;
  Header h{};
  in.read(reinterpret_cast<char*>(&h), kHeaderBytes);
  if (!in || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kFormatVersion || h.zero != 0)
    return CacheStatus::kCorrupt;
  if ((size - kHeaderBytes) % sizeof(std::int32_t) != 0 || (size - kHeaderBytes) / sizeof(std::int32_t) != h.count)
    return CacheStatus::kCorrupt;
  // Check the key before reading the payload: a stale file is not worth reading.
  if (!(TokenCacheKey{h.text_hash, h.vocab_hash, h.options_hash} == key)) return CacheStatus::kStale;
  ids.resize(h.count);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(h.count * sizeof(std::int32_t)));
  if (!in || checksum_of(ids) != h.checksum) {
    ids.clear();
    return CacheStatus::kCorrupt;
  }
  return CacheStatus::kHit;
}

void write_token_cache(const std::filesystem::path& file, const TokenCacheKey& key,
                       const std::vector<std::int32_t>& ids) {
  std::error_code ec;
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create cache folder {}: {}", file.parent_path().string(), ec.message()));
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.text_hash = key.text_hash;
  h.vocab_hash = key.vocab_hash;
  h.options_hash = key.options_hash;
  h.count = ids.size();
  h.checksum = checksum_of(ids);
  // A unique temporary name, so two processes filling the same cache never mix their bytes.
  std::filesystem::path tmp = file;
  tmp += fmt::format(".tmp{:08x}", std::random_device{}());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(fmt::format("cannot write cache file {}", tmp.string()));
    out.write(reinterpret_cast<const char*>(&h), kHeaderBytes);
    out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(std::int32_t)));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      throw std::runtime_error(fmt::format("error while writing cache file {}", tmp.string()));
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error(fmt::format("cannot move cache file into place at {}", file.string()));
  }
}

std::filesystem::path default_cache_dir() {
  if (const char* dir = std::getenv("WEDGE_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "wedge";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "wedge";
  return {};
}

}  // namespace wedge::data
