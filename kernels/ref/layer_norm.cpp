// Layer normalisation over the last axis of (rows, D):
//   mean = (1/D) sum_d x_d,   var = (1/D) sum_d (x_d - mean)^2   (biased, as in the paper)
//   rstd = 1 / sqrt(var + eps),   xhat_d = (x_d - mean) * rstd,   y_d = gamma_d xhat_d + beta_d
//
// The residual pair is the definition written out: the dropout and layer norm reference
// kernels applied in turn (the fused CPU and CUDA kernels are checked against it).
#include <cmath>
#include <vector>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

template <typename T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, i64 rows, i64 D, T eps, T* y,
                        T* mean, T* rstd) {
  for (i64 r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    // Two passes (mean first, then squared deviations): no cancellation as in E[x^2]-E[x]^2.
    acc_t sum = 0;
    for (i64 d = 0; d < D; ++d) sum += xr[d];
    const acc_t mu = sum / acc_t(D);
    acc_t squares = 0;
    for (i64 d = 0; d < D; ++d) squares += (acc_t(xr[d]) - mu) * (acc_t(xr[d]) - mu);
    const acc_t inv_std = 1.0 / std::sqrt(squares / acc_t(D) + acc_t(eps));
    for (i64 d = 0; d < D; ++d) {
      const acc_t xhat = (acc_t(xr[d]) - mu) * inv_std;
      const acc_t scale = gamma != nullptr ? acc_t(gamma[d]) : 1.0;
      const acc_t shift = beta != nullptr ? acc_t(beta[d]) : 0.0;
      yr[d] = T(scale * xhat + shift);
    }
    mean[r] = T(mu);
    rstd[r] = T(inv_std);
  }
}

// With g_d = gy_d * gamma_d (the gradient reaching xhat):
//   gx_d = rstd * (g_d - mean_k(g_k) - xhat_d * mean_k(g_k xhat_k))
//   ggamma_d = sum_rows gy_d xhat_d,   gbeta_d = sum_rows gy_d
template <typename T>
void layer_norm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* gy,
                         i64 rows, i64 D, T* gx, T* ggamma, T* gbeta) {
  // course 08 begin: layer norm backward, the reference kernel (ops/layer_norm_walkthrough.md derives it)
  auto xhat = [&](i64 r, i64 d) { return (acc_t(x[r * D + d]) - acc_t(mean[r])) * acc_t(rstd[r]); };
  for (i64 r = 0; r < rows; ++r) {
    auto g = [&](i64 d) {
      return acc_t(gy[r * D + d]) * (gamma != nullptr ? acc_t(gamma[d]) : 1.0);
    };
    acc_t sum_g = 0, sum_g_xhat = 0;
    for (i64 d = 0; d < D; ++d) {
      sum_g += g(d);
      sum_g_xhat += g(d) * xhat(r, d);
    }
    const acc_t mean_g = sum_g / acc_t(D), mean_g_xhat = sum_g_xhat / acc_t(D);
    for (i64 d = 0; d < D; ++d) {
      gx[r * D + d] = T(acc_t(rstd[r]) * (g(d) - mean_g - xhat(r, d) * mean_g_xhat));
    }
  }
  // Column sums over rows, one column at a time so each keeps a double accumulator
  // without any scratch memory.
  for (i64 d = 0; d < D; ++d) {
    acc_t sum_gy_xhat = 0, sum_gy = 0;
    for (i64 r = 0; r < rows; ++r) {
      sum_gy_xhat += acc_t(gy[r * D + d]) * xhat(r, d);
      sum_gy += acc_t(gy[r * D + d]);
    }
    if (ggamma != nullptr) ggamma[d] = T(sum_gy_xhat);
    if (gbeta != nullptr) gbeta[d] = T(sum_gy);
  }
  // course 08 end
}

// s = x + dropout(y), out = layer_norm(s).
template <typename T>
void residual_layer_norm_forward(const T* x, const T* y, const T* gamma, const T* beta, i64 rows,
                                 i64 D, float p, std::uint64_t seed, std::uint64_t offset, T eps,
                                 T* s, T* out, T* mean, T* rstd) {
  const i64 n = rows * D;
  dropout_forward(y, s, n, p, seed, offset);
  for (i64 i = 0; i < n; ++i) s[i] = T(x[i] + s[i]);
  layer_norm_forward(s, gamma, beta, rows, D, eps, out, mean, rstd);
}

// gsum = (layer norm backward of gout) + gs; gx = gsum, gy = dropout_backward(gsum).
template <typename T>
void residual_layer_norm_backward(const T* s, const T* gamma, const T* mean, const T* rstd,
                                  const T* gout, const T* gs, i64 rows, i64 D, float p,
                                  std::uint64_t seed, std::uint64_t offset, T* gx, T* gy, T* ggamma,
                                  T* gbeta) {
  const i64 n = rows * D;
  std::vector<T> gsum(static_cast<std::size_t>(n));
  layer_norm_backward(s, gamma, mean, rstd, gout, rows, D, gsum.data(), ggamma, gbeta);
  if (gs != nullptr)
    for (i64 i = 0; i < n; ++i) gsum[i] = T(gsum[i] + gs[i]);
  if (gx != nullptr)
    for (i64 i = 0; i < n; ++i) gx[i] = gsum[i];
  if (gy != nullptr) dropout_backward(gsum.data(), gy, n, p, seed, offset);
}

#define WEDGE_REF_INSTANTIATE(T)                                                                      \
  template void layer_norm_forward<T>(const T*, const T*, const T*, i64, i64, T, T*, T*, T*);         \
  template void layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, i64, i64,    \
                                       T*, T*, T*);                                                   \
  template void residual_layer_norm_forward<T>(const T*, const T*, const T*, const T*, i64, i64, float, \
                                               std::uint64_t, std::uint64_t, T, T*, T*, T*, T*);      \
  template void residual_layer_norm_backward<T>(const T*, const T*, const T*, const T*, const T*,       \
                                                const T*, i64, i64, float, std::uint64_t,             \
                                                std::uint64_t, T*, T*, T*, T*);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
