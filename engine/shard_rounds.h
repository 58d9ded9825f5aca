// How the sharded collectives of engine/distributed.h (MPI) and engine/nccl.h (NCCL)
// cut their work into rounds. Internal to those two files.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "engine/distributed.h"

namespace wedge::dist {

// Shard bounds as distributed.h defines them, or std::invalid_argument saying what is
// wrong, the collective named.
void check_shard_bounds(std::span<const std::size_t> bounds, std::size_t n_values, int n_ranks, const char* collective);

// The even shards of an all-reduce over more than two ranks: rank r's [r n / N, (r + 1) n / N).
inline std::vector<std::size_t> even_bounds(std::size_t n, int ranks) {
  std::vector<std::size_t> bounds;
  for (std::size_t r = 0; r <= static_cast<std::size_t>(ranks); ++r) bounds.push_back(r * n / static_cast<std::size_t>(ranks));
  return bounds;
}

// How many elements of T one rank contributes to a bucket of all_reduce_sum or a round of
// the sharded collectives, so that the N ranks' pieces together fit in kBucketBytes. That
// bound also keeps every count and offset that MPI sees an int.
static_assert(Communicator::kBucketBytes <= 0x7fffffff);
template <typename T> std::size_t piece_elements(int n_ranks) {
  return std::max<std::size_t>(1, Communicator::kBucketBytes / (sizeof(T) * static_cast<std::size_t>(n_ranks)));
}

// The sharded collectives move the shards in rounds: round k carries elements
// [k * piece, (k + 1) * piece) of every rank's shard (fewer, or none, where a shard ends
// sooner), packed one rank's piece after another into a buffer of N pieces. So each buffer
// they take is bounded by kBucketBytes, and every count and offset MPI sees is an int,
// however long `values` is (offsets into `values` itself could pass INT_MAX). The price is
// one more pass over the values moved, packing or unpacking them.
class ShardRounds {
 public:
  // `piece`: the most elements of one shard in one round; shorter when every shard is.
  ShardRounds(std::span<const std::size_t> bounds, std::size_t piece) : bounds_(bounds) {
    std::size_t longest = 0;
    for (std::size_t s = 0; s < ranks(); ++s) longest = std::max(longest, bounds[s + 1] - bounds[s]);
    piece_ = std::min(piece, longest);
    rounds_ = piece_ == 0 ? 0 : (longest + piece_ - 1) / piece_;
  }
  std::size_t ranks() const { return bounds_.size() - 1; }
  std::size_t rounds() const { return rounds_; }
  // Elements a packed buffer of one round holds: N pieces.
  std::size_t buffer_elements() const { return piece_ * ranks(); }

  // Round k: where each rank's piece starts in `values`, how long it is, where it is packed.
  struct Round {
    std::vector<std::size_t> first;
    std::vector<int> counts, packed_at;
  };
  Round round(std::size_t k) const {
    Round r;
    for (std::size_t s = 0; s < ranks(); ++s) {
      const std::size_t begin = std::min(bounds_[s] + k * piece_, bounds_[s + 1]);
      r.first.push_back(begin);
      r.counts.push_back(static_cast<int>(std::min(piece_, bounds_[s + 1] - begin)));
      r.packed_at.push_back(static_cast<int>(s * piece_));
    }
    return r;
  }

 private:
  std::span<const std::size_t> bounds_;
  std::size_t piece_ = 0, rounds_ = 0;
};

}  // namespace wedge::dist
