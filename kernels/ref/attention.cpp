// Scaled dot-product attention, one head at a time, without ever forming the L x L matrix
// in memory (kernels allocate nothing): each score is recomputed from q and k when needed.
// Sums over keys of vectors (out, gq, gk, gv) accumulate in T in the output itself.
//   s_ij = scale * q_i . k_j        (s_ij = -inf for j > i when causal)
//   lse_i = log sum_j exp(s_ij),    P_ij = exp(s_ij - lse_i)
//   out_i = sum_j P_ij v_j
#include <cmath>
#include <limits>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

namespace {

template <typename T>
struct Head {
  const T* q;
  const T* k;
  i64 dh;
  T scale;
  bool causal;

  // The scaled, masked score s_ij. exp(-inf) = 0 removes a masked key from every sum.
  acc_t score(i64 i, i64 j) const {
    if (causal && j > i) return -std::numeric_limits<acc_t>::infinity();
    acc_t dot = 0;
    for (i64 d = 0; d < dh; ++d) dot += acc_t(q[i * dh + d]) * acc_t(k[j * dh + d]);
    return acc_t(scale) * dot;
  }
};

}  // namespace

template <typename T>
void attention_forward(const T* q, const T* k, const T* v, i64 BH, i64 L, i64 dh, T scale,
                       bool causal, T* out, T* lse) {
  for (i64 h = 0; h < BH; ++h) {
    const i64 base = h * L * dh;
    const Head<T> head{q + base, k + base, dh, scale, causal};
    const T* vh = v + base;
    T* oh = out + base;
    for (i64 i = 0; i < L; ++i) {
      // course 11 begin: causal attention forward, the reference kernel: a numerically stable softmax of each row of scores, then the weighted sum of values
      // Stable log-sum-exp of row i: subtract the row maximum before exponentiating.
      acc_t max = -std::numeric_limits<acc_t>::infinity();
      for (i64 j = 0; j < L; ++j) max = std::fmax(max, head.score(i, j));
      acc_t sum = 0;
      for (i64 j = 0; j < L; ++j) sum += std::exp(head.score(i, j) - max);
      const acc_t row_lse = max + std::log(sum);
      lse[h * L + i] = T(row_lse);
      // out_i = sum_j P_ij v_j, summed straight into the output row: a double row would
      // need scratch memory, and recomputing s_ij per coordinate would cost a factor dh.
      for (i64 d = 0; d < dh; ++d) oh[i * dh + d] = T(0);
      for (i64 j = 0; j < L; ++j) {
        const acc_t P = std::exp(head.score(i, j) - row_lse);
        for (i64 d = 0; d < dh; ++d) oh[i * dh + d] += T(P * acc_t(vh[j * dh + d]));
      }
      // course 11 end
    }
  }
}

// With dP_ij = gout_i . v_j and D_i = sum_j P_ij dP_ij = gout_i . out_i:
//   dS_ij = P_ij (dP_ij - D_i)                 (softmax backward, row by row)
//   gq_i = scale sum_j dS_ij k_j,   gk_j = scale sum_i dS_ij q_i,   gv_j = sum_i P_ij gout_i
template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* gout, i64 BH, i64 L, i64 dh, T scale, bool causal, T* gq, T* gk,
                        T* gv) {
  for (i64 e = 0; e < BH * L * dh; ++e) gq[e] = gk[e] = gv[e] = T(0);
  for (i64 h = 0; h < BH; ++h) {
    const i64 base = h * L * dh;
    const Head<T> head{q + base, k + base, dh, scale, causal};
    const T *qh = q + base, *kh = k + base, *vh = v + base, *oh = out + base, *goh = gout + base;
    T *gqh = gq + base, *gkh = gk + base, *gvh = gv + base;
    for (i64 i = 0; i < L; ++i) {
      acc_t D = 0;
      for (i64 d = 0; d < dh; ++d) D += acc_t(goh[i * dh + d]) * acc_t(oh[i * dh + d]);
      for (i64 j = 0; j < L; ++j) {
        const acc_t P = std::exp(head.score(i, j) - acc_t(lse[h * L + i]));
        if (P == 0) continue;  // masked (or vanishing) entries contribute nothing
        acc_t dP = 0;
        for (i64 d = 0; d < dh; ++d) dP += acc_t(goh[i * dh + d]) * acc_t(vh[j * dh + d]);
        const acc_t dS = P * (dP - D);
        for (i64 d = 0; d < dh; ++d) {
          gqh[i * dh + d] += T(acc_t(scale) * dS * acc_t(kh[j * dh + d]));
          gkh[j * dh + d] += T(acc_t(scale) * dS * acc_t(qh[i * dh + d]));
          gvh[j * dh + d] += T(P * acc_t(goh[i * dh + d]));
        }
      }
    }
  }
}

// Decoding: query i of the n newest positions sits at position p = L - n + i and sees the
// keys j <= p of its head's cache (rows kv_stride apart); later keys are left out of the
// sums rather than masked with -inf, and rows past L are never read.
template <typename T>
void attention_decode_forward(const T* q, const T* k, const T* v, i64 BH, i64 n, i64 L,
                              i64 kv_stride, i64 dh, T scale, T* out) {
  for (i64 h = 0; h < BH; ++h) {
    const T* kh = k + h * kv_stride;
    const T* vh = v + h * kv_stride;
    for (i64 i = 0; i < n; ++i) {
      const T* qi = q + (h * n + i) * dh;
      T* oi = out + (h * n + i) * dh;
      const i64 visible = L - n + i + 1;
      const auto score = [&](i64 j) {
        acc_t dot = 0;
        for (i64 d = 0; d < dh; ++d) dot += acc_t(qi[d]) * acc_t(kh[j * dh + d]);
        return acc_t(scale) * dot;
      };
      // The stable softmax of the row: subtract its maximum before exponentiating.
      acc_t max = -std::numeric_limits<acc_t>::infinity();
      for (i64 j = 0; j < visible; ++j) max = std::fmax(max, score(j));
      acc_t sum = 0;
      for (i64 j = 0; j < visible; ++j) sum += std::exp(score(j) - max);
      // out_i = sum_j P_ij v_j with P_ij = exp(s_ij - lse_i), summed straight into the output
      // row: the steps of attention_forward, so a decoded row and the same row of a causal
      // attention_forward over the whole stream are the same numbers.
      const acc_t lse = max + std::log(sum);
      for (i64 d = 0; d < dh; ++d) oi[d] = T(0);
      for (i64 j = 0; j < visible; ++j) {
        const acc_t P = std::exp(score(j) - lse);
        for (i64 d = 0; d < dh; ++d) oi[d] += T(P * acc_t(vh[j * dh + d]));
      }
    }
  }
}

#define WEDGE_REF_INSTANTIATE(T)                                                                  \
  template void attention_forward<T>(const T*, const T*, const T*, i64, i64, i64, T, bool, T*,    \
                                     T*);                                                         \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*, \
                                      i64, i64, i64, T, bool, T*, T*, T*);                        \
  template void attention_decode_forward<T>(const T*, const T*, const T*, i64, i64, i64, i64,     \
                                            i64, T, T*);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
