// Embedding lookup and its deterministic backward.
//
// Backward is a scatter-add: gtable[v] = sum of gout[i] over the positions i with
// ids[i] == v. The obvious kernel (one thread per (i, d) doing atomicAdd into gtable)
// adds a frequent token's rows in whatever order threads happen to run, so two runs
// differ in the last bits. The contract asks for the sum in increasing i, like the CPU.
// Scanning all n ids for each of the V = 30,522 rows would cost V * n; instead the ids
// are bucketed by a counting sort, and each vocabulary row then sums its own bucket:
//   1. count[v]   = number of i with ids[i] == v        (integer atomics: exact)
//   2. start[v]   = exclusive prefix sum of count         (one block)
//   3. position i is written into bucket v = ids[i]      (integer atomics pick the slot,
//                                                          so the order inside a bucket
//                                                          is arbitrary...)
//   4. one block per row v: ranks its bucket's positions (the rank of i is how many
//      positions in the bucket are smaller; they are distinct), which puts them in
//      increasing order — undoing 3's arbitrary order — then one thread per column adds
//      gout[i, d] over the ordered bucket, starting from 0.
// Only integers go through atomics; every float is added in increasing i, exactly the
// order of kernels/ref, so the result is bit-identical to the CPU reference and to itself.
// Cost: O(n) for steps 1-3, O(n * D) adds plus the sum over buckets of size^2 rank
// comparisons (small for text: even "the" is a few hundred of 4,096 ids).
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace embedding_impl {

inline int column_threads(i64 D) {
  return static_cast<int>(std::min<i64>(256, launch::round_up(D, 32)));
}

__global__ void embedding_gather_kernel(const float* table, const int* ids, i64 D, float* out) {
  const i64 i = blockIdx.x;
  const float* row = table + static_cast<i64>(ids[i]) * D;
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) out[i * D + d] = row[d];
}

__global__ void count_ids_kernel(const int* ids, i64 n, int* count) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) atomicAdd(&count[ids[i]], 1);
}

// Exclusive prefix sum of count (V entries) into start (V + 1 entries; start[V] = n).
// One block: thread t owns the contiguous segment [t * segment, (t + 1) * segment),
// totals its counts, thread 0 scans the 1024 totals, then each thread writes its
// segment's starts. Integer adds: exact in any order.
__global__ void bucket_starts_kernel(const int* count, i64 V, i64 segment, int* start) {
  __shared__ int segment_start[launch::kScanThreads];
  __shared__ int grand_total;
  const i64 begin = static_cast<i64>(threadIdx.x) * segment;
  const i64 end = min_i64(V, begin + segment);
  int local = 0;
  for (i64 v = begin; v < end; ++v) local += count[v];
  segment_start[threadIdx.x] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    int running = 0;
    for (unsigned t = 0; t < blockDim.x; ++t) {
      const int total = segment_start[t];
      segment_start[t] = running;
      running += total;
    }
    grand_total = running;
  }
  __syncthreads();
  int running = segment_start[threadIdx.x];
  for (i64 v = begin; v < end; ++v) {
    start[v] = running;
    running += count[v];
  }
  if (threadIdx.x == 0) start[V] = grand_total;
}

__global__ void fill_buckets_kernel(const int* ids, i64 n, const int* start, int* fill, int* bucketed) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    const int v = ids[i];
    bucketed[start[v] + atomicAdd(&fill[v], 1)] = static_cast<int>(i);
  }
}

// One block per vocabulary row v: order the bucket, then sum it column by column.
__global__ void embedding_row_sum_kernel(const float* gout, i64 D, const int* start, const int* bucketed,
                                         int* ordered, float* gtable) {
  const i64 v = blockIdx.x;
  const int first = start[v], size = start[v + 1] - first;
  for (int e = threadIdx.x; e < size; e += blockDim.x) {
    const int position = bucketed[first + e];
    int rank = 0;
    for (int other = 0; other < size; ++other) rank += bucketed[first + other] < position ? 1 : 0;
    ordered[first + rank] = position;
  }
  // The ordered bucket was written by this block's threads in global memory; the barrier
  // makes those writes visible to the whole block.
  __syncthreads();
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int e = 0; e < size; ++e) acc += gout[static_cast<i64>(ordered[first + e]) * D + d];
    gtable[v * D + d] = acc;
  }
}

}  // namespace embedding_impl

using namespace embedding_impl;

void embedding_forward(const float* table, const int32_t* ids, i64 n, i64 V, i64 D, float* out) {
  if (n <= 0 || D <= 0) return;
  WEDGE_LAUNCH(grid_1d(n), column_threads(D), 0, embedding_gather_kernel)(table, ids, D, out);
  check_launch("embedding_gather_kernel");
}

void embedding_backward(const int32_t* ids, const float* gout, i64 n, i64 V, i64 D, float* gtable) {
  if (V <= 0 || D <= 0) return;
  if (n <= 0) return fill(gtable, 0.0f, V * D);
  if (n > 2147483647LL) throw std::runtime_error("cuda embedding_backward: more than 2^31 ids");
  Scratch<int> count(V), start(V + 1), fill_level(V), bucketed(n), ordered(n);
  zero_async(count.get(), sizeof(int) * static_cast<std::size_t>(V));
  zero_async(fill_level.get(), sizeof(int) * static_cast<std::size_t>(V));
  const dim3 id_grid = grid_1d(launch::elementwise_blocks(n));
  WEDGE_LAUNCH(id_grid, launch::kElementwiseThreads, 0, count_ids_kernel)(ids, n, count.get());
  check_launch("count_ids_kernel");
  WEDGE_LAUNCH(dim3(1), launch::kScanThreads, 0, bucket_starts_kernel)(count.get(), V, launch::scan_segment(V),
                                                                       start.get());
  check_launch("bucket_starts_kernel");
  WEDGE_LAUNCH(id_grid, launch::kElementwiseThreads, 0, fill_buckets_kernel)(ids, n, start.get(),
                                                                            fill_level.get(), bucketed.get());
  check_launch("fill_buckets_kernel");
  WEDGE_LAUNCH(grid_1d(V), column_threads(D), 0, embedding_row_sum_kernel)(gout, D, start.get(), bucketed.get(),
                                                                           ordered.get(), gtable);
  check_launch("embedding_row_sum_kernel");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
