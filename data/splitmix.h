// splitmix64 (Steele, Lea & Flood 2014): a tiny, well-mixed 64-bit generator. Every seeded
// choice of the data room (epoch orders, the synthetic corpora) draws from it, so a seed
// gives the same data on every platform and standard library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wedge::data {

struct SplitMix64 {
  std::uint64_t state;

  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n >= 1: Lemire's multiply-shift (negligible bias for n < 2^32).
  std::size_t below(std::size_t n) {
    return static_cast<std::size_t>((static_cast<unsigned __int128>(next()) * n) >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
  bool coin(double p) { return uniform() < p; }
};

}  // namespace wedge::data
