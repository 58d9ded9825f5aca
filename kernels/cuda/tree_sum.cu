// The sum of count equal slices in the tree order of Communicator::tree_mid
// (engine/distributed.h): the GPU side of the sums over ranks (engine/nccl.h gathers the
// ranks' slices, this adds them). Each thread owns elements and walks the split tree for
// each, so the additions are the reference's, one by one: the same bits.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace tree_sum_impl {

// The deepest split tree a count of slices can have (count < 2^31).
constexpr int kMaxDepth = 32;

__device__ __forceinline__ i64 tree_mid(i64 lo, i64 hi) { return lo + (hi - lo + 1) / 2; }

// The sum of slices [0, count) at element i. A post-order walk with an explicit stack (no
// recursion on the GPU): each stacked range waits, with its left half's sum, for its right
// half.
__device__ float tree_sum_at(const float* slices, i64 n, i64 count, i64 i) {
  i64 stack_lo[kMaxDepth], stack_hi[kMaxDepth];
  float left[kMaxDepth];
  int depth = 0;
  i64 lo = 0, hi = count;
  for (;;) {
    while (hi - lo > 1) {  // down to the leftmost leaf of [lo, hi)
      stack_lo[depth] = lo;
      stack_hi[depth] = hi;
      ++depth;
      hi = tree_mid(lo, hi);
    }
    float sum = slices[lo * n + i];
    for (;;) {  // up: [lo, hi) is summed; it is its parent's left half or right half
      if (depth == 0) return sum;
      const i64 parent_lo = stack_lo[depth - 1], parent_hi = stack_hi[depth - 1];
      const i64 mid = tree_mid(parent_lo, parent_hi);
      if (hi == mid) {  // the left half: keep it, sum the right half
        left[depth - 1] = sum;
        lo = mid;
        hi = parent_hi;
        break;
      }
      sum = left[depth - 1] + sum;
      lo = parent_lo;
      hi = parent_hi;
      --depth;
    }
  }
}

__global__ void tree_sum_kernel(const float* slices, i64 n, i64 count, float* out) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) out[i] = tree_sum_at(slices, n, count, i);
}

}  // namespace tree_sum_impl

void tree_sum(const float* slices, i64 n, i64 count, float* out) {
  if (n <= 0 || count <= 0) return;
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0, tree_sum_impl::tree_sum_kernel)
  (slices, n, count, out);
  check_launch("tree_sum_kernel");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
