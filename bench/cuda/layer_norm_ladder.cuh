// The layer norm ladder's kernels, forward and backward, over (rows, D):
//   forward   y = gamma * xhat + beta,  xhat = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps)
//             (and mean, rstd per row, kept for backward)
//   backward  gx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = gy * gamma   (per row)
//             ggamma = sum_rows gy * xhat,  gbeta = sum_rows gy               (per column)
// Each rung is a step up from the last:
//
//   1. naive     one thread per row, everything from global memory: the forward sweeps its
//                row three times (sum, squared deviations, write), a warp reads 32 rows at
//                once (stride D: no coalescing); the column sums are one thread per column
//                walking all the rows (only D threads busy)
//   2. shared    one block per row, threads striding along it (coalesced), each sum a
//                shared-memory tree (log2(threads) halvings with a barrier each)
//   3. warp      one warp per row, eight rows per block: every sum is a shuffle butterfly,
//                no shared memory, no barrier; still three sweeps over the row in global
//                memory (the cache catches the second and third)
//   4. fused     one warp per row with the row held in registers: forward reads x once and
//                writes y once. Backward reads x and gy once per row and, in the same
//                sweep, adds the row into the warp's column sums; each block combines its
//                warps' sums in warp order into one partial per chunk of rows
// The column sums of rungs 2 to 4 are deterministic two-stage reductions, never float
// atomics (as in the engine): stage one writes one partial per (chunk of rows, column) to
// scratch, stage two sums the partials per column in a fixed order. Rungs 2 and 3 share
// the stage-one kernel (32 columns x 8 row phases, a shared-memory tree over the phases) —
// they differ in the per-row reductions; rung 4 folds stage one into its row sweep. All
// three share stage two. The chunk of rows depends on the shape only (kChunkRows), so the
// result does not depend on timing.
//
// Bandwidth-bound, a few flops per byte: the least the forward can move is one read of x
// and one write of y (8 bytes per element), the backward reads of x and gy and a write of
// gx (12 bytes per element); gamma, beta, the statistics and the partials are small. Rung 4
// keeps at most 32 values of a row per lane: D <= 1024. Built two ways (see
// bench/cuda/ladder.cuh): the GPU program bench/cuda/layer_norm_ladder.cu, and the emulated
// test tests/kernels/test_cuda_ladders_emulated.cpp, which is how CI checks these kernels.
#pragma once

#include "ladder.cuh"

namespace wedge::WEDGE_LADDER_NS::layer_norm {

using ::wedge::WEDGE_LADDER_NS::kRungs;
using ::wedge::WEDGE_LADDER_NS::Rung;
inline const char* rung_name(Rung r) { return rung_label(r, "4 fused, registers"); }
constexpr int kMaxFusedD = 1024;
inline bool supported(Rung r, int D) { return r != Rung::fused || D <= kMaxFusedD; }

constexpr int kNaiveThreads = 128;
constexpr int kWarpsPerBlock = 8;  // rungs 3 and 4: one row per warp
constexpr int kChunkRows = 64;     // rows per column-sum partial

// ---- 1. naive ----------------------------------------------------------------------------
__global__ void forward_naive_kernel(const float* x, const float* gamma, const float* beta, int rows, int D, float eps,
                                     float* y, float* mean, float* rstd) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + std::size_t(row) * D;
  float* yr = y + std::size_t(row) * D;
  float sum = 0.0f;
  for (int d = 0; d < D; ++d) sum += xr[d];
  const float mu = sum / float(D);
  float squares = 0.0f;  // deviations from the mean: no cancellation as in E[x^2] - E[x]^2
  for (int d = 0; d < D; ++d) squares += (xr[d] - mu) * (xr[d] - mu);
  const float inv_std = 1.0f / sqrtf(squares / float(D) + eps);
  for (int d = 0; d < D; ++d) yr[d] = gamma[d] * ((xr[d] - mu) * inv_std) + beta[d];
  mean[row] = mu;
  rstd[row] = inv_std;
}

__global__ void input_grad_naive_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                        const float* gy, int rows, int D, float* gx) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + std::size_t(row) * D;
  const float* gyr = gy + std::size_t(row) * D;
  float* gxr = gx + std::size_t(row) * D;
  const float mu = mean[row], inv_std = rstd[row];
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int d = 0; d < D; ++d) {
    const float g = gyr[d] * gamma[d];
    sum_g += g;
    sum_g_xhat += g * ((xr[d] - mu) * inv_std);
  }
  const float mean_g = sum_g / float(D), mean_g_xhat = sum_g_xhat / float(D);
  for (int d = 0; d < D; ++d) gxr[d] = inv_std * (gyr[d] * gamma[d] - mean_g - (xr[d] - mu) * inv_std * mean_g_xhat);
}

// Neighbouring threads take neighbouring columns, so these reads happen to coalesce; but
// only D threads run, each adding `rows` terms one after another.
__global__ void param_grad_naive_kernel(const float* x, const float* mean, const float* rstd, const float* gy, int rows,
                                        int D, float* ggamma, float* gbeta) {
  const int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= D) return;
  float acc_gamma = 0.0f, acc_beta = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const float g = gy[std::size_t(r) * D + d];
    acc_gamma += g * ((x[std::size_t(r) * D + d] - mean[r]) * rstd[r]);
    acc_beta += g;
  }
  ggamma[d] = acc_gamma;
  gbeta[d] = acc_beta;
}

// ---- 2. shared-memory trees ------------------------------------------------------------------
__global__ void forward_shared_kernel(const float* x, const float* gamma, const float* beta, int D, float eps, float* y,
                                      float* mean, float* rstd) {
  __shared__ float slots[kMaxBlockThreads];
  const int row = blockIdx.x;
  const float* xr = x + std::size_t(row) * D;
  float* yr = y + std::size_t(row) * D;
  float sum = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) sum += xr[d];
  const float mu = tree_sum(sum, slots) / float(D);
  float squares = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) squares += (xr[d] - mu) * (xr[d] - mu);
  const float inv_std = 1.0f / sqrtf(tree_sum(squares, slots) / float(D) + eps);
  for (int d = threadIdx.x; d < D; d += blockDim.x) yr[d] = gamma[d] * ((xr[d] - mu) * inv_std) + beta[d];
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = inv_std;
  }
}

__global__ void input_grad_shared_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                         const float* gy, int D, float* gx) {
  __shared__ float slots[kMaxBlockThreads];
  const int row = blockIdx.x;
  const float* xr = x + std::size_t(row) * D;
  const float* gyr = gy + std::size_t(row) * D;
  float* gxr = gx + std::size_t(row) * D;
  const float mu = mean[row], inv_std = rstd[row];
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    const float g = gyr[d] * gamma[d];
    sum_g += g;
    sum_g_xhat += g * ((xr[d] - mu) * inv_std);
  }
  const float mean_g = tree_sum(sum_g, slots) / float(D);
  const float mean_g_xhat = tree_sum(sum_g_xhat, slots) / float(D);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    gxr[d] = inv_std * (gyr[d] * gamma[d] - mean_g - (xr[d] - mu) * inv_std * mean_g_xhat);
  }
}

// Column sums, stage one (rungs 2 and 3). Block b covers the 32 columns of tile
// b % tiles and the rows of chunk b / tiles; thread (tx, ty) adds rows ty, ty + 8, ... of
// the chunk in column tile * 32 + tx (a warp reads 32 consecutive floats of a row), then
// the 8 row phases are folded by a shared-memory tree.
constexpr int kColumnX = 32, kColumnY = 8;

// Both column stages end alike: each thread's two sums go to its phase slot, and the Y
// phases of every column are folded by a shared-memory tree into phase row 0.
template <int Y>
__device__ __forceinline__ void fold_phases(float (&phase_gamma)[Y][kColumnX], float (&phase_beta)[Y][kColumnX],
                                            float acc_gamma, float acc_beta, int tx, int ty) {
  phase_gamma[ty][tx] = acc_gamma;
  phase_beta[ty][tx] = acc_beta;
  __syncthreads();
  for (int half = Y / 2; half > 0; half /= 2) {
    if (ty < half) {
      phase_gamma[ty][tx] += phase_gamma[ty + half][tx];
      phase_beta[ty][tx] += phase_beta[ty + half][tx];
    }
    __syncthreads();
  }
}
__global__ void column_partials_kernel(const float* x, const float* mean, const float* rstd, const float* gy, int rows,
                                       int D, int chunk_rows, float* gamma_part, float* beta_part) {
  __shared__ float phase_gamma[kColumnY][kColumnX];
  __shared__ float phase_beta[kColumnY][kColumnX];
  const int tiles = ceil_div(D, kColumnX);
  const int tile = blockIdx.x % tiles, chunk = blockIdx.x / tiles;
  const int tx = threadIdx.x, ty = threadIdx.y, d = tile * kColumnX + tx;
  const int begin = chunk * chunk_rows, end = min_int(rows, begin + chunk_rows);
  float acc_gamma = 0.0f, acc_beta = 0.0f;
  if (d < D) {
    for (int r = begin + ty; r < end; r += kColumnY) {
      const float g = gy[std::size_t(r) * D + d];
      acc_gamma += g * ((x[std::size_t(r) * D + d] - mean[r]) * rstd[r]);
      acc_beta += g;
    }
  }
  fold_phases<kColumnY>(phase_gamma, phase_beta, acc_gamma, acc_beta, tx, ty);
  if (ty == 0 && d < D) {
    gamma_part[std::size_t(chunk) * D + d] = phase_gamma[0][tx];
    beta_part[std::size_t(chunk) * D + d] = phase_beta[0][tx];
  }
}

// Column sums, stage two (rungs 2 to 4): ggamma[d] = sum over the chunks' partials, the
// same tile-and-phases shape with 32 phases (the partials are few, the chain per thread
// short), folded by a shared-memory tree.
constexpr int kFinishY = 32;
__global__ void column_finish_kernel(const float* gamma_part, const float* beta_part, int parts, int D, float* ggamma,
                                     float* gbeta) {
  __shared__ float phase_gamma[kFinishY][kColumnX];
  __shared__ float phase_beta[kFinishY][kColumnX];
  const int tx = threadIdx.x, ty = threadIdx.y, d = blockIdx.x * kColumnX + tx;
  float acc_gamma = 0.0f, acc_beta = 0.0f;
  if (d < D) {
    for (int p = ty; p < parts; p += kFinishY) {
      acc_gamma += gamma_part[std::size_t(p) * D + d];
      acc_beta += beta_part[std::size_t(p) * D + d];
    }
  }
  fold_phases<kFinishY>(phase_gamma, phase_beta, acc_gamma, acc_beta, tx, ty);
  if (ty == 0 && d < D) {
    ggamma[d] = phase_gamma[0][tx];
    gbeta[d] = phase_beta[0][tx];
  }
}

// ---- 3. warp shuffles --------------------------------------------------------------------------
__global__ void forward_warp_kernel(const float* x, const float* gamma, const float* beta, int rows, int D, float eps,
                                    float* y, float* mean, float* rstd) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;  // the whole warp leaves: no shuffle is left half-attended
  const float* xr = x + std::size_t(row) * D;
  float* yr = y + std::size_t(row) * D;
  float sum = 0.0f;
  for (int d = lane; d < D; d += 32) sum += xr[d];
  const float mu = warp_sum(sum) / float(D);
  float squares = 0.0f;
  for (int d = lane; d < D; d += 32) squares += (xr[d] - mu) * (xr[d] - mu);
  const float inv_std = 1.0f / sqrtf(warp_sum(squares) / float(D) + eps);
  for (int d = lane; d < D; d += 32) yr[d] = gamma[d] * ((xr[d] - mu) * inv_std) + beta[d];
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = inv_std;
  }
}

__global__ void input_grad_warp_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                       const float* gy, int rows, int D, float* gx) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + std::size_t(row) * D;
  const float* gyr = gy + std::size_t(row) * D;
  float* gxr = gx + std::size_t(row) * D;
  const float mu = mean[row], inv_std = rstd[row];
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float g = gyr[d] * gamma[d];
    sum_g += g;
    sum_g_xhat += g * ((xr[d] - mu) * inv_std);
  }
  const float mean_g = warp_sum(sum_g) / float(D), mean_g_xhat = warp_sum(sum_g_xhat) / float(D);
  for (int d = lane; d < D; d += 32) {
    gxr[d] = inv_std * (gyr[d] * gamma[d] - mean_g - (xr[d] - mu) * inv_std * mean_g_xhat);
  }
}

// ---- 4. fused, the row in registers --------------------------------------------------------------
// Lane l holds columns l, l + 32, ..., l + 32 (kPerLane - 1) of its warp's row: loads of
// consecutive floats across the warp, and fixed register indices once the loops unroll.
// Columns past D hold 0 and are left out of every sum.
template <int kPerLane>
__global__ void forward_fused_kernel(const float* x, const float* gamma, const float* beta, int rows, int D, float eps,
                                     float* y, float* mean, float* rstd) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* xr = x + std::size_t(row) * D;
  float* yr = y + std::size_t(row) * D;
  float v[kPerLane];
  float sum = 0.0f;
  WEDGE_UNROLL
  for (int k = 0; k < kPerLane; ++k) {
    const int d = lane + 32 * k;
    v[k] = d < D ? xr[d] : 0.0f;
    sum += v[k];
  }
  const float mu = warp_sum(sum) / float(D);
  float squares = 0.0f;  // still two passes, but over registers
  WEDGE_UNROLL
  for (int k = 0; k < kPerLane; ++k) {
    if (lane + 32 * k < D) squares += (v[k] - mu) * (v[k] - mu);
  }
  const float inv_std = 1.0f / sqrtf(warp_sum(squares) / float(D) + eps);
  WEDGE_UNROLL
  for (int k = 0; k < kPerLane; ++k) {
    const int d = lane + 32 * k;
    if (d < D) yr[d] = gamma[d] * ((v[k] - mu) * inv_std) + beta[d];
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = inv_std;
  }
}

// Block b owns rows [b * chunk_rows, (b + 1) * chunk_rows); warp w takes rows w, w + 8, ...
// of them. Per row: x and gy into registers, the two row sums by butterflies, gx written,
// and gy * xhat, gy added into the lane's column sums. The ggamma sums stay in registers;
// the gbeta sums live in the warp's own row of shared memory (each lane its own slots, so
// no barrier), which leaves registers for the row: at D = 1024 both in registers took
// about 250 per thread on sm_90, this about 190 (still one block of 8 warps per SM there;
// D <= 512 fits several). At the end the 8 warps' sums are added in warp order: one
// partial per chunk, for stage two.
template <int kPerLane>
__global__ void backward_fused_kernel(const float* x, const float* gamma, const float* mean, const float* rstd,
                                      const float* gy, int rows, int D, int chunk_rows, float* gx, float* gamma_part,
                                      float* beta_part) {
  __shared__ float warp_columns[kWarpsPerBlock][32 * kPerLane];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunk = blockIdx.x, begin = chunk * chunk_rows, end = min_int(rows, begin + chunk_rows);
  float* col_beta = warp_columns[warp];
  float col_gamma[kPerLane];
  WEDGE_UNROLL
  for (int k = 0; k < kPerLane; ++k) col_gamma[k] = col_beta[lane + 32 * k] = 0.0f;
  for (int row = begin + warp; row < end; row += kWarpsPerBlock) {
    const float* xr = x + std::size_t(row) * D;
    const float* gyr = gy + std::size_t(row) * D;
    const float mu = mean[row], inv_std = rstd[row];
    float xhat[kPerLane], g_out[kPerLane];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    WEDGE_UNROLL
    for (int k = 0; k < kPerLane; ++k) {
      const int d = lane + 32 * k;
      xhat[k] = d < D ? (xr[d] - mu) * inv_std : 0.0f;
      g_out[k] = d < D ? gyr[d] : 0.0f;
      const float g = d < D ? g_out[k] * gamma[d] : 0.0f;  // gamma: the same for every row, from L1
      sum_g += g;
      sum_g_xhat += g * xhat[k];
    }
    const float mean_g = warp_sum(sum_g) / float(D), mean_g_xhat = warp_sum(sum_g_xhat) / float(D);
    float* gxr = gx + std::size_t(row) * D;
    WEDGE_UNROLL
    for (int k = 0; k < kPerLane; ++k) {
      const int d = lane + 32 * k;
      if (d < D) gxr[d] = inv_std * (g_out[k] * gamma[d] - mean_g - xhat[k] * mean_g_xhat);
      col_gamma[k] += g_out[k] * xhat[k];
      col_beta[lane + 32 * k] += g_out[k];
    }
  }
  __syncthreads();  // every warp's gbeta sums are in
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < kWarpsPerBlock; ++w) total += warp_columns[w][d];
    beta_part[std::size_t(chunk) * D + d] = total;
  }
  __syncthreads();  // everyone has read them before the buffer takes the ggamma sums
  WEDGE_UNROLL
  for (int k = 0; k < kPerLane; ++k) warp_columns[warp][lane + 32 * k] = col_gamma[k];
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < kWarpsPerBlock; ++w) total += warp_columns[w][d];
    gamma_part[std::size_t(chunk) * D + d] = total;
  }
}

// ---- the launches (device pointers on a GPU, host pointers in the emulation) ---------------

inline void forward(Rung rung, const float* x, const float* gamma, const float* beta, int rows, int D, float eps,
                    float* y, float* mean, float* rstd) {
  if (rows <= 0 || D <= 0) return;
  const dim3 warp_grid(ceil_div(rows, kWarpsPerBlock)), warp_block(32 * kWarpsPerBlock);
  switch (rung) {
    case Rung::naive:
      LADDER_LAUNCH(dim3(ceil_div(rows, kNaiveThreads)), dim3(kNaiveThreads), 0, forward_naive_kernel)(
          x, gamma, beta, rows, D, eps, y, mean, rstd);
      break;
    case Rung::shared:
      LADDER_LAUNCH(dim3(rows), dim3(row_threads(D)), 0, forward_shared_kernel)(x, gamma, beta, D, eps, y, mean, rstd);
      break;
    case Rung::warp:
      LADDER_LAUNCH(warp_grid, warp_block, 0, forward_warp_kernel)(x, gamma, beta, rows, D, eps, y, mean, rstd);
      break;
    case Rung::fused:
      if (D <= 64) {
        LADDER_LAUNCH(warp_grid, warp_block, 0, forward_fused_kernel<2>)(x, gamma, beta, rows, D, eps, y, mean, rstd);
      } else if (D <= 256) {
        LADDER_LAUNCH(warp_grid, warp_block, 0, forward_fused_kernel<8>)(x, gamma, beta, rows, D, eps, y, mean, rstd);
      } else if (D <= 512) {
        LADDER_LAUNCH(warp_grid, warp_block, 0, forward_fused_kernel<16>)(x, gamma, beta, rows, D, eps, y, mean, rstd);
      } else if (D <= kMaxFusedD) {
        LADDER_LAUNCH(warp_grid, warp_block, 0, forward_fused_kernel<32>)(x, gamma, beta, rows, D, eps, y, mean, rstd);
      }
      break;
  }
}

// Floats of scratch the backward of `rung` needs: the per-chunk partials of both sums.
inline std::size_t backward_scratch_floats(Rung rung, int rows, int D, int chunk_rows = kChunkRows) {
  return rung == Rung::naive ? 0 : 2 * std::size_t(ceil_div(rows, chunk_rows)) * std::size_t(D);
}

inline void backward(Rung rung, const float* x, const float* gamma, const float* mean, const float* rstd,
                     const float* gy, int rows, int D, float* gx, float* ggamma, float* gbeta, float* scratch,
                     int chunk_rows = kChunkRows) {
  if (rows <= 0 || D <= 0) return;
  const int chunks = ceil_div(rows, chunk_rows), tiles = ceil_div(D, kColumnX);
  float* gamma_part = scratch;
  float* beta_part = scratch + std::size_t(chunks) * D;
  const dim3 warp_grid(ceil_div(rows, kWarpsPerBlock)), warp_block(32 * kWarpsPerBlock);
  switch (rung) {
    case Rung::naive:
      LADDER_LAUNCH(dim3(ceil_div(rows, kNaiveThreads)), dim3(kNaiveThreads), 0, input_grad_naive_kernel)(
          x, gamma, mean, rstd, gy, rows, D, gx);
      LADDER_LAUNCH(dim3(ceil_div(D, kNaiveThreads)), dim3(kNaiveThreads), 0, param_grad_naive_kernel)(
          x, mean, rstd, gy, rows, D, ggamma, gbeta);
      return;
    case Rung::shared:
      LADDER_LAUNCH(dim3(rows), dim3(row_threads(D)), 0, input_grad_shared_kernel)(x, gamma, mean, rstd, gy, D, gx);
      LADDER_LAUNCH(dim3(tiles * chunks), dim3(kColumnX, kColumnY), 0, column_partials_kernel)(
          x, mean, rstd, gy, rows, D, chunk_rows, gamma_part, beta_part);
      break;
    case Rung::warp:
      LADDER_LAUNCH(warp_grid, warp_block, 0, input_grad_warp_kernel)(x, gamma, mean, rstd, gy, rows, D, gx);
      LADDER_LAUNCH(dim3(tiles * chunks), dim3(kColumnX, kColumnY), 0, column_partials_kernel)(
          x, mean, rstd, gy, rows, D, chunk_rows, gamma_part, beta_part);
      break;
    case Rung::fused:
      if (D <= 64) {
        LADDER_LAUNCH(dim3(chunks), warp_block, 0, backward_fused_kernel<2>)(
            x, gamma, mean, rstd, gy, rows, D, chunk_rows, gx, gamma_part, beta_part);
      } else if (D <= 256) {
        LADDER_LAUNCH(dim3(chunks), warp_block, 0, backward_fused_kernel<8>)(
            x, gamma, mean, rstd, gy, rows, D, chunk_rows, gx, gamma_part, beta_part);
      } else if (D <= 512) {
        LADDER_LAUNCH(dim3(chunks), warp_block, 0, backward_fused_kernel<16>)(
            x, gamma, mean, rstd, gy, rows, D, chunk_rows, gx, gamma_part, beta_part);
      } else if (D <= kMaxFusedD) {
        LADDER_LAUNCH(dim3(chunks), warp_block, 0, backward_fused_kernel<32>)(
            x, gamma, mean, rstd, gy, rows, D, chunk_rows, gx, gamma_part, beta_part);
      } else {
        return;
      }
      break;
  }
  LADDER_LAUNCH(dim3(tiles), dim3(kColumnX, kFinishY), 0, column_finish_kernel)(
      gamma_part, beta_part, chunks, D, ggamma, gbeta);
}

// ---- the float64 reference: the oracle every rung is checked against -----------------------

inline void reference_forward(const std::vector<float>& x, const std::vector<float>& gamma,
                              const std::vector<float>& beta, int rows, int D, double eps, std::vector<double>& y,
                              std::vector<double>& mean, std::vector<double>& rstd) {
  y.assign(std::size_t(rows) * D, 0.0);
  mean.assign(std::size_t(rows), 0.0);
  rstd.assign(std::size_t(rows), 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + std::size_t(r) * D;
    double sum = 0, squares = 0;
    for (int d = 0; d < D; ++d) sum += xr[d];
    const double mu = sum / D;
    for (int d = 0; d < D; ++d) squares += (xr[d] - mu) * (xr[d] - mu);
    const double inv_std = 1.0 / std::sqrt(squares / D + eps);
    for (int d = 0; d < D; ++d)
      y[std::size_t(r) * D + d] = gamma[std::size_t(d)] * ((xr[d] - mu) * inv_std) + beta[std::size_t(d)];
    mean[std::size_t(r)] = mu;
    rstd[std::size_t(r)] = inv_std;
  }
}

inline void reference_backward(const std::vector<float>& x, const std::vector<float>& gamma,
                               const std::vector<double>& mean, const std::vector<double>& rstd,
                               const std::vector<float>& gy, int rows, int D, std::vector<double>& gx,
                               std::vector<double>& ggamma, std::vector<double>& gbeta) {
  gx.assign(std::size_t(rows) * D, 0.0);
  ggamma.assign(std::size_t(D), 0.0);
  gbeta.assign(std::size_t(D), 0.0);
  for (int r = 0; r < rows; ++r) {
    const std::size_t o = std::size_t(r) * D;
    const double mu = mean[std::size_t(r)], inv_std = rstd[std::size_t(r)];
    double sum_g = 0, sum_g_xhat = 0;
    for (int d = 0; d < D; ++d) {
      const double xhat = (x[o + d] - mu) * inv_std, g = double(gy[o + d]) * gamma[std::size_t(d)];
      sum_g += g;
      sum_g_xhat += g * xhat;
      ggamma[std::size_t(d)] += double(gy[o + d]) * xhat;
      gbeta[std::size_t(d)] += gy[o + d];
    }
    for (int d = 0; d < D; ++d) {
      const double xhat = (x[o + d] - mu) * inv_std, g = double(gy[o + d]) * gamma[std::size_t(d)];
      gx[o + d] = inv_std * (g - sum_g / D - xhat * sum_g_xhat / D);
    }
  }
}

// float32 against float64, relative to the largest |reference| of each output: y and gx are
// O(1) and each element sees a few roundings; ggamma and gbeta add `rows` terms (the naive
// rung one after another).
constexpr double kTolerance = 1e-4;

}  // namespace wedge::WEDGE_LADDER_NS::layer_norm
