// Reductions: over the middle axis of a tensor (sum, or max with its index), and the sum
// of squares behind gradient-norm clipping. Sums are formed in double (acc_t) in
// increasing index order.
#include <cmath>
#include <limits>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

// Over the middle axis of x (outer, n, inner):
//   Sum: y[o,j] = sum_i x[o,i,j], summed in increasing i
//   Max: y[o,j] = max_i x[o,i,j], idx[o,j] = the first i attaining it
// A NaN counts as larger than everything (the first NaN wins), so it is never hidden.
template <typename T>
void reduce(ReduceOp op, const T* x, T* y, int32_t* idx, i64 outer, i64 n, i64 inner) {
  for (i64 o = 0; o < outer; ++o) {
    for (i64 j = 0; j < inner; ++j) {
      auto at = [&](i64 i) { return x[(o * n + i) * inner + j]; };
      if (op == ReduceOp::Sum) {
        acc_t sum = 0;
        for (i64 i = 0; i < n; ++i) sum += at(i);
        y[o * inner + j] = T(sum);
      } else {
        T best = -std::numeric_limits<T>::infinity();
        int32_t best_index = n > 0 ? 0 : -1;
        for (i64 i = 0; i < n; ++i) {
          const T value = at(i);
          if (value > best || (std::isnan(value) && !std::isnan(best))) {
            best = value;
            best_index = int32_t(i);
          }
        }
        y[o * inner + j] = best;
        if (idx != nullptr) idx[o * inner + j] = best_index;
      }
    }
  }
}

// *out (+)= sum_i x[i]^2
template <typename T>
void sum_squares(const T* x, i64 n, T* out, bool accumulate) {
  acc_t sum = 0;
  for (i64 i = 0; i < n; ++i) sum += acc_t(x[i]) * acc_t(x[i]);
  *out = accumulate ? T(acc_t(*out) + sum) : T(sum);
}

#define WEDGE_REF_INSTANTIATE(T)                                            \
  template void reduce<T>(ReduceOp, const T*, T*, int32_t*, i64, i64, i64); \
  template void sum_squares<T>(const T*, i64, T*, bool);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
