// Embedding lookup and its scatter-add gradient, AVX-512, threaded. The gradient is the
// same bits as the reference's (kernels/ref/embedding.cpp) on any thread count: threads
// split the columns of the table, never the ids, so every element of gtable receives its
// additions in increasing i exactly as in the reference loop.
#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

// out[0, D) = row[0, D) (or += when add)
inline void copy_row(const float* row, float* out, i64 D, bool add) {
  for (i64 d = 0; d < D; d += 16) {
    const __mmask16 m = first_lanes(D - d);
    __m512 v = _mm512_maskz_loadu_ps(m, row + d);
    if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, out + d));
    _mm512_mask_storeu_ps(out + d, m, v);
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
  // Column blocks of 16 floats (a whole vector each), at least 4 blocks per thread.
  const i64 blocks = (D + 15) / 16;
  parallel_for(0, blocks, 4, [&](i64 b0, i64 b1) {
    const i64 d0 = b0 * 16, width = std::min(D, b1 * 16) - d0;
    for (i64 i = 0; i < n; ++i)
      copy_row(gout + i * D + d0, gtable + i64(ids[i]) * D + d0, width, true);
  });
}

}  // namespace wedge::kernels::cpu::avx512
