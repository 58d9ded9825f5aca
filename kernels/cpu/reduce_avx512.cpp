// AVX-512 reductions, threaded (reduce) or on one thread (sum_squares), and equal to the
// reference kernels bit for bit: sums over the middle axis accumulate in double in
// increasing index order, like the reference, vectorised across the inner axis (never
// across the summed one). Max reductions keep the reference loop.
#include "engine/thread_pool.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {

// Elements a thread should sum at the least: below that, waking a second thread costs
// more than it saves (the gluing chain of SheafStateLM sums thousands of tiny slices).
constexpr i64 kGrainElements = 1 << 14;

void reduce(ReduceOp op, const float* x, float* y, std::int32_t* idx, i64 outer, i64 n, i64 inner) {
  if (op != ReduceOp::Sum) {
    ref_table_f32().reduce(op, x, y, idx, outer, n, inner);
    return;
  }
  if (inner == 1) {
    // Summing along contiguous memory: a vector sum would change the order; the rows
    // are still independent.
    parallel_for(0, outer, std::max<i64>(16, kGrainElements / std::max<i64>(n, 1)), [&](i64 o0, i64 o1) {
      for (i64 o = o0; o < o1; ++o) {
        double sum = 0;
        for (i64 i = 0; i < n; ++i) sum += x[o * n + i];
        y[o] = static_cast<float>(sum);
      }
    });
    return;
  }
  // 16 inner columns per task, each summed in double over i in increasing order.
  const i64 groups = (inner + 15) / 16;
  parallel_for(0, outer * groups, std::max<i64>(1, kGrainElements / std::max<i64>(16 * n, 1)), [&](i64 t0, i64 t1) {
    for (i64 t = t0; t < t1; ++t) {
      const i64 o = t / groups, j = (t % groups) * 16;
      const __mmask16 mask = first_lanes(inner - j);
      __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
      const float* col = x + o * n * inner + j;
      for (i64 i = 0; i < n; ++i) {
        const __m512 v = _mm512_maskz_loadu_ps(mask, col + i * inner);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        hi = _mm512_add_pd(
            hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
      }
      const __m512 sums =
          _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
      _mm512_mask_storeu_ps(y + o * inner + j, mask, sums);
    }
  });
}

// One thread, a fixed order (16 double lanes x 2, then a fixed reduction): deterministic
// and, at memory speed, fast enough for the whole model's gradients.
void sum_squares(const float* x, i64 n, float* out, bool accumulate) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (i64 i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(first_lanes(n - i), x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    s0 = _mm512_fmadd_pd(lo, lo, s0);
    s1 = _mm512_fmadd_pd(hi, hi, s1);
  }
  const double total = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  *out = accumulate ? float(double(*out) + total) : float(total);
}

}  // namespace wedge::kernels::cpu::avx512
