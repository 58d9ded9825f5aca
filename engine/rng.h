// The random-number generator: counter-based (Philox, engine/philox.h) and seeded.
//
// A Generator is just (seed, offset): every consumer asks for a block of `n` counters and
// gets the offset of its first one, so a result never depends on thread scheduling or on
// the device, and the generator's whole state is two integers that a checkpoint can
// store. The same seed gives bit-identical numbers run after run.
#pragma once

#include <cstdint>

namespace wedge {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }
  void set_state(std::uint64_t seed, std::uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves n counters; returns the first.
  std::uint64_t reserve(std::uint64_t n) {
    if (slice_rows_ != batch_rows_) return reserve_slice(n);
    std::uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  // Data parallelism (engine/distributed.h): this process runs rows [first_row, first_row +
  // rows) of a batch of batch_rows, and every draw is over a row-major tensor whose leading
  // axis is those rows (a dropout mask). reserve(n) then returns the counters these rows have
  // in the whole batch's draw and moves past the whole draw, so each process draws the masks
  // one process would draw for its rows, and the state stays the same on every process.
  // rows == batch_rows (the default) is the plain reserve.
  void set_batch_slice(std::uint64_t first_row, std::uint64_t rows, std::uint64_t batch_rows);
  // A fresh seed for an independent stream (e.g. to initialise one parameter).
  std::uint64_t next_seed();
  // Host-side draws, each consuming one counter.
  double uniform();          // [0, 1)
  double normal();           // standard normal
  std::uint64_t integer(std::uint64_t n);  // [0, n)

 private:
  std::uint64_t reserve_slice(std::uint64_t n);

  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
  std::uint64_t first_row_ = 0, slice_rows_ = 1, batch_rows_ = 1;
};

}  // namespace wedge
