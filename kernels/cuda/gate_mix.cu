// The gated fusion out = s x + (1 - s) y, s = sigmoid(a), and its backward: one pass
// each, grid-stride loops (launch.h: elementwise_blocks) in float like the unary maps.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace gate_mix_impl {

// s = sigmoid(a) and 1 - s, each from one exp(-|a|) that cannot overflow: with
// r = 1 / (1 + e), one of them is r and the other e r. Forming 1 - s this way (rather
// than subtracting s from 1) keeps its relative accuracy when s is close to 1, so
// gy = gout (1 - s) and ga's s (1 - s) stay accurate for large positive a as well.
struct Gate {
  float s, t;  // sigmoid(a), 1 - sigmoid(a)
};
__device__ __forceinline__ Gate gate_of(float a) {
  const float e = expf(-fabsf(a));
  const float r = 1.0f / (1.0f + e);
  const float er = e * r;
  return a >= 0.0f ? Gate{r, er} : Gate{er, r};
}

// out = s x + (1 - s) y
__global__ void gate_mix_forward_kernel(const float* a, const float* x, const float* y, float* out,
                                        i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    const Gate g = gate_of(a[i]);
    out[i] = g.s * x[i] + g.t * y[i];
  }
}

// ga = gout (x - y) s (1 - s), gx = gout s, gy = gout (1 - s); all three written.
__global__ void gate_mix_backward_kernel(const float* a, const float* x, const float* y,
                                         const float* gout, float* ga, float* gx, float* gy, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    const Gate g = gate_of(a[i]);
    const float go = gout[i];
    ga[i] = go * (x[i] - y[i]) * (g.s * g.t);
    gx[i] = go * g.s;
    gy[i] = go * g.t;
  }
}

}  // namespace gate_mix_impl

using namespace gate_mix_impl;

void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n) {
  if (n <= 0) return;
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0,
               gate_mix_forward_kernel)(a, x, y, out, n);
  check_launch("gate_mix_forward_kernel");
}

void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga,
                       float* gx, float* gy, i64 n) {
  if (n <= 0) return;
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0,
               gate_mix_backward_kernel)(a, x, y, gout, ga, gx, gy, n);
  check_launch("gate_mix_backward_kernel");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
