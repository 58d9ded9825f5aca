// Embedding lookup and its scatter-add gradient, threaded; one source for both widths
// (simd.h). The gradient is the same bits as the reference's (kernels/ref/embedding.cpp)
// on any thread count: threads split the columns of the table, never the ids, so every
// element of gtable receives its additions in increasing i exactly as in the reference loop.
// When no id repeats (a permutation or a selection of rows, as the models' row gathers
// are), every row of gtable receives at most one addition to zero, so threads split the ids
// instead, each writing its rows once as it reads gout front to back (the table zeroed
// first unless the ids name every row): the same additions, the same bits.
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

// Whether no id occurs twice (ids are in [0, V)).
bool distinct(const std::int32_t* ids, i64 n, i64 V) {
  if (n > V) return false;
  std::vector<unsigned char> seen(static_cast<std::size_t>(V), 0);
  for (i64 i = 0; i < n; ++i) {
    unsigned char& s = seen[static_cast<std::size_t>(ids[i])];
    if (s != 0) return false;
    s = 1;
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
  if (distinct(ids, n, V)) {
    // A named row is 0 + its one row of gout (the addition kept: -0 becomes +0, as in the
    // reference); the rest are zeros (none when the ids are a permutation).
    if (n < V) fill(gtable, 0.0f, V * D);
    parallel_for(0, n, std::max<i64>(1, 16384 / std::max<i64>(D, 1)), [&](i64 i0, i64 i1) {
      for (i64 i = i0; i < i1; ++i) {
        const float* row = gout + i * D;
        float* out = gtable + i64(ids[i]) * D;
        for (i64 d = 0; d < D; d += kLanes) store_first(out + d, D - d, add(zero(), load_first(row + d, D - d)));
      }
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
