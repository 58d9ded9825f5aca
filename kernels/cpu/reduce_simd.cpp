// Reductions, threaded (reduce) or on one thread (sum_squares), and equal to the reference
// kernels bit for bit where the reference's order allows it: sums over the middle axis
// accumulate in double in increasing index order, like the reference, vectorised across
// the inner axis (never across the summed one). Max reductions keep the reference loop.
// One source for both widths (simd.h).
#include "kernels/cpu/simd.h"

#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {

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
  // kLanes inner columns per task, each summed in double over i in increasing order.
  const i64 groups = (inner + kLanes - 1) / kLanes;
  parallel_for(0, outer * groups, std::max<i64>(1, kGrainElements / std::max<i64>(kLanes * n, 1)),
               [&](i64 t0, i64 t1) {
                 for (i64 t = t0; t < t1; ++t) {
                   const i64 o = t / groups, j = (t % groups) * kLanes;
                   vd lo = zero_d(), hi = zero_d();
                   const float* col = x + o * n * inner + j;
                   for (i64 i = 0; i < n; ++i) {
                     const vf v = load_first(col + i * inner, inner - j);
                     lo = add(lo, widen_lo(v));
                     hi = add(hi, widen_hi(v));
                   }
                   store_first(y + o * inner + j, inner - j, narrow(lo, hi));
                 }
               });
}

// One thread, a fixed order (two vectors of double lanes, then a fixed reduction):
// deterministic and, at memory speed, fast enough for the whole model's gradients.
void sum_squares(const float* x, i64 n, float* out, bool accumulate) {
  vd s0 = zero_d(), s1 = zero_d();
  for (i64 i = 0; i < n; i += kLanes) {
    const vf v = load_first(x + i, n - i);
    const vd lo = widen_lo(v), hi = widen_hi(v);
    s0 = fmadd(lo, lo, s0);
    s1 = fmadd(hi, hi, s1);
  }
  const double total = hsum(add(s0, s1));
  *out = accumulate ? float(double(*out) + total) : float(total);
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
