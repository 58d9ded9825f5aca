// The softmax cross-entropy ladder's kernels: four ways to compute, for every row r of
// logits x (rows, V) with target t_r,
//   loss_r  = lse_r - x[r, t_r],               lse_r = log sum_j exp(x[r, j])
//   grad[r] = softmax(x[r]) - onehot(t_r)       (the gradient of sum_r loss_r)
// which is what a language model's head does once per token over the vocabulary. Each
// rung is a step up from the last:
//
//   1. naive     one thread per row, everything from global memory: three sweeps (max,
//                sum of exp, write), and a warp's 32 threads read 32 different rows at
//                once (stride V: no coalescing)
//   2. shared    one block per row; threads stride along the row (coalesced) and combine
//                their partial max, then partial sum, through a shared-memory tree
//                (log2(threads) halvings, a __syncthreads after each)
//   3. warp      one warp per row, eight rows per block: the reductions are five shuffle
//                butterflies, no shared memory and no barrier
//   4. fused     one block per row, the online softmax: each thread keeps a running
//                (max, sum of exp) in one sweep (four loads in flight), merged by
//                shuffles and one 32-slot shared step; the second sweep writes the
//                gradient and the loss together. Two reads of the row instead of three
//                (the engine's scheme, kernels/cuda/softmax.cu)
//
// Targets are in [0, V) (the engine's ignore_index is left out here). Bandwidth-bound: the
// least any rung can move is one read of x and one write of grad. Built two ways (see
// bench/cuda/ladder.cuh): the GPU program bench/cuda/softmax_ladder.cu, and the emulated
// test tests/kernels/test_cuda_ladders_emulated.cpp, which is how CI checks these kernels.
#pragma once

#include "ladder.cuh"

namespace wedge::WEDGE_LADDER_NS::softmax_ce {

using ::wedge::WEDGE_LADDER_NS::kRungs;
using ::wedge::WEDGE_LADDER_NS::Rung;
inline const char* rung_name(Rung r) { return rung_label(r, "4 fused online"); }

// ---- 1. naive ----------------------------------------------------------------------------
constexpr int kNaiveThreads = 128;
__global__ void naive_kernel(const float* x, const int* targets, int rows, int V, float* loss, float* grad) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + std::size_t(row) * V;
  float* gr = grad + std::size_t(row) * V;
  float m = -INFINITY;
  for (int j = 0; j < V; ++j) m = fmaxf(m, xr[j]);
  float sum = 0.0f;
  for (int j = 0; j < V; ++j) sum += expf(xr[j] - m);
  const float lse = m + logf(sum);
  const int t = targets[row];
  for (int j = 0; j < V; ++j) gr[j] = expf(xr[j] - lse) - (j == t ? 1.0f : 0.0f);
  loss[row] = lse - xr[t];
}

// ---- 2. shared-memory tree -----------------------------------------------------------------
__global__ void shared_kernel(const float* x, const int* targets, int V, float* loss, float* grad) {
  __shared__ float slots[kMaxBlockThreads];
  const int row = blockIdx.x;
  const float* xr = x + std::size_t(row) * V;
  float* gr = grad + std::size_t(row) * V;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, xr[j]);
  m = tree_max(m, slots);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(xr[j] - m);
  const float lse = m + logf(tree_sum(sum, slots));
  const int t = targets[row];
  for (int j = threadIdx.x; j < V; j += blockDim.x) gr[j] = expf(xr[j] - lse) - (j == t ? 1.0f : 0.0f);
  if (threadIdx.x == 0) loss[row] = lse - xr[t];
}

// ---- 3. warp shuffles ------------------------------------------------------------------------
constexpr int kWarpsPerBlock = 8;
__global__ void warp_kernel(const float* x, const int* targets, int rows, int V, float* loss, float* grad) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp leaves: no shuffle is left half-attended
  const float* xr = x + std::size_t(row) * V;
  float* gr = grad + std::size_t(row) * V;
  float m = -INFINITY;
  for (int j = lane; j < V; j += 32) m = fmaxf(m, xr[j]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j < V; j += 32) sum += expf(xr[j] - m);
  const float lse = m + logf(warp_sum(sum));
  const int t = targets[row];
  for (int j = lane; j < V; j += 32) gr[j] = expf(xr[j] - lse) - (j == t ? 1.0f : 0.0f);
  if (lane == 0) loss[row] = lse - xr[t];
}

// ---- 4. fused: the online softmax ------------------------------------------------------------
// A running (max, sum of exp(x - max)) absorbs a new element by rescaling the sum when the
// max grows (Milakov & Gimelshein 2018), so one sweep finds both. Two such pairs merge the
// same way, which is what the shuffles combine.
struct MaxSum {
  float max;
  float sum;
};
__device__ __forceinline__ MaxSum max_sum_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};  // both empty (a thread past the end of a short row)
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
// The merge's a*x + b*y may be contracted into an fma that is not symmetric in its
// operands, so partner lanes could differ in the last bit; lane 0's pair is broadcast so
// every thread of the row uses the same lse.
__device__ __forceinline__ MaxSum warp_max_sum(MaxSum v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(kFullMask, v.max, offset), __shfl_xor_sync(kFullMask, v.sum, offset)};
    v = max_sum_merge(v, other);
  }
  return {__shfl_sync(kFullMask, v.max, 0), __shfl_sync(kFullMask, v.sum, 0)};
}

__global__ void fused_kernel(const float* x, const int* targets, int V, float* loss, float* grad) {
  __shared__ float warp_max_values[32];
  __shared__ float warp_sum_values[32];
  const int row = blockIdx.x, stride = blockDim.x;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* xr = x + std::size_t(row) * V;
  float* gr = grad + std::size_t(row) * V;

  // One sweep, four elements per step: the four loads are independent, so they are in
  // flight together, and the running pair is rescaled once per step instead of per element.
  MaxSum ms{-INFINITY, 0.0f};
  int j = threadIdx.x;
  for (; j + 3 * stride < V; j += 4 * stride) {
    const float a = xr[j], b = xr[j + stride], c = xr[j + 2 * stride], d = xr[j + 3 * stride];
    const float m = fmaxf(fmaxf(ms.max, fmaxf(a, b)), fmaxf(c, d));
    ms.sum = ms.sum * expf(ms.max - m) + expf(a - m) + expf(b - m) + expf(c - m) + expf(d - m);
    ms.max = m;
  }
  for (; j < V; j += stride) ms = max_sum_merge(ms, MaxSum{xr[j], 1.0f});

  // Block merge: butterflies within each warp, one shared slot per warp, then every warp
  // merges the slots with the same butterflies, so all threads get the same bits.
  ms = warp_max_sum(ms);
  if (lane == 0) {
    warp_max_values[warp] = ms.max;
    warp_sum_values[warp] = ms.sum;
  }
  __syncthreads();
  ms = warp_max_sum(lane < warps ? MaxSum{warp_max_values[lane], warp_sum_values[lane]} : MaxSum{-INFINITY, 0.0f});
  const float lse = ms.max + logf(ms.sum);

  // Second sweep: the gradient, exp(x - lse) - [j == t]; the row is mostly still in L2.
  const int t = targets[row];
  for (int i = threadIdx.x; i < V; i += stride) gr[i] = expf(xr[i] - lse) - (i == t ? 1.0f : 0.0f);
  if (threadIdx.x == 0) loss[row] = lse - xr[t];
}

// ---- the launches (device pointers on a GPU, host pointers in the emulation) ---------------

inline void run(Rung rung, const float* x, const int* targets, int rows, int V, float* loss, float* grad) {
  if (rows <= 0 || V <= 0) return;
  switch (rung) {
    case Rung::naive:
      LADDER_LAUNCH(dim3(ceil_div(rows, kNaiveThreads)), dim3(kNaiveThreads), 0, naive_kernel)(
          x, targets, rows, V, loss, grad);
      break;
    case Rung::shared:
      LADDER_LAUNCH(dim3(rows), dim3(row_threads(V)), 0, shared_kernel)(x, targets, V, loss, grad);
      break;
    case Rung::warp:
      LADDER_LAUNCH(dim3(ceil_div(rows, kWarpsPerBlock)), dim3(32 * kWarpsPerBlock), 0, warp_kernel)(
          x, targets, rows, V, loss, grad);
      break;
    case Rung::fused:
      LADDER_LAUNCH(dim3(rows), dim3(row_threads(V)), 0, fused_kernel)(x, targets, V, loss, grad);
      break;
  }
}

// The float64 reference: the oracle every rung is checked against.
inline void reference(const std::vector<float>& x, const std::vector<int>& targets, int rows, int V,
                      std::vector<double>& loss, std::vector<double>& grad) {
  loss.assign(std::size_t(rows), 0.0);
  grad.assign(std::size_t(rows) * V, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + std::size_t(r) * V;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j < V; ++j) m = std::max(m, double(xr[j]));
    for (int j = 0; j < V; ++j) sum += std::exp(double(xr[j]) - m);
    const double lse = m + std::log(sum);
    for (int j = 0; j < V; ++j)
      grad[std::size_t(r) * V + j] = std::exp(double(xr[j]) - lse) - (j == targets[r] ? 1 : 0);
    loss[std::size_t(r)] = lse - double(xr[targets[r]]);
  }
}

// float32 against float64: each exp and the sums round; the gradient is O(1) (the target's
// entry is p - 1) and the loss O(log V).
constexpr double kTolerance = 2e-5;

}  // namespace wedge::WEDGE_LADDER_NS::softmax_ce
