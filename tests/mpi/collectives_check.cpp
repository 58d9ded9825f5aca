// Run under `mpirun -np N` (N >= 2): the communicator's collectives on every rank.
//
// all_reduce_sum must equal, bit for bit, the sum in tree order (Communicator::tree_mid)
// that every rank can compute alone from the same generated inputs, on every rank: a buffer
// longer than one bucket (so the bucketing's seams are crossed, the last bucket short) in
// float and double. With 2 or 3 ranks the tree is rank order; with 4 or more it is not, and
// the inputs must show it (some element where rank order gives other bits). reduce_scatter_sum
// must give each rank that same sum over its shard, and all_gather every rank's shard, for
// uneven shards: one empty, one longer than a round's piece; bounds that are not shards are
// refused. broadcast and all_gather must deliver strings of different lengths. Exits 1
// naming the first mismatches; prints one line on rank 0 when all is well.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/distributed.h"

using wedge::dist::Communicator;

namespace {

// Values of very different magnitudes and signs, so that the order of additions shows in
// the rounding: any other order than the tree's gives other bits somewhere.
template <typename T> T value(int rank, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ULL ^ (i * 0xbf58476d1ce4e5b9ULL);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  const double unit = static_cast<double>(x >> 11) * 0x1p-53 - 0.5;
  const double scale = (x & 3) == 0 ? 1e6 : (x & 3) == 1 ? 1.0 : (x & 3) == 2 ? 1e-6 : 1e3;
  return static_cast<T>(unit * scale);
}

// The sum over ranks lo .. hi - 1 of element i, as distributed.h defines the tree: split
// after the first ceil((hi - lo) / 2) ranks, sum each half alike, add left + right. Written
// out here rather than taken from Communicator::tree_mid, so that a wrong split fails.
template <typename T> T tree_order(int lo, int hi, std::size_t i) {
  if (hi - lo == 1) return value<T>(lo, i);
  const int mid = lo + (hi - lo + 1) / 2;
  return tree_order<T>(lo, mid, i) + tree_order<T>(mid, hi, i);
}

template <typename T> T rank_order(int ranks, std::size_t i) {
  T sum = value<T>(0, i);
  for (int r = 1; r < ranks; ++r) sum += value<T>(r, i);
  return sum;
}

// Every digit that tells two values of T apart.
template <typename T> std::string exact(T x) {
  char text[40];
  std::snprintf(text, sizeof text, "%.*g", std::numeric_limits<T>::max_digits10, static_cast<double>(x));
  return text;
}

int failures = 0;
void fail(const Communicator& comm, const std::string& what) {
  if (failures++ < 5) std::fprintf(stderr, "rank %d: %s\n", comm.rank(), what.c_str());
}

// The elements a rank moves per round of a sharded collective, and per bucket of
// all_reduce_sum: N of them fill kBucketBytes.
template <typename T> std::size_t piece(const Communicator& comm) {
  return Communicator::kBucketBytes / (sizeof(T) * static_cast<std::size_t>(comm.size()));
}

// Whether values[from, to) holds the tree-order sum; names the first element that does not.
template <typename T>
void expect_tree_sums(const Communicator& comm, const std::vector<T>& values, std::size_t from, std::size_t to,
                      const std::string& what) {
  for (std::size_t i = from; i < to; ++i) {
    const T expected = tree_order<T>(0, comm.size(), i);
    if (values[i] != expected) {
      fail(comm, what + ": element " + std::to_string(i) + " is " + exact(values[i]) +
                     ", the sum in tree order is " + exact(expected));
      return;
    }
  }
}

template <typename T> std::vector<T> generated(const Communicator& comm, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(comm.rank(), i);
  return v;
}

template <typename T> void check_all_reduce(const Communicator& comm, const std::string& type) {
  const std::size_t n = 2 * piece<T>(comm) + 17;
  std::vector<T> v = generated<T>(comm, n);
  comm.all_reduce_sum(v);
  expect_tree_sums(comm, v, 0, n, type + " all_reduce_sum");
  std::size_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) differ += tree_order<T>(0, comm.size(), i) != rank_order<T>(comm.size(), i);
  if (comm.size() >= 4 && differ == 0)
    fail(comm, type + ": the tree order and rank order agree on every element, so this check cannot tell them apart");
}

// Two all-reduces in halves, started before either finishes, with progress() between (as
// the backward pass does): one longer than a bucket, one short; both end in tree order.
// With two ranks the second is finished first. With more, each ends in an all-gather that
// progress() must start by itself once the reduce-scatter has arrived (then the two may
// finish in any order); and a sum finished before an earlier one has started its all-gather
// is refused, the two then finishing in order.
void check_started_all_reduce(const Communicator& comm) {
  const std::size_t n = piece<float>(comm) + 33;
  std::vector<float> long_one = generated<float>(comm, n), short_one(long_one.begin(), long_one.begin() + 100);
  std::vector<Communicator::PendingSum> pending;
  pending.push_back(comm.start_all_reduce_sum(long_one));
  pending.push_back(comm.start_all_reduce_sum(short_one));
  if (comm.size() == 2) {
    for (int i = 0; i < 10; ++i) comm.progress(pending);
  } else {
    const auto gathering = [&] { return pending[0].all_gather_started() && pending[1].all_gather_started(); };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!gathering() && std::chrono::steady_clock::now() < deadline) comm.progress(pending);
    if (!gathering()) fail(comm, "progress() did not start the all-gathers of two started all-reduces within 30 s");
  }
  comm.finish(pending[1]);
  comm.finish(pending[0]);
  expect_tree_sums(comm, long_one, 0, n, "start_all_reduce_sum (two buckets)");
  expect_tree_sums(comm, short_one, 0, short_one.size(), "start_all_reduce_sum (finished first)");
  if (comm.size() > 2) {
    std::vector<float> first = generated<float>(comm, 300), second = generated<float>(comm, 70);
    std::vector<Communicator::PendingSum> in_turn;
    in_turn.push_back(comm.start_all_reduce_sum(first));
    in_turn.push_back(comm.start_all_reduce_sum(second));
    bool refused = false;
    try {
      comm.finish(in_turn[1]);
    } catch (const std::logic_error&) {
      refused = true;
    }
    if (!refused) fail(comm, "finishing an all-reduce before an earlier one had started its all-gather did not throw");
    comm.finish(in_turn[0]);
    comm.finish(in_turn[1]);
    expect_tree_sums(comm, first, 0, first.size(), "start_all_reduce_sum (finished in turn)");
    expect_tree_sums(comm, second, 0, second.size(), "start_all_reduce_sum (finished in turn, second)");
  }
  bool threw = false;
  try {
    comm.finish(pending[0]);
  } catch (const std::logic_error&) {
    threw = true;
  }
  if (!threw) fail(comm, "finishing a sum twice did not throw");
}

// Uneven shards: rank 1's is empty, the last rank's `last` long, the others' ~1000 and
// different. The checks take a last shard longer than one round's piece (it goes through
// in two rounds, the second short) and one shorter than the others (every shard fits in one
// round, which then moves less than a piece per rank).
std::vector<std::size_t> uneven_bounds(const Communicator& comm, std::size_t last) {
  std::vector<std::size_t> bounds{0};
  for (int r = 0; r < comm.size(); ++r) {
    const std::size_t length = r == 1 ? 0 : r == comm.size() - 1 ? last : 1000 + 7 * static_cast<std::size_t>(r);
    bounds.push_back(bounds.back() + length);
  }
  return bounds;
}

void check_reduce_scatter(const Communicator& comm, std::size_t last) {
  const std::vector<std::size_t> bounds = uneven_bounds(comm, last);
  std::vector<float> v = generated<float>(comm, bounds.back());
  comm.reduce_scatter_sum(v, bounds);
  const auto r = static_cast<std::size_t>(comm.rank());
  expect_tree_sums(comm, v, bounds[r], bounds[r + 1], "reduce_scatter_sum");
  // Started and finished apart, with progress() between: the same sums.
  std::vector<float> w = generated<float>(comm, bounds.back());
  std::vector<Communicator::PendingSum> pending;
  pending.push_back(comm.start_reduce_scatter_sum(w, bounds));
  for (int i = 0; i < 10; ++i) comm.progress(pending);
  comm.finish(pending[0]);
  expect_tree_sums(comm, w, bounds[r], bounds[r + 1], "start_reduce_scatter_sum");
}

// Each rank fills its own shard, NaN elsewhere; every element must come back from its shard's owner.
template <typename T> void check_all_gather(const Communicator& comm, const std::string& type, std::size_t last) {
  const std::vector<std::size_t> bounds = uneven_bounds(comm, last);
  std::vector<T> v(bounds.back(), std::numeric_limits<T>::quiet_NaN());
  const auto me = static_cast<std::size_t>(comm.rank());
  for (std::size_t i = bounds[me]; i < bounds[me + 1]; ++i) v[i] = value<T>(comm.rank(), i);
  comm.all_gather(std::span<T>(v), bounds);
  for (int s = 0; s < comm.size(); ++s) {
    const auto from = bounds[static_cast<std::size_t>(s)], to = bounds[static_cast<std::size_t>(s) + 1];
    for (std::size_t i = from; i < to; ++i)
      if (v[i] != value<T>(s, i)) {
        fail(comm, type + " all_gather: element " + std::to_string(i) + " of rank " + std::to_string(s) + "'s shard is " +
                       exact(v[i]));
        return;
      }
  }
}

// Bounds that are not shards of values are refused before any rank communicates.
void check_bad_bounds(const Communicator& comm) {
  const auto n = static_cast<std::size_t>(comm.size());
  std::vector<float> v(10 * n);
  std::vector<std::size_t> good(n + 1);
  for (std::size_t r = 0; r <= n; ++r) good[r] = 10 * r;
  auto with = [&](std::size_t at, std::size_t offset) {
    std::vector<std::size_t> b = good;
    b[at] = offset;
    return b;
  };
  const std::vector<std::vector<std::size_t>> bad = {
      std::vector<std::size_t>(good.begin(), good.end() - 1),  // one offset short
      with(0, 1),                                              // does not start at 0
      with(n, 10 * n - 1),                                     // ends short of values.size()
      with(1, 21),                                             // decreases after bounds[1]
  };
  for (const auto& bounds : bad) {
    for (const bool gather : {false, true}) {
      try {
        if (gather) comm.all_gather(std::span<float>(v), bounds);
        else comm.reduce_scatter_sum(v, bounds);
        fail(comm, std::string(gather ? "all_gather" : "reduce_scatter_sum") + " accepted bad shard bounds");
      } catch (const std::invalid_argument&) {
      }
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

void check_strings(const Communicator& comm) {
  std::string text = comm.is_root() ? std::string("from rank 0, with a \0 inside", 28) : std::string("stale");
  comm.broadcast(text);
  if (text != std::string("from rank 0, with a \0 inside", 28)) fail(comm, "broadcast(string) delivered '" + text + "'");

  const std::vector<std::string> all = comm.all_gather(std::string(static_cast<std::size_t>(comm.rank()) * 3, 'a' + static_cast<char>(comm.rank())));
  if (all.size() != static_cast<std::size_t>(comm.size())) fail(comm, "all_gather returned " + std::to_string(all.size()) + " parts");
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] != std::string(r * 3, 'a' + static_cast<char>(r))) fail(comm, "all_gather part " + std::to_string(r) + " is '" + all[r] + "'");
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
  check_started_all_reduce(comm);
  for (const std::size_t last : {piece<float>(comm) + 17, std::size_t{5}}) {
    check_reduce_scatter(comm, last);
    check_all_gather<float>(comm, "float", last);
  }
  for (const std::size_t last : {piece<double>(comm) + 17, std::size_t{5}}) check_all_gather<double>(comm, "double", last);
  check_bad_bounds(comm);
  check_timeout_setting(comm);
  check_strings(comm);

  comm.barrier();
  if (failures > 0) return 1;
  if (comm.is_root())
    std::printf("collectives: all-reduce in tree order (float, double; %d ranks, 3 buckets; started and finished apart, all-gathers started by progress), reduce-scatter (also started and "
                "finished apart), all-gather (uneven shards), broadcast, string all-gather ok\n",
                comm.size());
  Communicator::finalize();
  return 0;
}
