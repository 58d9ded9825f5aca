// Batched matrix multiply, the textbook triple loop:
//   C_b[i,j] = alpha * sum_p op(A_b)[i,p] * op(B_b)[p,j] + beta * C_b[i,j]
// followed by the epilogue of a linear layer (kernels.h): + bias[j], then GELU keeping
// the pre-activation in aux. bias_act_backward is the epilogue's backward.
// Under Precision::BF16 (float only) each operand element is rounded to bf16 as it is read:
// the oracle of every mixed-precision GEMM.
#include <cmath>
#include <type_traits>

#include "kernels/ref/bf16.h"
#include "kernels/ref/ref.h"
#include "kernels/ref/scalar_math.h"

namespace wedge::kernels::ref {

namespace {

// Writes h (bias already added) to C — and to aux, with C = gelu(h), under GELU.
template <typename T>
void store_epilogue(const GemmArgs<T>& g, i64 b, i64 i, i64 j, acc_t h) {
  const i64 at = b * g.stride_c + i * g.ldc + j;
  if (g.act == Activation::Gelu) {
    g.aux[at] = T(h);
    h = acc_t(T(h));  // the backward sees the stored h, so the forward uses it too
    g.c[at] = T(h * normal_cdf(h));
  } else {
    g.c[at] = T(h);
  }
}

}  // namespace

template <typename T>
void gemm(const GemmArgs<T>& g) {
  for (i64 b = 0; b < g.batch; ++b) {
    const T* A = g.a + b * g.stride_a;
    const T* B = g.b + b * g.stride_b;
    T* C = g.c + b * g.stride_c;
    // op(A)[i,p]: A is stored m x k (row i, column p) or, transposed, k x m.
    const bool bf16 = std::is_same_v<T, float> && g.precision == Precision::BF16;
    auto operand = [&](T x) { return bf16 ? T(bf16_round(float(x))) : x; };
    auto a_at = [&](i64 i, i64 p) {
      return operand(g.trans_a == Trans::N ? A[i * g.lda + p] : A[p * g.lda + i]);
    };
    auto b_at = [&](i64 p, i64 j) {
      return operand(g.trans_b == Trans::N ? B[p * g.ldb + j] : B[j * g.ldb + p]);
    };
    for (i64 i = 0; i < g.m; ++i) {
      for (i64 j = 0; j < g.n; ++j) {
        acc_t dot = 0;
        for (i64 p = 0; p < g.k; ++p) dot += acc_t(a_at(i, p)) * acc_t(b_at(p, j));
        // beta == 0 means "C is output only": never read it, it may hold NaNs.
        acc_t previous = g.beta == T(0) ? acc_t(0) : acc_t(g.beta) * acc_t(C[i * g.ldc + j]);
        acc_t h = acc_t(g.alpha) * dot + previous;
        if (g.bias != nullptr) h += acc_t(g.bias[j]);
        store_epilogue(g, b, i, j, h);
      }
    }
  }
}

template <typename T>
void gemm_epilogue(const GemmArgs<T>& g) {
  if (!g.has_epilogue()) return;
  for (i64 b = 0; b < g.batch; ++b)
    for (i64 i = 0; i < g.m; ++i)
      for (i64 j = 0; j < g.n; ++j) {
        acc_t h = acc_t(g.c[b * g.stride_c + i * g.ldc + j]);
        if (g.bias != nullptr) h += acc_t(g.bias[j]);
        store_epilogue(g, b, i, j, h);
      }
}

template <typename T>
void bias_act_backward(Activation act, const T* aux, const T* gy, i64 rows, i64 n, T* gh, T* gbias) {
  for (i64 j = 0; j < n; ++j) {
    acc_t sum = 0;
    for (i64 i = 0; i < rows; ++i) {
      acc_t g = acc_t(gy[i * n + j]);
      if (act == Activation::Gelu) {
        const acc_t h = acc_t(aux[i * n + j]);
        g *= normal_cdf(h) + h * normal_pdf(h);  // (x Phi(x))'
        gh[i * n + j] = T(g);
        g = acc_t(T(g));  // the bias gradient is the sum of the gh that was written
      }
      sum += g;
    }
    if (gbias != nullptr) gbias[j] = T(sum);
  }
}

template void gemm<float>(const GemmArgs<float>&);
template void gemm<double>(const GemmArgs<double>&);
template void gemm_epilogue<float>(const GemmArgs<float>&);
template void gemm_epilogue<double>(const GemmArgs<double>&);
template void bias_act_backward<float>(Activation, const float*, const float*, i64, i64, float*, float*);
template void bias_act_backward<double>(Activation, const double*, const double*, i64, i64, double*, double*);

}  // namespace wedge::kernels::ref
