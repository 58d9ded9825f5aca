// Dropout, threaded, and equal to the reference kernel bit for bit: it draws the same
// Philox-4x32-10 numbers as engine/philox.h, one counter per lane (4 kLanes elements at a
// time), and scales in double as the reference does. One source for both widths (simd.h).
#include "kernels/cpu/simd.h"

#include <cstdint>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {

// philox_uniform(seed, 4 * first + e) for the 4 kLanes elements e of the kLanes consecutive
// counters first .. first + kLanes - 1, in element order: u[q] holds elements
// kLanes q .. kLanes q + kLanes - 1.
inline void philox_uniform(std::uint64_t seed, std::uint64_t first, vf u[4]) {
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

}  // namespace

void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  // 1 / (1 - p) in double, as the reference; p == 1 keeps nothing (scale unused).
  const double scale = p < 1.0f ? 1.0 / (1.0 - double(p)) : 0.0;
  const vd vscale = set1(scale);
  const vf vp = set1(p);
  constexpr i64 kBlock = 4 * kLanes;
  // Blocks of 4 kLanes elements that start on a multiple of 4 of the global index offset +
  // i, so each block is kLanes whole Philox counters. Vectors wholly inside [i0, i1) load
  // and store plainly; the few at the ends of a chunk go through lane masks (a masked-off
  // lane is neither loaded nor stored), so neighbouring chunks never touch each other's
  // elements. Dropped lanes become +0, as the reference's T(0).
  parallel_for(0, n, 1 << 13, [&](i64 i0, i64 i1) {
    const std::uint64_t g0 = (offset + static_cast<std::uint64_t>(i0)) & ~std::uint64_t{3};
    for (std::uint64_t g = g0; g < offset + static_cast<std::uint64_t>(i1); g += kBlock) {
      vf u[4];
      philox_uniform(seed, g >> 2, u);
      for (int q = 0; q < 4; ++q) {
        const i64 start = static_cast<i64>(g - offset) + kLanes * q;  // local index of lane 0
        const vmask kept = greater_equal(u[q], vp);
        if (start >= i0 && start + kLanes <= i1) {
          store(y + start, keep(kept, scale_in_double(load(x + start), vscale)));
          continue;
        }
        const vmask mask = mask_and_not(first_lanes(i1 - start), first_lanes(i0 - start));
        if (!any(mask)) continue;
        store_masked(y + start, mask, keep(kept, scale_in_double(load_masked(x + start, mask), vscale)));
      }
    }
  });
}

void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  // Linear in its input with the same mask: the same map applied to gy.
  dropout_forward(gy, gx, n, p, seed, offset);
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
