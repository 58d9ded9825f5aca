// Causal Plücker pairing (the Grassmann mixing of PAPERS.md §2). For every position t and
// offset Δ with t - Δ >= 0, the pair u = z[b,t], v = z[b,t-Δ] spans a plane whose Plücker
// coordinates are
//   p_ij = u_i v_j - u_j v_i,   i < j,  pair order (0,1),(0,2),...,(0,r-1),(1,2),...
// and the kernel returns them normalised:  phat = p / max(||p||, eps).
// Positions with t - Δ < 0 have no partner: their output and norm are 0.
#include <cmath>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

namespace {

// Visits the P = r(r-1)/2 pairs (i, j), i < j, with their coordinate index k.
template <typename Visit>
void for_each_pair(i64 r, Visit&& visit) {
  i64 k = 0;
  for (i64 i = 0; i < r; ++i)
    for (i64 j = i + 1; j < r; ++j) visit(k++, i, j);
}

template <typename T>
acc_t plucker_coordinate(const T* u, const T* v, i64 i, i64 j) {
  return acc_t(u[i]) * acc_t(v[j]) - acc_t(u[j]) * acc_t(v[i]);
}

// max(||p||, eps)
template <typename T>
acc_t clamped_plucker_norm(const T* u, const T* v, i64 r, T eps) {
  acc_t squares = 0;
  for_each_pair(r, [&](i64, i64 i, i64 j) {
    const acc_t p = plucker_coordinate(u, v, i, j);
    squares += p * p;
  });
  return std::fmax(std::sqrt(squares), acc_t(eps));
}

// dL/dp_k for phat = p / max(||p||, eps), given phat (y), dL/dphat (gy) and y . gy:
//   ||p|| > eps:  phat = p / ||p||, so dp = (gy - y (y . gy)) / ||p||  (the radial part of
//                 gy is lost in the normalisation)
//   otherwise:    phat = p / eps, a constant scale, so dp = gy / eps
// `norm` is the stored max(||p||, eps): it exceeds eps exactly when ||p|| does.
acc_t normalised_backward(acc_t gy_k, acc_t y_k, acc_t y_dot_gy, acc_t norm, acc_t eps) {
  if (norm > eps) return (gy_k - y_k * y_dot_gy) / norm;
  return gy_k / eps;
}

// Chain rule through p_ij = u_i v_j - u_j v_i into gu, gv.
template <typename T>
void add_pair_gradient(acc_t dp, const T* u, const T* v, i64 i, i64 j, T* gu, T* gv) {
  gu[i] += T(dp * acc_t(v[j]));
  gu[j] -= T(dp * acc_t(v[i]));
  gv[j] += T(dp * acc_t(u[i]));
  gv[i] -= T(dp * acc_t(u[j]));
}

}  // namespace

// out (B, L, m, P), norms (B, L, m)
template <typename T>
void plucker_forward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps, T* out,
                     T* norms) {
  // course 16 begin: the causal Plücker pairs, normalised (kernels/plucker_walkthrough.md)
  const i64 P = r * (r - 1) / 2;
  for (i64 b = 0; b < B; ++b) {
    for (i64 t = 0; t < L; ++t) {
      for (i64 o = 0; o < m; ++o) {
        const i64 s = t - offsets[o];  // the partner position t - Δ
        T* phat = out + ((b * L + t) * m + o) * P;
        T* norm = norms + (b * L + t) * m + o;
        if (s < 0) {
          for (i64 k = 0; k < P; ++k) phat[k] = T(0);
          *norm = T(0);
          continue;
        }
        const T* u = z + (b * L + t) * r;
        const T* v = z + (b * L + s) * r;
        const acc_t n = clamped_plucker_norm(u, v, r, eps);
        for_each_pair(
            r, [&](i64 k, i64 i, i64 j) { phat[k] = T(plucker_coordinate(u, v, i, j) / n); });
        *norm = T(n);
      }
    }
  }
  // course 16 end
}

// gz (B, L, r) from gout (B, L, m, P): each valid (t, Δ) sends gradient to both z[t] and
// z[t-Δ].
template <typename T>
void plucker_backward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps,
                      const T* out, const T* norms, const T* gout, T* gz) {
  // course 17 begin: the Plücker pairs' backward, through the normalisation and the minors
  const i64 P = r * (r - 1) / 2;
  for (i64 e = 0; e < B * L * r; ++e) gz[e] = T(0);
  for (i64 b = 0; b < B; ++b) {
    for (i64 t = 0; t < L; ++t) {
      for (i64 o = 0; o < m; ++o) {
        const i64 s = t - offsets[o];
        if (s < 0) continue;
        const T* y = out + ((b * L + t) * m + o) * P;
        const T* gy = gout + ((b * L + t) * m + o) * P;
        const acc_t n = norms[(b * L + t) * m + o];
        acc_t y_dot_gy = 0;
        for (i64 k = 0; k < P; ++k) y_dot_gy += acc_t(y[k]) * acc_t(gy[k]);
        const T* u = z + (b * L + t) * r;
        const T* v = z + (b * L + s) * r;
        for_each_pair(r, [&](i64 k, i64 i, i64 j) {
          const acc_t dp = normalised_backward(gy[k], y[k], y_dot_gy, n, eps);
          add_pair_gradient(dp, u, v, i, j, gz + (b * L + t) * r, gz + (b * L + s) * r);
        });
      }
    }
  }
  // course 17 end
}

// out[b,t,:] = (1 / |valid|) sum over valid Δ of phat(t, Δ); 0 where no Δ is valid.
template <typename T>
void plucker_mean_forward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps,
                          T* out, T* norms) {
  const i64 P = r * (r - 1) / 2;
  for (i64 b = 0; b < B; ++b) {
    for (i64 t = 0; t < L; ++t) {
      T* mean = out + (b * L + t) * P;
      i64 valid = 0;
      for (i64 o = 0; o < m; ++o) valid += t - offsets[o] >= 0 ? 1 : 0;
      for (i64 k = 0; k < P; ++k) mean[k] = T(0);
      for (i64 o = 0; o < m; ++o) {
        const i64 s = t - offsets[o];
        T* norm = norms + (b * L + t) * m + o;
        if (s < 0) {
          *norm = T(0);
          continue;
        }
        const T* u = z + (b * L + t) * r;
        const T* v = z + (b * L + s) * r;
        const acc_t n = clamped_plucker_norm(u, v, r, eps);
        for_each_pair(r, [&](i64 k, i64 i, i64 j) {
          mean[k] += T(plucker_coordinate(u, v, i, j) / n / acc_t(valid));
        });
        *norm = T(n);
      }
    }
  }
}

// As plucker_backward with gy = gout[b,t] / |valid| for every valid Δ; phat is rebuilt
// from z and the stored norms since the per-offset vectors were never written.
template <typename T>
void plucker_mean_backward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps,
                           const T* norms, const T* gout, T* gz) {
  for (i64 e = 0; e < B * L * r; ++e) gz[e] = T(0);
  const i64 P = r * (r - 1) / 2;
  for (i64 b = 0; b < B; ++b) {
    for (i64 t = 0; t < L; ++t) {
      i64 valid = 0;
      for (i64 o = 0; o < m; ++o) valid += t - offsets[o] >= 0 ? 1 : 0;
      const T* g_mean = gout + (b * L + t) * P;
      for (i64 o = 0; o < m; ++o) {
        const i64 s = t - offsets[o];
        if (s < 0) continue;
        const T* u = z + (b * L + t) * r;
        const T* v = z + (b * L + s) * r;
        const acc_t n = norms[(b * L + t) * m + o];
        auto y = [&](i64 i, i64 j) { return plucker_coordinate(u, v, i, j) / n; };
        auto gy = [&](i64 k) { return acc_t(g_mean[k]) / acc_t(valid); };
        acc_t y_dot_gy = 0;
        for_each_pair(r, [&](i64 k, i64 i, i64 j) { y_dot_gy += y(i, j) * gy(k); });
        for_each_pair(r, [&](i64 k, i64 i, i64 j) {
          const acc_t dp = normalised_backward(gy(k), y(i, j), y_dot_gy, n, eps);
          add_pair_gradient(dp, u, v, i, j, gz + (b * L + t) * r, gz + (b * L + s) * r);
        });
      }
    }
  }
}

#define WEDGE_REF_INSTANTIATE(T)                                                                  \
  template void plucker_forward<T>(const T*, i64, i64, i64, const int32_t*, i64, T, T*, T*);      \
  template void plucker_backward<T>(const T*, i64, i64, i64, const int32_t*, i64, T, const T*,    \
                                    const T*, const T*, T*);                                      \
  template void plucker_mean_forward<T>(const T*, i64, i64, i64, const int32_t*, i64, T, T*, T*); \
  template void plucker_mean_backward<T>(const T*, i64, i64, i64, const int32_t*, i64, T,         \
                                         const T*, const T*, T*);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
