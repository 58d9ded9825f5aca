// Softmax and log-softmax over the last axis, and the fused softmax cross-entropy over a
// vocabulary row.
//
// One block per row (launch.h row_threads: one warp for a 256-wide row, 1024 threads for
// a 30,522-wide vocabulary row). Each thread keeps a running (max, sum of exp) over its
// strided elements — the online softmax, one read of the row instead of two — and the
// block merges those pairs with warp shuffles and one shared-memory step (common.cuh
// block_max_sum), in a fixed order. Every sum is therefore formed the same way on every
// run: deterministic.
//
// Cross-entropy never materialises probabilities: forward keeps only lse[row]; backward
// recomputes softmax from the logits and lse, writing the gradient straight away.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace softmax_impl {

// Row max and sum of exp(x - max) over the whole row, known to every thread.
__device__ __forceinline__ MaxSum row_max_sum(const float* row, i64 n) {
  MaxSum local = max_sum_identity();
  for (i64 j = threadIdx.x; j < n; j += blockDim.x) local = max_sum_push(local, row[j]);
  return block_max_sum(local);
}

// softmax:     y_j = exp(x_j - max) / sum
// log_softmax: y_j = (x_j - max) - log(sum)
// (x_j - max is exact for nearby values, so these lose less than exp(x_j - lse) would.)
// In place (x == y) is fine: the whole row is read before the first barrier of the merge.
__global__ void softmax_forward_kernel(const float* x, float* y, i64 n, bool log) {
  const i64 row = blockIdx.x;
  const float* xr = x + row * n;
  float* yr = y + row * n;
  const MaxSum ms = row_max_sum(xr, n);
  if (log) {
    const float log_sum = logf(ms.sum);
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) yr[j] = (xr[j] - ms.max) - log_sum;
  } else {
    const float inv_sum = 1.0f / ms.sum;
    for (i64 j = threadIdx.x; j < n; j += blockDim.x) yr[j] = expf(xr[j] - ms.max) * inv_sum;
  }
}

//   softmax:     gx = y (gy - sum(gy y))
//   log_softmax: gx = gy - exp(y) sum(gy)
__global__ void softmax_backward_kernel(const float* y, const float* gy, float* gx, i64 n, bool log) {
  const i64 row = blockIdx.x;
  const float* yr = y + row * n;
  const float* gyr = gy + row * n;
  float* gxr = gx + row * n;
  float local = 0.0f;
  for (i64 j = threadIdx.x; j < n; j += blockDim.x) local += log ? gyr[j] : gyr[j] * yr[j];
  const float total = block_sum(local);
  for (i64 j = threadIdx.x; j < n; j += blockDim.x) {
    gxr[j] = log ? gyr[j] - expf(yr[j]) * total : yr[j] * (gyr[j] - total);
  }
}

// lse[row] = log sum_j exp(logits[row, j]) for every row, ignored or not (as kernels/ref).
__global__ void row_lse_kernel(const float* logits, i64 V, float* lse) {
  const i64 row = blockIdx.x;
  const MaxSum ms = row_max_sum(logits + row * V, V);
  if (threadIdx.x == 0) lse[row] = ms.max + logf(ms.sum);
}

// One block sums nll_r = lse_r - logits[r, t_r] over the counted rows (in double, in a
// fixed order), then writes loss = total / count and count. Reading one logit per row,
// this is tiny next to the row pass; a single block keeps it free of atomics.
__global__ void cross_entropy_loss_kernel(const float* logits, const int* targets, const float* lse,
                                          i64 rows, i64 V, int ignore_index, float* loss, float* count) {
  double total = 0.0;
  int counted = 0;
  for (i64 r = threadIdx.x; r < rows; r += blockDim.x) {
    const int t = targets[r];
    if (t == ignore_index) continue;
    total += static_cast<double>(lse[r]) - static_cast<double>(logits[r * V + t]);
    ++counted;
  }
  total = block_sum(total);
  counted = block_sum(counted);
  if (threadIdx.x == 0) {
    *loss = counted > 0 ? static_cast<float>(total / counted) : 0.0f;
    *count = static_cast<float>(counted);
  }
}

// glogits[r, j] = (exp(logits[r, j] - lse[r]) - [j == t_r]) * gloss / count; 0 on ignored rows.
// gloss and count are read on the device: no host synchronisation to learn them.
__global__ void cross_entropy_backward_kernel(const float* logits, const int* targets, const float* lse,
                                              const float* count, const float* gloss, i64 V,
                                              int ignore_index, float* glogits) {
  const i64 row = blockIdx.x;
  const int t = targets[row];
  float* grow = glogits + row * V;
  if (t == ignore_index) {
    for (i64 j = threadIdx.x; j < V; j += blockDim.x) grow[j] = 0.0f;
    return;
  }
  const float* xr = logits + row * V;
  const float n = *count;
  const float scale = n > 0.0f ? *gloss / n : 0.0f;
  const float row_lse = lse[row];
  for (i64 j = threadIdx.x; j < V; j += blockDim.x) {
    const float prob = expf(xr[j] - row_lse);
    grow[j] = (j == t ? prob - 1.0f : prob) * scale;
  }
}

}  // namespace softmax_impl

using namespace softmax_impl;

void softmax_forward(const float* x, float* y, i64 rows, i64 n, bool log) {
  if (rows <= 0 || n <= 0) return;
  WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(n), 0, softmax_forward_kernel)(x, y, n, log);
  check_launch("softmax_forward_kernel");
}

void softmax_backward(const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log) {
  if (rows <= 0 || n <= 0) return;
  WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(n), 0, softmax_backward_kernel)(y, gy, gx, n, log);
  check_launch("softmax_backward_kernel");
}

void cross_entropy_forward(const float* logits, const int32_t* targets, i64 rows, i64 V,
                           int32_t ignore_index, float* lse, float* loss, float* count) {
  if (rows > 0 && V > 0) {
    WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(V), 0, row_lse_kernel)(logits, V, lse);
    check_launch("row_lse_kernel");
  }
  WEDGE_LAUNCH(dim3(1), 1024, 0, cross_entropy_loss_kernel)(logits, targets, lse, rows > 0 ? rows : 0, V,
                                                            ignore_index, loss, count);
  check_launch("cross_entropy_loss_kernel");
}

void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                            const float* count, const float* gloss, i64 rows, i64 V,
                            int32_t ignore_index, float* glogits) {
  if (rows <= 0 || V <= 0) return;
  WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(V), 0, cross_entropy_backward_kernel)(
      logits, targets, lse, count, gloss, V, ignore_index, glogits);
  check_launch("cross_entropy_backward_kernel");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
