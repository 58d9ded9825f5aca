// The backward of the GEMM epilogue (a linear layer's bias and GELU) for CPUs with AVX2 but
// not AVX-512; it mirrors gemm_epilogue_avx512.cpp. One pass over gy:
//   gh = gy * gelu'(h)  (GELU only),   gbias[j] = sum over rows of gh[., j].
// The threads own column blocks of 64 (8 vectors of accumulators) and walk every row in
// order, so each column is summed in increasing row order whatever the thread count:
// bit-identical across runs and thread counts.
#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {

namespace {

constexpr int kBlockVectors = 8;
constexpr i64 kBlockColumns = 8 * kBlockVectors;

// One vector of a row: gh = gy * gelu'(aux) (stored) and/or the running column sum. kWhole
// vectors load and store plainly; the one partial vector at the end of a row goes through
// the lane mask, which neither reads nor writes the columns past n.
template <bool kGelu, bool kSum, bool kWhole>
inline void step(const float* aux, const float* gy, float* gh, __m256i mask, __m256& acc) {
  __m256 g = kWhole ? _mm256_loadu_ps(gy) : _mm256_maskload_ps(gy, mask);
  if constexpr (kGelu) {
    const __m256 h = kWhole ? _mm256_loadu_ps(aux) : _mm256_maskload_ps(aux, mask);
    g = _mm256_mul_ps(g, gelu_derivative8(h));
    if constexpr (kWhole) _mm256_storeu_ps(gh, g);
    else _mm256_maskstore_ps(gh, mask, g);
  }
  if constexpr (kSum) acc = _mm256_add_ps(acc, g);
}

template <bool kGelu, bool kSum>
void column_block(const float* aux, const float* gy, i64 rows, i64 n, i64 col0, float* gh, float* gbias) {
  const i64 width = std::min(kBlockColumns, n - col0);
  const int whole = static_cast<int>(width / 8);  // vectors of 8 columns
  const bool partial = width % 8 != 0;
  const __m256i tail = first_lanes8(width % 8);
  __m256 acc[kBlockVectors];
  for (int v = 0; v < kBlockVectors; ++v) acc[v] = _mm256_setzero_ps();
  for (i64 i = 0; i < rows; ++i) {
    const i64 at = i * n + col0;
#pragma GCC unroll 8
    for (int v = 0; v < kBlockVectors; ++v) {
      const i64 c = at + 8 * v;
      // Without GELU, aux and gh may be null: no offsets from them.
      const float* const h = kGelu ? aux + c : nullptr;
      float* const out = kGelu ? gh + c : nullptr;
      if (v < whole) {
        step<kGelu, kSum, true>(h, gy + c, out, tail, acc[v]);
      } else {
        if (partial) step<kGelu, kSum, false>(h, gy + c, out, tail, acc[v]);
        break;
      }
    }
  }
  if constexpr (kSum) {
    for (int v = 0; v < whole; ++v) _mm256_storeu_ps(gbias + col0 + 8 * v, acc[v]);
    if (partial) _mm256_maskstore_ps(gbias + col0 + 8 * whole, tail, acc[whole]);
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

}  // namespace wedge::kernels::cpu::avx2
