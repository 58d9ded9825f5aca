// bfloat16: the top 16 bits of an IEEE float (sign, the 8-bit exponent, 7 stored mantissa
// bits), so every bf16 value is a float and converting back is a shift. Rounding a float
// to bf16 follows the AVX-512-BF16 conversion (vcvtne2ps2bf16) exactly, so that the
// reference and every kernel round the same way:
//   - zero and subnormal inputs become a zero of the same sign (denormals are flushed);
//   - NaN stays NaN (quieted, the payload's top bits kept);
//   - everything else rounds to nearest, ties to even; values past the largest bf16
//     round to infinity.
// The relative error of one rounding is at most 2^-8 (half a unit of the 8-bit
// significand) for normal results.
//
// Stochastic rounding (for a bf16 copy that is updated in place, where round-to-nearest
// would lose every update smaller than half a unit): x rounds up with probability equal
// to its distance from the bf16 value below, using 16 random bits. Given a counter-based
// random stream it is deterministic for a seed. The expectation of the result is x.
#pragma once

#include <cstdint>
#include <cstring>

namespace wedge::kernels::ref {

inline std::uint32_t float_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float float_from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

inline float bf16_to_float(std::uint16_t h) { return float_from_bits(std::uint32_t{h} << 16); }

inline std::uint16_t float_to_bf16(float x) {
  std::uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);  // zero, subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // ties to even: a tie rounds up only when bit 16 is set
  return static_cast<std::uint16_t>(u >> 16);
}

// x rounded to bf16, as a float.
inline float bf16_round(float x) { return bf16_to_float(float_to_bf16(x)); }

// x rounded to bf16 stochastically with the random bits `r` (the low 16 are used).
// Infinities and NaN pass through as float_to_bf16 converts them; subnormals flush.
inline std::uint16_t float_to_bf16_stochastic(float x, std::uint32_t r) {
  std::uint32_t u = float_bits(x);
  if ((u & 0x7f800000u) == 0) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  if ((u & 0x7f800000u) == 0x7f800000u) return float_to_bf16(x);  // inf, NaN
  const std::uint32_t up = u + (r & 0xffffu);  // carries into bit 16 with probability low/2^16
  // Rounding up the largest finite magnitude would reach infinity; keep it finite (the
  // value is within one unit of the largest bf16, which is where it belongs).
  if ((up & 0x7f800000u) == 0x7f800000u) return static_cast<std::uint16_t>(u >> 16);
  return static_cast<std::uint16_t>(up >> 16);
}

}  // namespace wedge::kernels::ref
