// The backward of the GEMM epilogue (a linear layer's bias and GELU), one pass over gy:
//   gh = gy * gelu'(h)  (GELU only),   gbias[j] = sum over rows of gh[., j].
// The threads own column blocks of 8 vectors (128 columns at 16 lanes, 64 at 8), whose
// accumulators stay in registers, and walk every row in order, so each column is summed in
// increasing row order whatever the thread count: bit-identical across runs and thread
// counts. One source for both widths (simd.h).
#include "kernels/cpu/simd.h"

#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

namespace {

constexpr int kBlockVectors = 8;
constexpr i64 kBlockColumns = kLanes * kBlockVectors;

template <bool kGelu, bool kSum>
void column_block(const float* aux, const float* gy, i64 rows, i64 n, i64 col0, float* gh, float* gbias) {
  const i64 width = std::min(kBlockColumns, n - col0);
  vf acc[kBlockVectors];
  for (int v = 0; v < kBlockVectors; ++v) acc[v] = zero();
  for (i64 i = 0; i < rows; ++i) {
    const i64 at = i * n + col0;
#pragma GCC unroll 8
    for (int v = 0; v < kBlockVectors; ++v) {
      // The partial vector at the end of a row neither reads nor writes the columns past n.
      const i64 left = width - kLanes * v;
      if (left <= 0) break;
      vf g = load_first(gy + at + kLanes * v, left);
      if constexpr (kGelu) {  // (without GELU, aux and gh may be null: no offsets from them)
        g = mul(g, gelu_derivative(load_first(aux + at + kLanes * v, left)));
        store_first(gh + at + kLanes * v, left, g);
      }
      if constexpr (kSum) acc[v] = add(acc[v], g);
    }
  }
  if constexpr (kSum) {
    for (int v = 0; v < kBlockVectors && width - kLanes * v > 0; ++v)
      store_first(gbias + col0 + kLanes * v, width - kLanes * v, acc[v]);
  }
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
    for (i64 b = b0; b < b1; ++b) {
      const i64 col0 = b * kBlockColumns;
      if (gelu && sum) column_block<true, true>(aux, gy, rows, n, col0, gh, gbias);
      else if (gelu) column_block<true, false>(aux, gy, rows, n, col0, gh, gbias);
      else column_block<false, true>(aux, gy, rows, n, col0, gh, gbias);
    }
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
