// Batched matrix multiply, the textbook triple loop:
//   C_b[i,j] = alpha * sum_p op(A_b)[i,p] * op(B_b)[p,j] + beta * C_b[i,j]
#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

template <typename T>
void gemm(const GemmArgs<T>& g) {
  for (i64 b = 0; b < g.batch; ++b) {
    const T* A = g.a + b * g.stride_a;
    const T* B = g.b + b * g.stride_b;
    T* C = g.c + b * g.stride_c;
    // op(A)[i,p]: A is stored m x k (row i, column p) or, transposed, k x m.
    auto a_at = [&](i64 i, i64 p) {
      return g.trans_a == Trans::N ? A[i * g.lda + p] : A[p * g.lda + i];
    };
    auto b_at = [&](i64 p, i64 j) {
      return g.trans_b == Trans::N ? B[p * g.ldb + j] : B[j * g.ldb + p];
    };
    for (i64 i = 0; i < g.m; ++i) {
      for (i64 j = 0; j < g.n; ++j) {
        acc_t dot = 0;
        for (i64 p = 0; p < g.k; ++p) dot += acc_t(a_at(i, p)) * acc_t(b_at(p, j));
        // beta == 0 means "C is output only": never read it, it may hold NaNs.
        acc_t previous = g.beta == T(0) ? acc_t(0) : acc_t(g.beta) * acc_t(C[i * g.ldc + j]);
        C[i * g.ldc + j] = T(acc_t(g.alpha) * dot + previous);
      }
    }
  }
}

template void gemm<float>(const GemmArgs<float>&);
template void gemm<double>(const GemmArgs<double>&);

}  // namespace wedge::kernels::ref
