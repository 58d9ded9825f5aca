// The Adam / AdamW update of every parameter tensor, one fused element-wise pass per chunk
// of tensors. Same math as kernels/ref/adam.cpp.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace adam_impl {

// One fused pass over parameter, gradient and both moments (5 reads/writes per element
// instead of the dozen a composition of element-wise ops would make), over every tensor of
// a chunk (launch.h AdamChunk) at once: a grid-stride loop over the chunk's total element
// count, each thread finding the segment of its element from the prefix offsets. The
// arithmetic is done in double, as kernels/ref does, so the update matches the CPU's to
// float rounding. grad_scale (gradient clipping folded in) multiplies the gradient first.
__global__ void adam_kernel(AdamParams hp, launch::AdamChunk<float> chunk) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  const double bc1 = hp.bc1, bc2 = hp.bc2, scale = hp.grad_scale;
  const i64 total = chunk.begin[chunk.count];
  int s = 0;
  for (i64 e = global_thread(); e < total; e += grid_threads()) {
    s = launch::adam_segment_of(chunk.begin, chunk.count, e, s);
    const i64 i = e - chunk.begin[s];
    float* param = chunk.param[s];
    float* m = chunk.m[s];
    float* v = chunk.v[s];
    const double p = param[i];
    double g = static_cast<double>(chunk.grad[s][i]) * scale;
    if (!hp.decoupled) g += wd * p;
    const double m_new = b1 * static_cast<double>(m[i]) + (1.0 - b1) * g;
    const double v_new = b2 * static_cast<double>(v[i]) + (1.0 - b2) * g * g;
    double step = (m_new / bc1) / (sqrt(v_new / bc2) + eps);
    if (hp.decoupled) step += wd * p;
    m[i] = static_cast<float>(m_new);
    v[i] = static_cast<float>(v_new);
    param[i] = static_cast<float>(p - lr * step);
  }
}

}  // namespace adam_impl

using namespace adam_impl;

void adam_update(const AdamParams& hp, const AdamSegment<float>* segments, i64 count) {
  for (const launch::AdamChunk<float>& chunk : launch::adam_chunks(segments, count)) {
    const i64 total = chunk.begin[chunk.count];
    WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(total)), launch::kElementwiseThreads, 0, adam_kernel)(hp, chunk);
    check_launch("adam_kernel");
  }
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
