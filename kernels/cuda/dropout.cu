// Inverted dropout and its backward: y_i = x_i * keep_i / (1 - p), the mask recomputed
// from Philox rather than stored. A grid-stride loop (launch.h: elementwise_blocks): each
// element depends on its own input and index only, so nothing is synchronised.
#include "engine/philox.h"
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace dropout_impl {

// The mask bit of element i is philox_uniform(seed, offset + i) >= p: the same function
// (engine/philox.h) the CPU evaluates, so both devices drop the same elements. The kept
// value is scaled in double and rounded once, exactly as kernels/ref does, so CUDA and CPU
// dropout agree bit for bit, not just in their masks.
__global__ void dropout_kernel(const float* x, float* y, i64 n, float p, double scale,
                               std::uint64_t seed, std::uint64_t offset) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    const bool keep = ::wedge::philox_uniform(seed, offset + static_cast<std::uint64_t>(i)) >= p;
    y[i] = keep ? static_cast<float>(static_cast<double>(x[i]) * scale) : 0.0f;
  }
}

void launch_dropout(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  if (n <= 0) return;
  const double scale = p < 1.0f ? 1.0 / (1.0 - static_cast<double>(p)) : 0.0;
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0,
               dropout_kernel)(x, y, n, p, scale, seed, offset);
  check_launch("dropout_kernel");
}

}  // namespace dropout_impl

using namespace dropout_impl;

void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  launch_dropout(x, y, n, p, seed, offset);
}

// The map is linear in x with the same mask: the gradient is dropout of gy.
void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  launch_dropout(gy, gx, n, p, seed, offset);
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
