// Run under `mpirun -np N` (N >= 2): the communicator's collectives on every rank.
//
// all_reduce_sum must equal, bit for bit, the sum in rank order that every rank can compute
// alone from the same generated inputs, on every rank: a buffer longer than one bucket (so
// the bucketing's seams are crossed, the last bucket short) in float and double; broadcast
// and all_gather must deliver strings of different lengths; set_timeout takes a new timeout
// and refuses a negative one. Exits 1 naming the first mismatch; prints one line on rank 0
// when all is well.
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/distributed.h"

using wedge::dist::Communicator;

namespace {

// Values of very different magnitudes and signs, so that the order of additions shows in
// the rounding: any other order than rank order gives other bits somewhere.
template <typename T> T value(int rank, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ULL ^ (i * 0xbf58476d1ce4e5b9ULL);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  const double unit = static_cast<double>(x >> 11) * 0x1p-53 - 0.5;
  const double scale = (x & 3) == 0 ? 1e6 : (x & 3) == 1 ? 1.0 : (x & 3) == 2 ? 1e-6 : 1e3;
  return static_cast<T>(unit * scale);
}

int failures = 0;
void fail(const Communicator& comm, const std::string& what) {
  if (failures++ < 5) std::fprintf(stderr, "rank %d: %s\n", comm.rank(), what.c_str());
}

template <typename T> void check_all_reduce(const Communicator& comm, const char* type) {
  const std::size_t bucket = Communicator::kBucketBytes / (sizeof(T) * static_cast<std::size_t>(comm.size()));
  const std::size_t n = 2 * bucket + 17;
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(comm.rank(), i);
  comm.all_reduce_sum(v);
  for (std::size_t i = 0; i < n; ++i) {
    T expected = value<T>(0, i);
    for (int r = 1; r < comm.size(); ++r) expected += value<T>(r, i);
    if (v[i] != expected) {
      fail(comm, std::string(type) + " all_reduce_sum: element " + std::to_string(i) + " is " + std::to_string(v[i]) +
                     ", the sum in rank order is " + std::to_string(expected));
      break;
    }
  }
}

void check_timeout_setting(const Communicator& comm) {
  const double before = Communicator::timeout();
  try {
    Communicator::set_timeout(-1);
    fail(comm, "set_timeout(-1) was accepted");
  } catch (const std::invalid_argument&) {
  }
  Communicator::set_timeout(before + 1);
  if (Communicator::timeout() != before + 1) fail(comm, "set_timeout did not change timeout()");
  Communicator::set_timeout(before);
}

}  // namespace

int main() {
  const Communicator& comm = Communicator::world();
  if (comm.size() < 2) {
    std::fprintf(stderr, "run me under mpirun -np N with N >= 2 (this is rank %d of %d)\n", comm.rank(), comm.size());
    return 1;
  }
  check_all_reduce<float>(comm, "float");
  check_all_reduce<double>(comm, "double");
  check_timeout_setting(comm);

  std::string text = comm.is_root() ? std::string("from rank 0, with a \0 inside", 28) : std::string("stale");
  comm.broadcast(text);
  if (text != std::string("from rank 0, with a \0 inside", 28)) fail(comm, "broadcast(string) delivered '" + text + "'");

  const std::vector<std::string> all = comm.all_gather(std::string(static_cast<std::size_t>(comm.rank()) * 3, 'a' + static_cast<char>(comm.rank())));
  if (all.size() != static_cast<std::size_t>(comm.size())) fail(comm, "all_gather returned " + std::to_string(all.size()) + " parts");
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != std::string(r * 3, 'a' + static_cast<char>(r))) fail(comm, "all_gather part " + std::to_string(r) + " is '" + all[r] + "'");

  comm.barrier();
  if (failures > 0) return 1;
  if (comm.is_root()) std::printf("collectives: all-reduce (float, double; %d ranks, 3 buckets), broadcast, all-gather ok\n", comm.size());
  Communicator::finalize();
  return 0;
}
