// Softmax, log-softmax and softmax cross-entropy over the last axis.
// All of them subtract the row maximum before exponentiating: softmax(x) = softmax(x - c)
// for any constant c, and with c = max(x) every exponent is <= 0, so nothing overflows.
#include <cmath>
#include <limits>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

namespace {

// The two numbers that describe a row x: its maximum m and s = sum_j exp(x_j - m).
// Then log sum_j exp(x_j) = m + log s.
struct RowStats {
  acc_t max;
  acc_t sum_exp;
  acc_t log_sum_exp() const { return max + std::log(sum_exp); }
};

template <typename T>
RowStats row_stats(const T* x, i64 n) {
  acc_t max = -std::numeric_limits<acc_t>::infinity();
  for (i64 j = 0; j < n; ++j) max = x[j] > max ? acc_t(x[j]) : max;
  acc_t sum = 0;
  for (i64 j = 0; j < n; ++j) sum += std::exp(acc_t(x[j]) - max);
  return {max, sum};
}

}  // namespace

//   softmax:     y_j = exp(x_j - m) / s
//   log_softmax: y_j = (x_j - m) - log s           (m = row max, s = sum_k exp(x_k - m))
// Working with x_j - m rather than x_j - lse keeps full precision when the logits are
// large (lse = 1003.4 would leave only ~13 significant digits to x_j - lse).
// In-place (x == y) is fine: m and s are known before any y_j is written.
template <typename T>
void softmax_forward(const T* x, T* y, i64 rows, i64 n, bool log) {
  for (i64 r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    const RowStats row = row_stats(xr, n);
    const acc_t log_sum = std::log(row.sum_exp);
    for (i64 j = 0; j < n; ++j) {
      const acc_t shifted = acc_t(xr[j]) - row.max;
      yr[j] = T(log ? shifted - log_sum : std::exp(shifted) / row.sum_exp);
    }
  }
}

//   softmax:     gx_j = y_j (gy_j - sum_k gy_k y_k)
//   log_softmax: gx_j = gy_j - exp(y_j) sum_k gy_k
template <typename T>
void softmax_backward(const T* y, const T* gy, T* gx, i64 rows, i64 n, bool log) {
  // course 07 begin: softmax and log-softmax backward, the reference kernel
  for (i64 r = 0; r < rows; ++r) {
    const T* yr = y + r * n;
    const T* gyr = gy + r * n;
    T* gxr = gx + r * n;
    acc_t sum = 0;
    for (i64 j = 0; j < n; ++j) sum += log ? acc_t(gyr[j]) : acc_t(gyr[j]) * acc_t(yr[j]);
    for (i64 j = 0; j < n; ++j) {
      gxr[j] = log ? T(acc_t(gyr[j]) - std::exp(acc_t(yr[j])) * sum)
                   : T(acc_t(yr[j]) * (acc_t(gyr[j]) - sum));
    }
  }
  // course 07 end
}

// Per row r with target t_r != ignore_index:  nll_r = lse_r - logits[r, t_r]
//   loss = (1 / count) sum_r nll_r,  count = number of such rows (loss = 0 if none).
// lse is written for every row, ignored or not.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, i64 rows, i64 V,
                           int32_t ignore_index, T* lse, T* loss, T* count) {
  acc_t total = 0;
  i64 counted = 0;
  for (i64 r = 0; r < rows; ++r) {
    const T* row = logits + r * V;
    const acc_t row_lse = row_stats(row, V).log_sum_exp();
    lse[r] = T(row_lse);
    if (targets[r] == ignore_index) continue;
    total += row_lse - acc_t(row[targets[r]]);
    ++counted;
  }
  *loss = counted > 0 ? T(total / acc_t(counted)) : T(0);
  *count = T(counted);
}

// glogits[r, j] = (softmax(logits_r)_j - [j == t_r]) * gloss / count,  0 on ignored rows.
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* count,
                            const T* gloss, i64 rows, i64 V, int32_t ignore_index, T* glogits) {
  // course 09 begin: cross-entropy backward, the reference kernel (softmax minus one-hot, ignored rows zero)
  const acc_t scale = *count > T(0) ? acc_t(*gloss) / acc_t(*count) : 0.0;
  for (i64 r = 0; r < rows; ++r) {
    const T* row = logits + r * V;
    T* grow = glogits + r * V;
    const bool ignored = targets[r] == ignore_index;
    for (i64 j = 0; j < V; ++j) {
      if (ignored) {
        grow[j] = T(0);
        continue;
      }
      const acc_t prob = std::exp(acc_t(row[j]) - acc_t(lse[r]));
      const acc_t onehot = j == targets[r] ? 1.0 : 0.0;
      grow[j] = T((prob - onehot) * scale);
    }
  }
  // course 09 end
}

#define WEDGE_REF_INSTANTIATE(T)                                                                   \
  template void softmax_forward<T>(const T*, T*, i64, i64, bool);                                  \
  template void softmax_backward<T>(const T*, const T*, T*, i64, i64, bool);                       \
  template void cross_entropy_forward<T>(const T*, const int32_t*, i64, i64, int32_t, T*, T*, T*); \
  template void cross_entropy_backward<T>(const T*, const int32_t*, const T*, const T*, const T*,  \
                                          i64, i64, int32_t, T*);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
