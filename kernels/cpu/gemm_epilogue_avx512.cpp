// The backward of the GEMM epilogue (a linear layer's bias and GELU), one pass over gy:
//   gh = gy * gelu'(h)  (GELU only),   gbias[j] = sum over rows of gh[., j].
// The threads own column blocks of 128 (8 vectors of accumulators that stay in registers)
// and walk every row in order, so each column is summed in increasing row order whatever
// the thread count: bit-identical across runs and thread counts.
#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {

namespace {

constexpr int kBlockVectors = 8;
constexpr i64 kBlockColumns = 16 * kBlockVectors;

template <bool kGelu, bool kSum>
void column_block(const float* aux, const float* gy, i64 rows, i64 n, i64 col0, float* gh,
                  float* gbias) {
  const i64 width = std::min(kBlockColumns, n - col0);
  __mmask16 mask[kBlockVectors];
  for (int v = 0; v < kBlockVectors; ++v) mask[v] = first_lanes(width - 16 * v);
  __m512 acc[kBlockVectors];
  for (int v = 0; v < kBlockVectors; ++v) acc[v] = _mm512_setzero_ps();
  for (i64 i = 0; i < rows; ++i) {
    const i64 at = i * n + col0;
#pragma GCC unroll 8
    for (int v = 0; v < kBlockVectors; ++v) {
      if (mask[v] == 0) break;
      __m512 g = _mm512_maskz_loadu_ps(mask[v], gy + at + 16 * v);
      if constexpr (kGelu) {
        g = _mm512_mul_ps(g, gelu_derivative_ps(_mm512_maskz_loadu_ps(mask[v], aux + at + 16 * v)));
        _mm512_mask_storeu_ps(gh + at + 16 * v, mask[v], g);
      }
      if constexpr (kSum) acc[v] = _mm512_add_ps(acc[v], g);
    }
  }
  if constexpr (kSum) {
    for (int v = 0; v < kBlockVectors; ++v)
      if (mask[v] != 0) _mm512_mask_storeu_ps(gbias + col0 + 16 * v, mask[v], acc[v]);
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

}  // namespace wedge::kernels::cpu::avx512
