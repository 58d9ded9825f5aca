// Embedding lookup and its scatter-add gradient, threaded; one source for both widths
// (simd.h). The gradient is the same bits as the reference's (kernels/ref/embedding.cpp)
// on any thread count: threads split the columns of the table, never the ids, so every
// element of gtable receives its additions in increasing i exactly as in the reference loop.
#include "kernels/cpu/simd.h"

#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {

// out[0, D) = row[0, D) (or += when accumulate)
inline void copy_row(const float* row, float* out, i64 D, bool accumulate) {
  for (i64 d = 0; d < D; d += kLanes) {
    vf v = load_first(row + d, D - d);
    if (accumulate) v = add(v, load_first(out + d, D - d));
    store_first(out + d, D - d, v);
  }
}

}  // namespace

void embedding_forward(const float* table, const std::int32_t* ids, i64 n, i64 V, i64 D, float* out) {
  parallel_for(0, n, std::max<i64>(1, 16384 / std::max<i64>(D, 1)), [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) copy_row(table + i64(ids[i]) * D, out + i * D, D, false);
  });
}

void embedding_backward(const std::int32_t* ids, const float* gout, i64 n, i64 V, i64 D, float* gtable) {
  fill(gtable, 0.0f, V * D);
  // Column blocks of one vector each, at least 4 blocks per thread.
  const i64 blocks = (D + kLanes - 1) / kLanes;
  parallel_for(0, blocks, 4, [&](i64 b0, i64 b1) {
    const i64 d0 = b0 * kLanes, width = std::min(D, b1 * kLanes) - d0;
    for (i64 i = 0; i < n; ++i) copy_row(gout + i * D + d0, gtable + i64(ids[i]) * D + d0, width, true);
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
