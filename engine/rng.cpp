#include "engine/rng.h"

#include <cmath>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/philox.h"

namespace wedge {

double philox_normal(std::uint64_t seed, std::uint64_t index) {
  const Philox4 r = philox4x32(index, seed);
  // Two 32-bit uniforms in (0, 1] and [0, 1) -> Box-Muller.
  const double u1 = (static_cast<double>(r.v[0]) + 1.0) * 0x1p-32;
  const double u2 = static_cast<double>(r.v[1]) * 0x1p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void Generator::set_batch_slice(std::uint64_t first_row, std::uint64_t rows, std::uint64_t batch_rows) {
  if (rows == 0 || batch_rows == 0 || first_row + rows > batch_rows)
    throw std::invalid_argument(fmt::format("Generator::set_batch_slice: rows [{}, {}) are not a slice of a batch of {}",
                                            first_row, first_row + rows, batch_rows));
  first_row_ = first_row;
  slice_rows_ = rows;
  batch_rows_ = batch_rows;
}

std::uint64_t Generator::reserve_slice(std::uint64_t n) {
  if (n % slice_rows_ != 0)
    throw std::logic_error(fmt::format("Generator: a draw of {} values is not {} rows of a batch slice; a data-parallel "
                                       "draw must be over a tensor whose leading axis is the batch",
                                       n, slice_rows_));
  const std::uint64_t per_row = n / slice_rows_;
  const std::uint64_t first = offset_ + first_row_ * per_row;
  offset_ += per_row * batch_rows_;
  return first;
}

std::uint64_t Generator::next_seed() {
  const Philox4 r = philox4x32(reserve(1), seed_ ^ 0x5eed5eed5eed5eedULL);
  return (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
}

double Generator::uniform() {
  const Philox4 r = philox4x32(reserve(1), seed_);
  return static_cast<double>((static_cast<std::uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11)) * 0x1p-53;
}

double Generator::normal() { return philox_normal(seed_, reserve(1)); }

std::uint64_t Generator::integer(std::uint64_t n) {
  if (n == 0) return 0;
  const Philox4 r = philox4x32(reserve(1), seed_);
  const std::uint64_t x = (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
  return x % n;  // bias below 2^-40 for the n used here (shuffles of < 2^24 items)
}

}  // namespace wedge
