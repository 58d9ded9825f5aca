// The backward of the GEMM epilogue (a linear layer's bias and GELU), one pass over gy:
//   gh = gy * gelu'(h)  (GELU only),   gbias[j] = sum over rows of gh[., j].
// The threads own contiguous ranges of columns (whole blocks of kLanes * 8) and walk the
// rows in order, each row's share of their columns front to back, with the column sums in
// a small per-thread buffer that stays in L1. So every column is summed in increasing row
// order whatever the thread count (bit-identical across runs and thread counts), and each
// thread reads long contiguous runs of every row. (Walking one narrow column block down
// all the rows, sums in registers, reads a few hundred bytes per row, a row, often a page,
// apart: the hardware prefetchers do not follow that, and in a TransformerLM step its
// feed-forward backward took 1.6x as long.) One source for both widths (simd.h).
#include "kernels/cpu/simd.h"

#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

namespace {

constexpr i64 kBlockColumns = kLanes * 8;  // the unit of the split between threads

// Columns [col0, col1) of every row.
template <bool kGelu, bool kSum>
void column_range(const float* aux, const float* gy, i64 rows, i64 n, i64 col0, i64 col1, float* gh, float* gbias) {
  thread_local ScratchBuffer buffer;
  float* acc = kSum ? buffer.get(static_cast<std::size_t>(col1 - col0)) : nullptr;
  if constexpr (kSum) std::fill(acc, acc + (col1 - col0), 0.0f);
  for (i64 i = 0; i < rows; ++i) {
    const i64 row = i * n;
    for (i64 j = col0; j < col1; j += kLanes) {
      // The partial vector at the end of the range neither reads nor writes past it.
      const i64 left = col1 - j;
      vf g = load_first(gy + row + j, left);
      if constexpr (kGelu) {  // (without GELU, aux and gh may be null: no offsets from them)
        g = mul(g, gelu_derivative(load_first(aux + row + j, left)));
        store_first(gh + row + j, left, g);
      }
      if constexpr (kSum) store_first(acc + (j - col0), left, add(load_first(acc + (j - col0), left), g));
    }
  }
  if constexpr (kSum) std::copy(acc, acc + (col1 - col0), gbias + col0);
}

}  // namespace

void bias_act_backward(Activation act, const float* aux, const float* gy, i64 rows, i64 n, float* gh,
                       float* gbias) {
  const bool gelu = act == Activation::Gelu, sum = gbias != nullptr;
  if ((!gelu && !sum) || n <= 0) return;
  if (rows <= 0) {
    if (sum)
      for (i64 j = 0; j < n; ++j) gbias[j] = 0.0f;
    return;
  }
  const i64 blocks = (n + kBlockColumns - 1) / kBlockColumns;
  parallel_for(0, blocks, 1, [&](i64 b0, i64 b1) {
    const i64 col0 = b0 * kBlockColumns, col1 = std::min(n, b1 * kBlockColumns);
    if (gelu && sum) column_range<true, true>(aux, gy, rows, n, col0, col1, gh, gbias);
    else if (gelu) column_range<true, false>(aux, gy, rows, n, col0, col1, gh, gbias);
    else column_range<false, true>(aux, gy, rows, n, col0, col1, gh, gbias);
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
