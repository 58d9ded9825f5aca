// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. The random number for index i under key `seed` is a pure
// function of (seed, i), so any device, any thread, in any order, computes the same
// value. That is what makes dropout masks identical on CPU and CUDA and lets backward
// recompute a mask instead of storing it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define WEDGE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define WEDGE_HOST_DEVICE inline
#endif

namespace wedge {

struct Philox4 {
  std::uint32_t v[4];
};

WEDGE_HOST_DEVICE std::uint32_t philox_mulhi(std::uint32_t a, std::uint32_t b,
                                             std::uint32_t* lo) {
  std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *lo = static_cast<std::uint32_t>(p);
  return static_cast<std::uint32_t>(p >> 32);
}

// Ten rounds of Philox-4x32 on a 128-bit counter under a 64-bit key.
WEDGE_HOST_DEVICE Philox4 philox4x32(std::uint64_t counter, std::uint64_t seed) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter), c1 = static_cast<std::uint32_t>(counter >> 32);
  std::uint32_t c2 = 0, c3 = 0;
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t lo0, lo1;
    std::uint32_t hi0 = philox_mulhi(0xD2511F53u, c0, &lo0);
    std::uint32_t hi1 = philox_mulhi(0xCD9E8D57u, c2, &lo1);
    std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) with 24 random bits, for element `index` of stream `seed`.
// One Philox block gives four 32-bit words: elements 4c .. 4c+3 take words 0..3 of
// counter c, so a vector kernel spends one block on four elements.
WEDGE_HOST_DEVICE float philox_uniform(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(philox4x32(index >> 2, seed).v[index & 3] >> 8) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller on two 32-bit outputs of the same counter), as double.
// Used for parameter initialisation on the host.
double philox_normal(std::uint64_t seed, std::uint64_t index);

}  // namespace wedge
