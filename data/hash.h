// A small streaming 64-bit content hash (FNV-1a) for cache keys and cache checksums. It is
// not cryptographic; it only has to notice that a text, a vocabulary or a cache file changed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace wedge::data {

class Fnv1a64 {
 public:
  Fnv1a64& add(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint64_t h = state_;
    for (std::size_t i = 0; i < size; ++i) {
      h ^= p[i];
      h *= 0x100000001B3ull;
    }
    state_ = h;
    return *this;
  }
  Fnv1a64& add(std::string_view s) {
    add(s.data(), s.size());
    // a separator, so that ("ab","c") and ("a","bc") hash differently
    const unsigned char end = 0xFF;
    return add(&end, 1);
  }
  Fnv1a64& add_u64(std::uint64_t v) { return add(&v, sizeof v); }
  std::uint64_t value() const { return state_; }

 private:
  std::uint64_t state_ = 0xCBF29CE484222325ull;
};

}  // namespace wedge::data
