// Layer normalisation over the last axis of (rows, D), forward and backward.
//
// Forward and the input gradient are one block per row (one warp for D = 256): the row's
// sums are block reductions in a fixed order. The parameter gradients are column sums
// over all rows,
//   ggamma_d = sum_rows gy_d * xhat_d,   gbeta_d = sum_rows gy_d,
// a reduction with only D outputs over a long axis. Adding each row's contribution with
// float atomics would make the result depend on timing; instead it is a deterministic
// two-stage reduction: stage one cuts the rows into chunks and writes one partial sum per
// (chunk, column) to scratch, stage two sums the partials per column (reduce.cu), each in
// a fixed order.
//
// The residual pair (s = x + dropout(y), out = the norm of s) is the same kernels with a
// prologue and an epilogue: the forward forms each element of s from x, y and its Philox
// draw (engine/philox.h, as dropout.cu) on its way into the row sum; the input-gradient
// kernel adds the gradient that reaches s directly and drops the sum into gy.
#include "engine/philox.h"
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace layer_norm_impl {

// Two passes over the row (mean first, then squared deviations from it): no
// cancellation as in E[x^2] - E[x]^2. The row is re-read from cache, not from DRAM.
// `sum` is this thread's share of the row's sum (elements threadIdx.x, + blockDim.x, ...).
__device__ void normalise_row(const float* xr, const float* gamma, const float* beta, i64 D, float eps, float sum,
                              float* yr, float* mean, float* rstd) {
  const float mu = block_sum(sum) / static_cast<float>(D);
  float local = 0.0f;
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) {
    const float dev = xr[d] - mu;
    local += dev * dev;
  }
  const float inv_std = 1.0f / sqrtf(block_sum(local) / static_cast<float>(D) + eps);
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) {
    const float xhat = (xr[d] - mu) * inv_std;
    const float scale = gamma != nullptr ? gamma[d] : 1.0f;
    const float shift = beta != nullptr ? beta[d] : 0.0f;
    yr[d] = scale * xhat + shift;
  }
  if (threadIdx.x == 0) {
    *mean = mu;
    *rstd = inv_std;
  }
}

__global__ void layer_norm_forward_kernel(const float* x, const float* gamma, const float* beta, i64 D,
                                          float eps, float* y, float* mean, float* rstd) {
  const i64 row = blockIdx.x;
  const float* xr = x + row * D;
  float local = 0.0f;
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) local += xr[d];
  normalise_row(xr, gamma, beta, D, eps, local, y + row * D, mean + row, rstd + row);
}

// x * keep / (1 - p) for the element at Philox index `index` (dropout.cu's rounding).
__device__ __forceinline__ float dropped(float x, float p, double scale, std::uint64_t seed, std::uint64_t index) {
  return ::wedge::philox_uniform(seed, index) >= p ? static_cast<float>(static_cast<double>(x) * scale) : 0.0f;
}

// s = x + dropout(y) element by element (each thread re-reads only what it wrote), then
// the norm of s.
__global__ void residual_layer_norm_forward_kernel(const float* x, const float* y, const float* gamma,
                                                   const float* beta, i64 D, float p, double scale,
                                                   std::uint64_t seed, std::uint64_t offset, float eps, float* s,
                                                   float* out, float* mean, float* rstd) {
  const i64 row = blockIdx.x;
  float local = 0.0f;
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) {
    const i64 i = row * D + d;
    const float yd = p > 0.0f ? dropped(y[i], p, scale, seed, offset + static_cast<std::uint64_t>(i)) : y[i];
    const float sd = x[i] + yd;
    s[i] = sd;
    local += sd;
  }
  normalise_row(s + row * D, gamma, beta, D, eps, local, out + row * D, mean + row, rstd + row);
}

// gx_d = rstd * (g_d - mean(g) - xhat_d * mean(g * xhat)),  g_d = gy_d * gamma_d
// For the residual pair, gs (may be null) is added to gx_d, gx may be null, and gdrop
// (may be null) receives dropout of the sum.
__global__ void layer_norm_input_grad_kernel(const float* x, const float* gamma, const float* mean,
                                             const float* rstd, const float* gy, const float* gs, i64 D,
                                             float p, double scale, std::uint64_t seed, std::uint64_t offset,
                                             float* gx, float* gdrop) {
  const i64 row = blockIdx.x;
  const float* xr = x + row * D;
  const float* gyr = gy + row * D;
  const float mu = mean[row], inv_std = rstd[row];
  float local_g = 0.0f, local_gx = 0.0f;
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) {
    const float g = gyr[d] * (gamma != nullptr ? gamma[d] : 1.0f);
    local_g += g;
    local_gx += g * (xr[d] - mu) * inv_std;
  }
  const float mean_g = block_sum(local_g) / static_cast<float>(D);
  const float mean_gx = block_sum(local_gx) / static_cast<float>(D);
  for (i64 d = threadIdx.x; d < D; d += blockDim.x) {
    const i64 i = row * D + d;
    const float g = gyr[d] * (gamma != nullptr ? gamma[d] : 1.0f);
    const float xhat = (xr[d] - mu) * inv_std;
    float sum = inv_std * (g - mean_g - xhat * mean_gx);
    if (gs != nullptr) sum += gs[i];
    if (gx != nullptr) gx[i] = sum;
    if (gdrop != nullptr) gdrop[i] = p > 0.0f ? dropped(sum, p, scale, seed, offset + static_cast<std::uint64_t>(i)) : sum;
  }
}

// Stage one of the parameter gradients. Block b covers 32 columns (tile b % tiles) and
// the rows of chunk b / tiles; thread (tx, ty) walks rows begin + ty, begin + ty + 8, ...
// of column j, then the 8 row phases are added in a fixed tree. Writes
// ggamma_part[chunk * D + j] and gbeta_part[chunk * D + j] (either may be null).
__global__ void layer_norm_param_grad_kernel(const float* x, const float* mean, const float* rstd,
                                             const float* gy, i64 rows, i64 D, i64 tiles, i64 chunk,
                                             float* ggamma_part, float* gbeta_part) {
  constexpr int kX = launch::kColumnTileX, kY = launch::kColumnTileY;
  __shared__ float phase_gamma[kY][kX];
  __shared__ float phase_beta[kY][kX];
  const i64 tile = blockIdx.x % tiles, split = blockIdx.x / tiles;
  const i64 j = tile * kX + threadIdx.x;
  const i64 begin = split * chunk, end = min_i64(rows, begin + chunk);
  float acc_gamma = 0.0f, acc_beta = 0.0f;
  if (j < D) {
    for (i64 r = begin + threadIdx.y; r < end; r += kY) {
      const float g = gy[r * D + j];
      acc_gamma += g * ((x[r * D + j] - mean[r]) * rstd[r]);
      acc_beta += g;
    }
  }
  phase_gamma[threadIdx.y][threadIdx.x] = acc_gamma;
  phase_beta[threadIdx.y][threadIdx.x] = acc_beta;
  __syncthreads();
  for (int half = kY / 2; half > 0; half /= 2) {
    if (threadIdx.y < static_cast<unsigned>(half)) {
      phase_gamma[threadIdx.y][threadIdx.x] += phase_gamma[threadIdx.y + half][threadIdx.x];
      phase_beta[threadIdx.y][threadIdx.x] += phase_beta[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < D) {
    if (ggamma_part != nullptr) ggamma_part[split * D + j] = phase_gamma[0][threadIdx.x];
    if (gbeta_part != nullptr) gbeta_part[split * D + j] = phase_beta[0][threadIdx.x];
  }
}

// The parameter gradients of either backward: column sums over the rows.
void param_grads(const float* x, const float* mean, const float* rstd, const float* gy, i64 rows, i64 D,
                 float* ggamma, float* gbeta) {
  if (ggamma == nullptr && gbeta == nullptr) return;
  if (rows <= 0) {  // no rows: the parameter gradients are empty sums
    if (ggamma != nullptr) fill(ggamma, 0.0f, D);
    if (gbeta != nullptr) fill(gbeta, 0.0f, D);
    return;
  }
  const i64 tiles = launch::ceil_div(D, launch::kColumnTileX);
  const launch::SplitPlan plan = launch::plan_splits(rows, tiles, launch::kColumnReduceMinChunk);
  const dim3 block(launch::kColumnTileX, launch::kColumnTileY);
  if (plan.splits == 1) {  // few rows: one stage writes the gradients directly
    WEDGE_LAUNCH(grid_1d(tiles), block, 0, layer_norm_param_grad_kernel)(
        x, mean, rstd, gy, rows, D, tiles, plan.chunk, ggamma, gbeta);
    check_launch("layer_norm_param_grad_kernel");
    return;
  }
  Scratch<float> gamma_part(ggamma != nullptr ? plan.splits * D : 1);
  Scratch<float> beta_part(gbeta != nullptr ? plan.splits * D : 1);
  WEDGE_LAUNCH(grid_1d(tiles * plan.splits), block, 0, layer_norm_param_grad_kernel)(
      x, mean, rstd, gy, rows, D, tiles, plan.chunk, ggamma != nullptr ? gamma_part.get() : nullptr,
      gbeta != nullptr ? beta_part.get() : nullptr);
  check_launch("layer_norm_param_grad_kernel");
  if (ggamma != nullptr) sum_middle_axis(gamma_part.get(), ggamma, 1, plan.splits, D);
  if (gbeta != nullptr) sum_middle_axis(beta_part.get(), gbeta, 1, plan.splits, D);
}

double dropout_scale(float p) { return p < 1.0f ? 1.0 / (1.0 - static_cast<double>(p)) : 0.0; }

}  // namespace layer_norm_impl

using namespace layer_norm_impl;

void layer_norm_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D,
                        float eps, float* y, float* mean, float* rstd) {
  if (rows <= 0 || D <= 0) return;
  WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(D), 0, layer_norm_forward_kernel)(
      x, gamma, beta, D, eps, y, mean, rstd);
  check_launch("layer_norm_forward_kernel");
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* gy, i64 rows, i64 D, float* gx, float* ggamma, float* gbeta) {
  if (D <= 0) return;
  if (rows > 0) {
    WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(D), 0, layer_norm_input_grad_kernel)(
        x, gamma, mean, rstd, gy, nullptr, D, 0.0f, 1.0, 0, 0, gx, nullptr);
    check_launch("layer_norm_input_grad_kernel");
  }
  param_grads(x, mean, rstd, gy, rows, D, ggamma, gbeta);
}

void residual_layer_norm_forward(const float* x, const float* y, const float* gamma, const float* beta, i64 rows,
                                 i64 D, float p, std::uint64_t seed, std::uint64_t offset, float eps, float* s,
                                 float* out, float* mean, float* rstd) {
  if (rows <= 0 || D <= 0) return;
  WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(D), 0, residual_layer_norm_forward_kernel)(
      x, y, gamma, beta, D, p, dropout_scale(p), seed, offset, eps, s, out, mean, rstd);
  check_launch("residual_layer_norm_forward_kernel");
}

void residual_layer_norm_backward(const float* s, const float* gamma, const float* mean, const float* rstd,
                                  const float* gout, const float* gs, i64 rows, i64 D, float p, std::uint64_t seed,
                                  std::uint64_t offset, float* gx, float* gy, float* ggamma, float* gbeta) {
  if (D <= 0) return;
  if (rows > 0 && (gx != nullptr || gy != nullptr)) {
    WEDGE_LAUNCH(grid_1d(rows), launch::row_threads(D), 0, layer_norm_input_grad_kernel)(
        s, gamma, mean, rstd, gout, gs, D, p, dropout_scale(p), seed, offset, gx, gy);
    check_launch("layer_norm_input_grad_kernel");
  }
  param_grads(s, mean, rstd, gout, rows, D, ggamma, gbeta);
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
