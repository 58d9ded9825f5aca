// Dropout, threaded, and equal to the reference kernel bit for bit: it draws the same
// Philox-4x32-10 numbers as engine/philox.h, one counter per lane (4 kLanes elements at a
// time), and scales in double as the reference does (dropout_simd.h). One source for both
// widths (simd.h).
#include "kernels/cpu/simd.h"

#include <cstdint>

#include "engine/thread_pool.h"
#include "kernels/cpu/dropout_simd.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  const double scale = dropout_scale(p);
  // Chunks of the elements, each a span of its own (dropout_span keeps neighbours apart).
  parallel_for(0, n, 1 << 13, [&](i64 i0, i64 i1) {
    dropout_span(x + i0, y + i0, i1 - i0, p, scale, seed, offset + static_cast<std::uint64_t>(i0));
  });
}

void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  // Linear in its input with the same mask: the same map applied to gy.
  dropout_forward(gy, gx, n, p, seed, offset);
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
