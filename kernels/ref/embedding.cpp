// Embedding lookup: out[i, :] = table[ids[i], :], and its gradient, a scatter-add.
#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

template <typename T>
void embedding_forward(const T* table, const int32_t* ids, i64 n, i64 V, i64 D, T* out) {
  for (i64 i = 0; i < n; ++i) {
    const T* row = table + i64(ids[i]) * D;
    for (i64 d = 0; d < D; ++d) out[i * D + d] = row[d];
  }
}

// gtable[v, :] = sum over i with ids[i] == v of gout[i, :], added in increasing i so the
// result is the same bits on every run (a repeated id is where parallel versions differ).
template <typename T>
void embedding_backward(const int32_t* ids, const T* gout, i64 n, i64 V, i64 D, T* gtable) {
  // course 10 begin: embedding backward, the reference kernel (a scatter-add of rows)
  for (i64 e = 0; e < V * D; ++e) gtable[e] = T(0);
  for (i64 i = 0; i < n; ++i) {
    T* row = gtable + i64(ids[i]) * D;
    for (i64 d = 0; d < D; ++d) row[d] += gout[i * D + d];
  }
  // course 10 end
}

#define WEDGE_REF_INSTANTIATE(T)                                                   \
  template void embedding_forward<T>(const T*, const int32_t*, i64, i64, i64, T*); \
  template void embedding_backward<T>(const int32_t*, const T*, i64, i64, i64, T*);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
