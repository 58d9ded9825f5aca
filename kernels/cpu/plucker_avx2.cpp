// The fused Grassmann mixing step (the mean over valid offsets of normalised Plücker
// vectors), forward and backward, for CPUs with AVX2 but not AVX-512, threaded over
// positions: plucker_avx512.cpp on 8 lanes, the same steps in the same order. Same results
// as kernels/ref/plucker.cpp (plucker_mean_forward / plucker_mean_backward).
//
// As in the AVX-512 kernel (whose header explains the math at length): the antisymmetric
// matrix of the pairs (z_t, v_o) summed over the offsets is one outer-product difference
//   sum_o M_o / (n_o |valid|) = u w^T - w u^T,   w = sum_o v_o / (n_o |valid|),  u = z_t,
// so the per-offset vectors (B, L, m, P) are never formed, and the norms come from
// Lagrange's identity ||p||^2 = ||u||^2 ||v||^2 - (u . v)^2 in double. The backward builds
// the antisymmetric matrix G of each incoming gradient row (cached per thread: row s needs
// G(s) and G(s + offset) for every offset) and sends every pair
//   gu =  (G v / |valid| - (c / n) (u (v.v) - v (u.v))) / n
//   gv = -(G u / |valid| - (c / n) (u (u.v) - v (u.u))) / n        (n > eps)
//   gu = G v / (|valid| eps),  gv = -G u / (|valid| eps)             (n <= eps)
// with c = u^T G v / (n |valid|). Each thread owns whole rows of gz and adds their terms in
// a fixed order (u-side pairs by offset, then v-side pairs by offset), so the result does
// not depend on the thread count. Nearly parallel pairs take the reference's route (p
// formed pair by pair in double). Ranks up to 64 use these kernels; larger ones fall back
// to the reference.
//
// Where the AVX-512 kernel compresses the lanes j > i of a vector into the packed upper
// triangle, this one reads u and w from j = i + 1 on with unaligned loads, so row i of the
// triangle is contiguous whole vectors and one masked tail.
#include <cmath>
#include <cstdint>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {
namespace {

constexpr int kMaxVectors = 8;  // ranks up to 64

// Per-thread cache of the backward's antisymmetric matrices, kept across calls.
thread_local ScratchBuffer t_g_cache;

// A rank-r vector in up to 8 ymm registers (lanes past r are zero).
struct Vec {
  __m256 v[kMaxVectors];
};

template <int nv>
inline Vec load_vec(const float* x, i64 r) {
  Vec out;
#pragma GCC unroll 8
  for (int k = 0; k < nv; ++k) out.v[k] = load_first(x + 8 * k, r - 8 * k);
  return out;
}

inline Vec zero_vec() {
  Vec out;
#pragma GCC unroll 8
  for (int k = 0; k < kMaxVectors; ++k) out.v[k] = _mm256_setzero_ps();
  return out;
}

// u . v in double (each float product is exact in double).
template <int nv>
inline double dot_double(const Vec& a, const Vec& b) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
#pragma GCC unroll 8
  for (int k = 0; k < nv; ++k) {
    lo = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a.v[k])),
                         _mm256_cvtps_pd(_mm256_castps256_ps128(b.v[k])), lo);
    hi = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(a.v[k], 1)),
                         _mm256_cvtps_pd(_mm256_extractf128_ps(b.v[k], 1)), hi);
  }
  const __m256d sum = _mm256_add_pd(lo, hi);
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(sum), _mm256_extractf128_pd(sum, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

// Start of row i's pairs in the packed order (0,1),(0,2),...,(1,2),...
inline i64 row_start(i64 i, i64 r) { return i * (r - 1) - i * (i - 1) / 2; }

// max(||u ^ v||, eps) by Lagrange's identity.
inline float pair_norm(double uu, double vv, double uv, float eps) {
  const double squares = uu * vv - uv * uv;
  return static_cast<float>(std::fmax(std::sqrt(std::fmax(squares, 0.0)), double(eps)));
}

// True when u and v are so close to parallel that the factored forms lose precision.
inline bool nearly_parallel(double uu, double vv, double uv) { return uu * vv - uv * uv < 1e-4 * uu * vv; }

// out (packed upper triangle) += (u v^T - v u^T)_upper / (n valid), formed in double.
void add_pair_direct(const float* u, const float* v, i64 r, double n, double valid, float* out) {
  i64 k = 0;
  for (i64 i = 0; i < r; ++i) {
    for (i64 j = i + 1; j < r; ++j, ++k) {
      const double p = double(u[i]) * double(v[j]) - double(u[j]) * double(v[i]);
      out[k] += static_cast<float>(p / n / valid);
    }
  }
}

// The reference's gradient of one pair for its first (u) or second (v) vector, in double:
// dp = (gy - y (y . gy)) / n  (or gy / eps when clamped), gy = g / valid, y = p / n.
void pair_gradient_direct(const float* u, const float* v, const float* g, i64 r, double n, double valid, double eps,
                          bool first_vector, float* grad) {
  double y_dot_gy = 0;
  i64 k = 0;
  for (i64 i = 0; i < r; ++i) {
    for (i64 j = i + 1; j < r; ++j, ++k) {
      const double p = double(u[i]) * double(v[j]) - double(u[j]) * double(v[i]);
      y_dot_gy += (p / n) * (double(g[k]) / valid);
    }
  }
  double acc[64] = {};
  k = 0;
  for (i64 i = 0; i < r; ++i) {
    for (i64 j = i + 1; j < r; ++j, ++k) {
      const double gy = double(g[k]) / valid;
      const double p = double(u[i]) * double(v[j]) - double(u[j]) * double(v[i]);
      const double dp = n > eps ? (gy - (p / n) * y_dot_gy) / n : gy / eps;
      if (first_vector) {  // d p_ij / d u_i = v_j,  d p_ij / d u_j = -v_i
        acc[i] += dp * double(v[j]);
        acc[j] -= dp * double(v[i]);
      } else {  // d p_ij / d v_j = u_i,  d p_ij / d v_i = -u_j
        acc[j] += dp * double(u[i]);
        acc[i] -= dp * double(u[j]);
      }
    }
  }
  for (i64 i = 0; i < r; ++i) grad[i] = static_cast<float>(acc[i]);
}

inline i64 count_valid(i64 t, const std::int32_t* offsets, i64 m) {
  i64 valid = 0;
  for (i64 o = 0; o < m; ++o) valid += t - offsets[o] >= 0 ? 1 : 0;
  return valid;
}

// G (8 nv rows of 8 nv floats, row-major) from the packed upper triangle g: row i holds
// g_i,(i+1..r-1) in its upper part and -g_(0..i-1),i below the diagonal; the padding rows
// and columns are zero, so products over whole vectors see zeros there.
template <int nv>
void build_antisymmetric(const float* g, i64 r, float* G) {
  constexpr i64 ld = 8 * nv;
  // U: the strictly upper triangle; row i's pairs are contiguous in g and land at j = i + 1.
  alignas(32) float upper[ld * ld];
  for (i64 i = 0; i < ld; ++i) {
    float* dst = upper + i * ld;
#pragma GCC unroll 8
    for (int k = 0; k < nv; ++k) _mm256_store_ps(dst + 8 * k, _mm256_setzero_ps());
    if (i + 1 >= r) continue;
    const float* src = g + row_start(i, r);
    const i64 count = r - 1 - i;
    for (i64 j = 0; j < count; j += 8) store_first(dst + i + 1 + j, count - j, load_first(src + j, count - j));
  }
  // G = U - U^T, transposing 8 x 8 tiles.
  for (int bi = 0; bi < nv; ++bi) {
    for (int bj = 0; bj < nv; ++bj) {
      __m256 tile[8];
      for (int q = 0; q < 8; ++q) tile[q] = _mm256_load_ps(upper + (8 * bj + q) * ld + 8 * bi);
      transpose8x8(tile);  // tile[q] = column 8 bi + q of U restricted to rows 8 bj..
      for (int q = 0; q < 8; ++q) {
        const i64 row = 8 * bi + q;
        _mm256_store_ps(G + row * ld + 8 * bj, _mm256_sub_ps(_mm256_load_ps(upper + row * ld + 8 * bj), tile[q]));
      }
    }
  }
}

// G x = -sum_b x_b G[b, :]  (G antisymmetric: column b is minus row b).
template <int nv>
inline Vec antisym_times(const float* G, const float* x, i64 r) {
  constexpr i64 ld = 8 * nv;
  Vec acc = zero_vec();
  for (i64 b = 0; b < r; ++b) {
    const __m256 xb = _mm256_set1_ps(-x[b]);
#pragma GCC unroll 8
    for (int k = 0; k < nv; ++k) acc.v[k] = _mm256_fmadd_ps(xb, _mm256_load_ps(G + b * ld + 8 * k), acc.v[k]);
  }
  return acc;
}

template <int nv>
inline void add_scaled(Vec& acc, const Vec& x, float s) {
  const __m256 vs = _mm256_set1_ps(s);
#pragma GCC unroll 8
  for (int k = 0; k < nv; ++k) acc.v[k] = _mm256_fmadd_ps(vs, x.v[k], acc.v[k]);
}

// The kernels' bodies, with the number of vectors per rank-r vector fixed at compile time
// so every loop over them unrolls and the vectors stay in registers.
template <int nv>
void mean_forward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m, float eps, float* out,
                  float* norms) {
  const i64 P = r * (r - 1) / 2;
  parallel_for(0, B * L, 64, [&](i64 row0, i64 row1) {
    for (i64 row = row0; row < row1; ++row) {
      const i64 b = row / L, t = row % L;
      const Vec u = load_vec<nv>(z + row * r, r);
      const double uu = dot_double<nv>(u, u);
      const i64 valid = count_valid(t, offsets, m);
      Vec w = zero_vec();
      std::int32_t direct[64];  // offsets of nearly parallel pairs (m <= 64 assumed below)
      i64 direct_count = 0;
      for (i64 o = 0; o < m; ++o) {
        const i64 s = t - offsets[o];
        if (s < 0) {
          norms[row * m + o] = 0.0f;
          continue;
        }
        const Vec v = load_vec<nv>(z + (b * L + s) * r, r);
        const double vv = dot_double<nv>(v, v), uv = dot_double<nv>(u, v);
        const float n = pair_norm(uu, vv, uv, eps);
        norms[row * m + o] = n;
        if (nearly_parallel(uu, vv, uv) && direct_count < 64) {
          direct[direct_count++] = static_cast<std::int32_t>(o);
          continue;
        }
        add_scaled<nv>(w, v, 1.0f / (n * static_cast<float>(valid)));
      }
      // out = upper triangle of u w^T - w u^T, row by row: row i is entries j = i+1..r-1,
      // read from u and w at j with unaligned loads (one vector of zero padding past r).
      alignas(32) float uw[2][8 * nv + 8];
      for (int k = 0; k <= nv; ++k) {
        _mm256_store_ps(uw[0] + 8 * k, k < nv ? u.v[k] : _mm256_setzero_ps());
        _mm256_store_ps(uw[1] + 8 * k, k < nv ? w.v[k] : _mm256_setzero_ps());
      }
      float* dst = out + row * P;
      for (i64 i = 0; i + 1 < r; ++i) {
        const __m256 ui = _mm256_set1_ps(uw[0][i]), wi = _mm256_set1_ps(uw[1][i]);
        for (i64 j = i + 1; j < r; j += 8) {
          const __m256 vals =
              _mm256_fmsub_ps(ui, _mm256_loadu_ps(uw[1] + j), _mm256_mul_ps(wi, _mm256_loadu_ps(uw[0] + j)));
          store_first(dst + (j - i - 1), r - j, vals);
        }
        dst += r - 1 - i;
      }
      for (i64 d = 0; d < direct_count; ++d) {
        const i64 o = direct[d];
        add_pair_direct(z + row * r, z + (b * L + t - offsets[o]) * r, r, norms[row * m + o], double(valid),
                        out + row * P);
      }
    }
  });
}

template <int nv>
void mean_backward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m, float eps,
                   const float* norms, const float* gout, float* gz) {
  constexpr i64 ld = 8 * nv;
  const i64 P = r * (r - 1) / 2;
  parallel_for(0, B * L, 32, [&](i64 row0, i64 row1) {
    // Row s needs G(s) and G(s + offset) for every offset: keep the matrices of the last
    // kSlots rows (by global row index) so each is built about once per thread.
    constexpr i64 kSlots = 32;
    float* cache = t_g_cache.get(static_cast<std::size_t>(kSlots * ld * ld));
    i64 tags[kSlots];
    for (i64& tag : tags) tag = -1;
    auto antisymmetric_of = [&](i64 global_row) -> const float* {
      const i64 slot = global_row % kSlots;
      float* G = cache + slot * ld * ld;
      if (tags[slot] != global_row) {
        build_antisymmetric<nv>(gout + global_row * P, r, G);
        tags[slot] = global_row;
      }
      return G;
    };
    for (i64 row = row0; row < row1; ++row) {
      const i64 b = row / L, s = row % L;
      Vec acc = zero_vec();

      // The gradient of pair (t, t - offsets[o]) for its first (u) or second (v) vector.
      auto pair_term = [&](i64 t, i64 o, bool first_vector, const float* G_t) {
        const i64 partner = t - offsets[o];
        const float* u_ptr = z + (b * L + t) * r;
        const float* v_ptr = z + (b * L + partner) * r;
        const Vec u = load_vec<nv>(u_ptr, r), v = load_vec<nv>(v_ptr, r);
        const float valid = static_cast<float>(count_valid(t, offsets, m));
        const float n = norms[(b * L + t) * m + o];
        if (n > eps && nearly_parallel(dot_double<nv>(u, u), dot_double<nv>(v, v), dot_double<nv>(u, v))) {
          alignas(32) float grad[64];
          pair_gradient_direct(u_ptr, v_ptr, gout + (b * L + t) * P, r, n, valid, eps, first_vector, grad);
          add_scaled<nv>(acc, load_vec<nv>(grad, r), 1.0f);
          return;
        }
        // gu needs G v, gv needs G u.
        const Vec gx = antisym_times<nv>(G_t, first_vector ? v_ptr : u_ptr, r);
        if (!(n > eps)) {
          add_scaled<nv>(acc, gx, (first_vector ? 1.0f : -1.0f) / (valid * eps));
          return;
        }
        // c = u^T G v / (n valid); u^T G v = -v^T G u, so either product gives it.
        double ugv = dot_double<nv>(first_vector ? u : v, gx);  // u . (G v)  or  v . (G u)
        if (!first_vector) ugv = -ugv;
        const float c = static_cast<float>(ugv / (double(n) * valid));
        const float k_over_n = c / n;
        // M v = u (v.v) - v (u.v),  M u = u (u.v) - v (u.u)
        const double uv = dot_double<nv>(u, v);
        const double coeff_u = first_vector ? dot_double<nv>(v, v) : uv;
        const double coeff_v = first_vector ? -uv : -dot_double<nv>(u, u);
        const float sign = first_vector ? 1.0f : -1.0f;
        // term = sign * (gx / valid - k_over_n * (coeff_u u + coeff_v v)) / n
        add_scaled<nv>(acc, gx, sign / (valid * n));
        add_scaled<nv>(acc, u, -sign * k_over_n * static_cast<float>(coeff_u) / n);
        add_scaled<nv>(acc, v, -sign * k_over_n * static_cast<float>(coeff_v) / n);
      };

      // u-side: pairs (s, s - D) for the valid offsets of s.
      if (count_valid(s, offsets, m) > 0) {
        const float* G = antisymmetric_of(row);
        for (i64 o = 0; o < m; ++o) {
          if (s - offsets[o] >= 0) pair_term(s, o, true, G);
        }
      }
      // v-side: pairs (s + D, s) whose partner is s.
      for (i64 o = 0; o < m; ++o) {
        const i64 t = s + offsets[o];
        if (t >= L) continue;
        pair_term(t, o, false, antisymmetric_of(b * L + t));
      }
#pragma GCC unroll 8
      for (int k = 0; k < nv; ++k) store_first(gz + row * r + 8 * k, r - 8 * k, acc.v[k]);
    }
  });
}

}  // namespace

void plucker_mean_forward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m, float eps,
                          float* out, float* norms) {
  switch ((r + 7) / 8) {
    case 1:
      if (r >= 2) return mean_forward<1>(z, B, L, r, offsets, m, eps, out, norms);
      break;
    case 2: return mean_forward<2>(z, B, L, r, offsets, m, eps, out, norms);
    case 3: return mean_forward<3>(z, B, L, r, offsets, m, eps, out, norms);
    case 4: return mean_forward<4>(z, B, L, r, offsets, m, eps, out, norms);
    case 5: return mean_forward<5>(z, B, L, r, offsets, m, eps, out, norms);
    case 6: return mean_forward<6>(z, B, L, r, offsets, m, eps, out, norms);
    case 7: return mean_forward<7>(z, B, L, r, offsets, m, eps, out, norms);
    case 8: return mean_forward<8>(z, B, L, r, offsets, m, eps, out, norms);
    default: break;
  }
  ref_table_f32().plucker_mean_forward(z, B, L, r, offsets, m, eps, out, norms);
}

void plucker_mean_backward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m, float eps,
                           const float* norms, const float* gout, float* gz) {
  switch ((r + 7) / 8) {
    case 1:
      if (r >= 2) return mean_backward<1>(z, B, L, r, offsets, m, eps, norms, gout, gz);
      break;
    case 2: return mean_backward<2>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 3: return mean_backward<3>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 4: return mean_backward<4>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 5: return mean_backward<5>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 6: return mean_backward<6>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 7: return mean_backward<7>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 8: return mean_backward<8>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    default: break;
  }
  ref_table_f32().plucker_mean_backward(z, B, L, r, offsets, m, eps, norms, gout, gz);
}

}  // namespace wedge::kernels::cpu::avx2
