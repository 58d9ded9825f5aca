// Embedding lookup and its scatter-add gradient, threaded; one source for both widths
// (simd.h). The gradient is the same bits as the reference's (kernels/ref/embedding.cpp)
// on any thread count: threads split the columns of the table, never the ids, so every
// element of gtable receives its additions in increasing i exactly as in the reference loop.
// When no id repeats (a permutation or a selection of rows, as the models' row gathers
// are), every row of gtable receives at most one addition to zero, so threads split the ids
// instead, each writing its rows once as it reads gout front to back (the other rows are
// zeroed apart): the same additions, the same bits.
#include "kernels/cpu/simd.h"

#include <algorithm>
#include <cstdint>
#include <vector>

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

// Whether no id occurs twice (ids are in [0, V)); `used` then marks the rows of the table
// the ids name.
bool distinct(const std::int32_t* ids, i64 n, i64 V, std::vector<unsigned char>& used) {
  if (n > V) return false;
  used.assign(static_cast<std::size_t>(V), 0);
  for (i64 i = 0; i < n; ++i) {
    unsigned char& u = used[static_cast<std::size_t>(ids[i])];
    if (u != 0) return false;
    u = 1;
  }
  return true;
}

}  // namespace

void embedding_forward(const float* table, const std::int32_t* ids, i64 n, i64 V, i64 D, float* out) {
  parallel_for(0, n, std::max<i64>(1, 16384 / std::max<i64>(D, 1)), [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) copy_row(table + i64(ids[i]) * D, out + i * D, D, false);
  });
}

void embedding_backward(const std::int32_t* ids, const float* gout, i64 n, i64 V, i64 D, float* gtable) {
  std::vector<unsigned char> used;
  if (distinct(ids, n, V, used)) {
    // A named row is 0 + its one row of gout (the addition kept: -0 becomes +0, as in the
    // reference); the rest are zeros.
    const i64 grain = std::max<i64>(1, 16384 / std::max<i64>(D, 1));
    parallel_for(0, n, grain, [&](i64 i0, i64 i1) {
      for (i64 i = i0; i < i1; ++i) {
        const float* row = gout + i * D;
        float* out = gtable + i64(ids[i]) * D;
        for (i64 d = 0; d < D; d += kLanes) store_first(out + d, D - d, add(zero(), load_first(row + d, D - d)));
      }
    });
    parallel_for(0, V, grain, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r)
        if (used[static_cast<std::size_t>(r)] == 0) std::fill(gtable + r * D, gtable + (r + 1) * D, 0.0f);
    });
    return;
  }
  fill(gtable, 0.0f, V * D);
  // Column blocks of one vector each, at least 4 blocks per thread.
  const i64 blocks = (D + kLanes - 1) / kLanes;
  parallel_for(0, blocks, 4, [&](i64 b0, i64 b1) {
    const i64 d0 = b0 * kLanes, width = std::min(D, b1 * kLanes) - d0;
    for (i64 i = 0; i < n; ++i) copy_row(gout + i * D + d0, gtable + i64(ids[i]) * D + d0, width, true);
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
