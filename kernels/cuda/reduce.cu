// Reductions over the middle axis of (outer, n, inner): sum, max with first-index argmax,
// and the sum of squares behind gradient-norm clipping.
//
// Determinism: no atomics. Each output is combined in an order fixed by the shape: a
// thread walks its elements in increasing index, a block combines its threads in a fixed
// tree, and when the axis is long it is cut into chunks (launch.h plan_splits) whose
// partial results a second launch reduces the same way. Two runs give the same bits.
//
// Two kernels cover every layout:
//   rows    (inner == 1): one block per (row, chunk), threads stride along the row.
//   columns (inner  > 1): a block of 32 columns x 8 row phases, so consecutive threads
//                         read consecutive columns (coalesced) while walking down rows.
#include <climits>

#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace reduce_impl {

enum class Kind { Sum, SumSquares, Max };

// (a, ia) wins over (b, ib)? The larger value; NaN beats every number (never hidden);
// among equal values (or two NaNs) the smaller index. A total order, so any combination
// tree picks the same winner: the first maximum, as kernels/ref does.
__device__ __forceinline__ bool better(float a, int ia, float b, int ib) {
  const bool a_nan = is_nan(a), b_nan = is_nan(b);
  if (a_nan || b_nan) return a_nan && (!b_nan || ia < ib);
  return a > b || (a == b && ia < ib);
}

// A thread that saw no element holds this; any real element beats it.
constexpr int kNoIndex = INT_MAX;

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_v = __shfl_xor_sync(kFullMask, v, offset);
    const int other_i = __shfl_xor_sync(kFullMask, i, offset);
    if (better(other_v, other_i, v, i)) {
      v = other_v;
      i = other_i;
    }
  }
}

__device__ __forceinline__ void block_argmax(float& v, int& i) {
  __shared__ float warp_v[32];
  __shared__ int warp_i[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  warp_argmax(v, i);
  __syncthreads();
  if (lane == 0) {
    warp_v[warp] = v;
    warp_i[warp] = i;
  }
  __syncthreads();
  v = lane < warps ? warp_v[lane] : -INFINITY;
  i = lane < warps ? warp_i[lane] : kNoIndex;
  warp_argmax(v, i);
}

// Reduces x (rows, n) over n, chunk by chunk: block b handles row b / splits, chunk
// b % splits, and writes y[row * splits + chunk] (y_idx likewise for Max). x_idx, when
// given, holds the original index of each element (a second stage over partial argmaxes).
// accumulate adds to y instead of overwriting it (only used with splits == 1).
template <Kind kind>
__global__ void reduce_rows_kernel(const float* x, const int* x_idx, float* y, int* y_idx, i64 n,
                                   i64 splits, i64 chunk, bool accumulate) {
  const i64 row = blockIdx.x / splits, split = blockIdx.x % splits;
  const i64 begin = split * chunk, end = min_i64(n, begin + chunk);
  const float* xr = x + row * n;
  const i64 out = row * splits + split;
  if constexpr (kind == Kind::Max) {
    float best = -INFINITY;
    int best_i = kNoIndex;
    for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = xr[i];
      const int vi = x_idx != nullptr ? x_idx[row * n + i] : static_cast<int>(i);
      if (better(v, vi, best, best_i)) {
        best = v;
        best_i = vi;
      }
    }
    block_argmax(best, best_i);
    if (threadIdx.x == 0) {
      y[out] = best;
      if (y_idx != nullptr) y_idx[out] = best_i;
    }
  } else {
    float acc = 0.0f;
    for (i64 i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float v = xr[i];
      acc += kind == Kind::SumSquares ? v * v : v;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) y[out] = accumulate ? y[out] + acc : acc;
  }
}

// Reduces x (outer, n, inner) over n for 32 columns per block. Block b covers column tile
// b % tiles of outer index (b / tiles) / splits, rows of chunk (b / tiles) % splits; it
// writes y[(o * splits + split) * inner + j]. Thread (tx, ty) sums rows begin + ty,
// begin + ty + 8, ... of column j; the 8 row phases are then added in a fixed tree.
template <Kind kind>
__global__ void reduce_columns_kernel(const float* x, const int* x_idx, float* y, int* y_idx, i64 n,
                                      i64 inner, i64 tiles, i64 splits, i64 chunk) {
  constexpr int kX = launch::kColumnTileX, kY = launch::kColumnTileY;
  const i64 tile = blockIdx.x % tiles, rest = blockIdx.x / tiles;
  const i64 split = rest % splits, o = rest / splits;
  const i64 j = tile * kX + threadIdx.x;
  const i64 begin = split * chunk, end = min_i64(n, begin + chunk);
  const bool column_exists = j < inner;
  const i64 out = (o * splits + split) * inner + j;
  if constexpr (kind == Kind::Max) {
    __shared__ float phase_v[kY][kX];
    __shared__ int phase_i[kY][kX];
    float best = -INFINITY;
    int best_i = kNoIndex;
    if (column_exists) {
      for (i64 i = begin + threadIdx.y; i < end; i += kY) {
        const i64 at = (o * n + i) * inner + j;
        const float v = x[at];
        const int vi = x_idx != nullptr ? x_idx[at] : static_cast<int>(i);
        if (better(v, vi, best, best_i)) {
          best = v;
          best_i = vi;
        }
      }
    }
    phase_v[threadIdx.y][threadIdx.x] = best;
    phase_i[threadIdx.y][threadIdx.x] = best_i;
    __syncthreads();
    for (int half = kY / 2; half > 0; half /= 2) {
      if (threadIdx.y < static_cast<unsigned>(half)) {
        const float v = phase_v[threadIdx.y + half][threadIdx.x];
        const int vi = phase_i[threadIdx.y + half][threadIdx.x];
        if (better(v, vi, phase_v[threadIdx.y][threadIdx.x], phase_i[threadIdx.y][threadIdx.x])) {
          phase_v[threadIdx.y][threadIdx.x] = v;
          phase_i[threadIdx.y][threadIdx.x] = vi;
        }
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && column_exists) {
      y[out] = phase_v[0][threadIdx.x];
      if (y_idx != nullptr) y_idx[out] = phase_i[0][threadIdx.x];
    }
  } else {
    // course 15 begin: a CUDA column sum: each thread walks its column, then 8 row phases meet in a fixed shared-memory tree (graded under the host emulation)
    __shared__ float phase_sum[kY][kX];
    float acc = 0.0f;
    if (column_exists) {
      for (i64 i = begin + threadIdx.y; i < end; i += kY) {
        const float v = x[(o * n + i) * inner + j];
        acc += kind == Kind::SumSquares ? v * v : v;
      }
    }
    phase_sum[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int half = kY / 2; half > 0; half /= 2) {
      if (threadIdx.y < static_cast<unsigned>(half)) {
        phase_sum[threadIdx.y][threadIdx.x] += phase_sum[threadIdx.y + half][threadIdx.x];
      }
      __syncthreads();
    }
    if (threadIdx.y == 0 && column_exists) y[out] = phase_sum[0][threadIdx.x];
    // course 15 end
  }
}

template <Kind kind>
void launch_rows(const float* x, const int* x_idx, float* y, int* y_idx, i64 outer, i64 n,
                 i64 splits, i64 chunk, bool accumulate) {
  WEDGE_LAUNCH(grid_1d(outer * splits), launch::row_threads(chunk), 0, reduce_rows_kernel<kind>)(
      x, x_idx, y, y_idx, n, splits, chunk, accumulate);
  check_launch("reduce_rows_kernel");
}

template <Kind kind>
void launch_columns(const float* x, const int* x_idx, float* y, int* y_idx, i64 outer, i64 n,
                    i64 inner, i64 splits, i64 chunk) {
  const i64 tiles = launch::ceil_div(inner, launch::kColumnTileX);
  WEDGE_LAUNCH(grid_1d(tiles * outer * splits), dim3(launch::kColumnTileX, launch::kColumnTileY), 0,
               reduce_columns_kernel<kind>)(x, x_idx, y, y_idx, n, inner, tiles, splits, chunk);
  check_launch("reduce_columns_kernel");
}

// y (outer, inner) = reduction of x (outer, n, inner) over n, n >= 1. accumulate (sums
// only) adds the result to y. Long axes go through partials in scratch memory, reduced
// again by the same function (the partial axis is at most kReduceMaxSplits long, so the
// recursion is shallow).
void run_reduce(Kind kind, const float* x, const int* x_idx, float* y, int* y_idx, i64 outer, i64 n,
                i64 inner, bool accumulate) {
  const bool rows = inner == 1;
  const i64 tiles = launch::ceil_div(inner, launch::kColumnTileX);
  const launch::SplitPlan plan =
      rows ? launch::plan_splits(n, outer, launch::kRowReduceMinChunk)
           : launch::plan_splits(n, outer * tiles, launch::kColumnReduceMinChunk);
  // Only the rows kernel adds into y (sum_squares, inner == 1, is the one user).
  if (accumulate && !rows) throw std::logic_error("cuda reduce: accumulate needs inner == 1");
  const bool direct = plan.splits == 1;
  if (direct) {
    switch (kind) {
      case Kind::Sum:
        return rows ? launch_rows<Kind::Sum>(x, x_idx, y, y_idx, outer, n, 1, n, accumulate)
                    : launch_columns<Kind::Sum>(x, x_idx, y, y_idx, outer, n, inner, 1, n);
      case Kind::SumSquares:
        return rows ? launch_rows<Kind::SumSquares>(x, x_idx, y, y_idx, outer, n, 1, n, accumulate)
                    : launch_columns<Kind::SumSquares>(x, x_idx, y, y_idx, outer, n, inner, 1, n);
      case Kind::Max:
        return rows ? launch_rows<Kind::Max>(x, x_idx, y, y_idx, outer, n, 1, n, false)
                    : launch_columns<Kind::Max>(x, x_idx, y, y_idx, outer, n, inner, 1, n);
    }
    return;
  }
  const i64 partial_count = outer * plan.splits * inner;
  Scratch<float> partial(partial_count);
  Scratch<int> partial_idx(kind == Kind::Max ? partial_count : 1);
  int* pidx = kind == Kind::Max ? partial_idx.get() : nullptr;
  switch (kind) {
    case Kind::Sum:
      if (rows) launch_rows<Kind::Sum>(x, x_idx, partial.get(), pidx, outer, n, plan.splits, plan.chunk, false);
      else launch_columns<Kind::Sum>(x, x_idx, partial.get(), pidx, outer, n, inner, plan.splits, plan.chunk);
      break;
    case Kind::SumSquares:
      if (rows) launch_rows<Kind::SumSquares>(x, x_idx, partial.get(), pidx, outer, n, plan.splits, plan.chunk, false);
      else launch_columns<Kind::SumSquares>(x, x_idx, partial.get(), pidx, outer, n, inner, plan.splits, plan.chunk);
      break;
    case Kind::Max:
      if (rows) launch_rows<Kind::Max>(x, x_idx, partial.get(), pidx, outer, n, plan.splits, plan.chunk, false);
      else launch_columns<Kind::Max>(x, x_idx, partial.get(), pidx, outer, n, inner, plan.splits, plan.chunk);
      break;
  }
  // Partials are (outer, splits, inner): reduce the middle axis again. Squares were
  // taken in stage one; from here on it is a plain sum.
  const Kind next = kind == Kind::Max ? Kind::Max : Kind::Sum;
  run_reduce(next, partial.get(), pidx, y, y_idx, outer, plan.splits, inner, accumulate);
}

__global__ void fill_int_kernel(int* y, int value, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) y[i] = value;
}

}  // namespace reduce_impl

using namespace reduce_impl;

void reduce(ReduceOp op, const float* x, float* y, int32_t* idx, i64 outer, i64 n, i64 inner) {
  const i64 outputs = outer * inner;
  if (outputs <= 0) return;
  if (n <= 0) {  // empty axis: sum 0; max -inf at index -1 (as kernels/ref)
    fill(y, op == ReduceOp::Sum ? 0.0f : -INFINITY, outputs);
    if (op == ReduceOp::Max && idx != nullptr) {
      WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(outputs)), launch::kElementwiseThreads, 0,
                   fill_int_kernel)(idx, -1, outputs);
      check_launch("fill_int_kernel");
    }
    return;
  }
  run_reduce(op == ReduceOp::Sum ? Kind::Sum : Kind::Max, x, nullptr, y, idx, outer, n, inner, false);
}

void sum_squares(const float* x, i64 n, float* out, bool accumulate) {
  if (n <= 0) {
    if (!accumulate) fill(out, 0.0f, 1);
    return;
  }
  run_reduce(Kind::SumSquares, x, nullptr, out, nullptr, 1, n, 1, accumulate);
}

void sum_middle_axis(const float* x, float* y, i64 outer, i64 n, i64 inner) {
  if (outer * inner <= 0) return;
  if (n <= 0) return fill(y, 0.0f, outer * inner);
  run_reduce(Kind::Sum, x, nullptr, y, nullptr, outer, n, inner, false);
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
