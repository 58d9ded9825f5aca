// Inverted dropout over one span of elements, written once for both widths: the vector
// Philox of engine/philox.h and the reference's rounding. Shared by dropout_simd.cpp and
// the residual layer norm of layer_norm_simd.cpp, which drops one row at a time.
// Include after kernels/cpu/simd.h.
#pragma once

#include <cstdint>

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

// philox_uniform(seed, 4 * first + e) for the 4 kLanes elements e of the kLanes consecutive
// counters first .. first + kLanes - 1, in element order: u[q] holds elements
// kLanes q .. kLanes q + kLanes - 1.
[[gnu::always_inline]] inline void philox_uniform(std::uint64_t seed, std::uint64_t first, vf u[4]) {
  const vi base_lo = set1_u32(static_cast<std::uint32_t>(first));
  vi c[4];
  c[0] = add_u32(base_lo, lane_indices());
  // The low word wraps past 2^32 within the lanes: carry into the high word there.
  const vi high = set1_u32(static_cast<std::uint32_t>(first >> 32));
  c[1] = select_u32(less_u32(c[0], base_lo), add_u32(high, set1_u32(1)), high);
  c[2] = zero_u32();
  c[3] = zero_u32();
  std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    vi hi0, lo0, hi1, lo1;
    mulhilo_u32(c[0], 0xD2511F53u, hi0, lo0);
    mulhilo_u32(c[2], 0xCD9E8D57u, hi1, lo1);
    c[0] = xor_u32(xor_u32(hi1, c[1]), set1_u32(k0));
    c[1] = lo1;
    c[2] = xor_u32(xor_u32(hi0, c[3]), set1_u32(k1));
    c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // c[w] lane j is word w of counter first + j; element 4 j + w wants it.
  vi words[4];
  interleave_words(c, words);
  // 24 bits convert to float exactly, and the power-of-two scale is exact: the reference's value.
  for (int q = 0; q < 4; ++q) u[q] = unit_float_u32(words[q]);
}

// float(double(x) * scale) lane by lane: the reference's rounding, once, from the exact product.
inline vf scale_in_double(vf x, vd scale) { return narrow(mul(widen_lo(x), scale), mul(widen_hi(x), scale)); }

// 1 / (1 - p) in double, as the reference; p == 1 keeps nothing (the scale is unused).
inline double dropout_scale(float p) { return p < 1.0f ? 1.0 / (1.0 - double(p)) : 0.0; }

// y[i] = x[i] * keep / (1 - p) for i in [0, n), where element i's mask is drawn at Philox
// index first + i (dropout_forward's offset + its global index), scale = dropout_scale(p).
// Blocks of 4 kLanes elements start on a multiple of 4 of the Philox index, so each block
// is kLanes whole counters. Vectors wholly inside the span load and store plainly; those at
// its ends go through lane masks (a masked-off lane is neither loaded nor stored), so spans
// side by side never touch each other's elements. Dropped lanes become +0, as the
// reference's T(0). x and y may be the same span.
[[gnu::always_inline]] inline void dropout_span(const float* x, float* y, i64 n, float p, double scale,
                                               std::uint64_t seed, std::uint64_t first) {
  constexpr i64 kBlock = 4 * kLanes;
  const vd vscale = set1(scale);
  const vf vp = set1(p);
  for (std::uint64_t g = first & ~std::uint64_t{3}; g < first + static_cast<std::uint64_t>(n); g += kBlock) {
    vf u[4];
    philox_uniform(seed, g >> 2, u);
    for (int q = 0; q < 4; ++q) {
      const i64 start = static_cast<i64>(g - first) + kLanes * q;  // span index of lane 0
      const vmask kept = greater_equal(u[q], vp);
      if (start >= 0 && start + kLanes <= n) {
        store(y + start, keep(kept, scale_in_double(load(x + start), vscale)));
        continue;
      }
      const vmask mask = mask_and_not(first_lanes(n - start), first_lanes(-start));
      if (!any(mask)) continue;
      store_masked(y + start, mask, keep(kept, scale_in_double(load_masked(x + start, mask), vscale)));
    }
  }
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
