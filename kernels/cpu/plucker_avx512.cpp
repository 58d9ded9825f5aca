// The fused Grassmann mixing step: the mean over valid offsets of normalised Plücker
// vectors, forward and backward, AVX-512, threaded over positions. Same results as
// kernels/ref/plucker.cpp (plucker_mean_forward / plucker_mean_backward).
//
// The idea to understand first: write the Plücker coordinates of (u, v) as the
// antisymmetric matrix  M = u v^T - v u^T  (p_ij = M_ij for i < j). For a fixed position
// the first vector u = z_t is the same for every offset, so the mean is
//   sum_o M_o / (n_o |valid|) = u w^T - w u^T,   w = sum_o v_o / (n_o |valid|),
// one outer-product difference per position instead of m of them, and the per-offset
// vectors (B, L, m, P) are never formed at all. The norms come from Lagrange's identity
//   ||p||^2 = ||u||^2 ||v||^2 - (u . v)^2,
// evaluated in double (exact products of floats, so only the final subtraction rounds).
//
// Backward: with G the antisymmetric matrix of the incoming gradient g (P entries) and
// c = u^T G v / (n |valid|) (the projection y . gy of the reference), the gradient of one
// pair is
//   gu =  (G v / |valid| - (c / n) (u (v.v) - v (u.v))) / n
//   gv = -(G u / |valid| - (c / n) (u (u.v) - v (u.u))) / n        (n > eps)
//   gu = G v / (|valid| eps),  gv = -G u / (|valid| eps)             (n <= eps)
// Each thread owns whole rows of gz: row s collects its u-side terms (pairs (s, s - D))
// and its v-side terms (pairs (s + D, s)) in a fixed order, so no two threads write the
// same row and the result does not depend on the thread count. Ranks up to 64 use these
// kernels; larger ones fall back to the reference.
//
// Nearly parallel pairs (sin^2 of their angle below 1e-4, including identical vectors,
// e.g. a repeated token) are the exception: there p is a small difference of large
// products, and the factored forms above would divide their rounding error by the small
// norm. Such pairs take the reference's route instead (p formed pair by pair in double).
#include <cmath>
#include <cstdlib>
#include <new>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/scratch.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

constexpr int kMaxVectors = 4;  // ranks up to 64

// Per-thread cache of the backward's antisymmetric matrices, kept across calls.
thread_local ScratchBuffer t_g_cache;

// A rank-r vector in up to 4 zmm registers (lanes past r are zero).
struct Vec {
  __m512 v[kMaxVectors];
};

inline Vec load_vec(const float* x, i64 r, int nv) {
  Vec out;
#pragma GCC unroll 4
  for (int k = 0; k < nv; ++k)
    out.v[k] = _mm512_maskz_loadu_ps(first_lanes(r - 16 * k), x + 16 * k);
  return out;
}

// u . v in double (each float product is exact in double).
inline double dot_double(const Vec& a, const Vec& b, int nv) {
  __m512d acc = _mm512_setzero_pd();
#pragma GCC unroll 4
  for (int k = 0; k < nv; ++k) {
    const __m512d alo = _mm512_cvtps_pd(_mm512_castps512_ps256(a.v[k]));
    const __m512d ahi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v[k]), 1)));
    const __m512d blo = _mm512_cvtps_pd(_mm512_castps512_ps256(b.v[k]));
    const __m512d bhi =
        _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(b.v[k]), 1)));
    acc = _mm512_fmadd_pd(alo, blo, acc);
    acc = _mm512_fmadd_pd(ahi, bhi, acc);
  }
  return _mm512_reduce_add_pd(acc);
}

// Lanes j > i (and j < r) of vector k: the upper-triangle part of row i.
inline __mmask16 upper_lanes(int i, int k, i64 r) {
  const __mmask16 in_rank = first_lanes(r - 16 * k);
  const int first = i + 1 - 16 * k;  // first lane index with j > i
  if (first <= 0) return in_rank;
  if (first >= 16) return 0;
  return static_cast<__mmask16>(in_rank & ~((1u << first) - 1u));
}

// Start of row i's pairs in the packed order (0,1),(0,2),...,(1,2),...
inline i64 row_start(i64 i, i64 r) { return i * (r - 1) - i * (i - 1) / 2; }

// max(||u ^ v||, eps) by Lagrange's identity.
inline float pair_norm(double uu, double vv, double uv, float eps) {
  const double squares = uu * vv - uv * uv;
  return static_cast<float>(std::fmax(std::sqrt(std::fmax(squares, 0.0)), double(eps)));
}

// True when u and v are so close to parallel that the factored forms lose precision.
inline bool nearly_parallel(double uu, double vv, double uv) {
  return uu * vv - uv * uv < 1e-4 * uu * vv;
}

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
void pair_gradient_direct(const float* u, const float* v, const float* g, i64 r, double n,
                          double valid, double eps, bool first_vector, float* grad) {
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

// G (rows r, row stride 64 floats) from the packed upper triangle g: row i holds
// g_i,(i+1..r-1) in its upper part and -g_(0..i-1),i below the diagonal.
void build_antisymmetric(const float* g, i64 r, int nv, float* G) {
  alignas(64) float upper[64 * 64];
  const i64 padded = 16 * nv;
  for (i64 i = 0; i < padded; ++i) {
    const float* src = g + (i < r ? row_start(i, r) : 0);
    for (int k = 0; k < nv; ++k) {
      // expandload places consecutive elements of g into the lanes j > i, in order.
      const __mmask16 lanes = i < r ? upper_lanes(static_cast<int>(i), k, r) : 0;
      _mm512_store_ps(upper + i * 64 + 16 * k, _mm512_maskz_expandloadu_ps(lanes, src));
      src += __builtin_popcount(lanes);
    }
  }
  // G = U - U^T, transposing 16 x 16 tiles.
  for (int bi = 0; bi < nv; ++bi) {
    for (int bj = 0; bj < nv; ++bj) {
      __m512 tile[16];
      for (int q = 0; q < 16; ++q) tile[q] = _mm512_load_ps(upper + (16 * bj + q) * 64 + 16 * bi);
      transpose_16x16(tile);  // tile[q] = column 16 bi + q of U restricted to rows 16 bj..
      for (int q = 0; q < 16; ++q) {
        const i64 row = 16 * bi + q;
        _mm512_store_ps(G + row * 64 + 16 * bj,
                        _mm512_sub_ps(_mm512_load_ps(upper + row * 64 + 16 * bj), tile[q]));
      }
    }
  }
}

// G x = -sum_b x_b G[b, :]  (G antisymmetric: column b is minus row b).
inline Vec antisym_times(const float* G, const float* x, i64 r, int nv) {
  Vec acc;
#pragma GCC unroll 4
  for (int k = 0; k < nv; ++k) acc.v[k] = _mm512_setzero_ps();
  for (i64 b = 0; b < r; ++b) {
    const __m512 xb = _mm512_set1_ps(-x[b]);
#pragma GCC unroll 4
    for (int k = 0; k < nv; ++k)
      acc.v[k] = _mm512_fmadd_ps(xb, _mm512_load_ps(G + b * 64 + 16 * k), acc.v[k]);
  }
  return acc;
}

// The gradient reaching the first vector (u-side) or the second (v-side) of the pair
// (u, v) at position t, given G(t) and the stored norm.
struct PairGradient {
  Vec gu, gv;
};

inline void add_scaled(Vec& acc, const Vec& x, float s, int nv) {
  const __m512 vs = _mm512_set1_ps(s);
#pragma GCC unroll 4
  for (int k = 0; k < nv; ++k) acc.v[k] = _mm512_fmadd_ps(vs, x.v[k], acc.v[k]);
}

// The kernels' bodies, with the number of vectors per rank-r vector fixed at compile time
// so every loop over them unrolls and the vectors stay in registers.
template <int nv>
void mean_forward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m,
                  float eps, float* out, float* norms) {
  const i64 P = r * (r - 1) / 2;
  parallel_for(0, B * L, 64, [&](i64 row0, i64 row1) {
    for (i64 row = row0; row < row1; ++row) {
      const i64 b = row / L, t = row % L;
      const Vec u = load_vec(z + row * r, r, nv);
      const double uu = dot_double(u, u, nv);
      const i64 valid = count_valid(t, offsets, m);
      Vec w;
      for (int k = 0; k < nv; ++k) w.v[k] = _mm512_setzero_ps();
      std::int32_t direct[64];  // offsets of nearly parallel pairs (m <= 64 assumed below)
      i64 direct_count = 0;
      for (i64 o = 0; o < m; ++o) {
        const i64 s = t - offsets[o];
        if (s < 0) {
          norms[row * m + o] = 0.0f;
          continue;
        }
        const Vec v = load_vec(z + (b * L + s) * r, r, nv);
        const double vv = dot_double(v, v, nv), uv = dot_double(u, v, nv);
        const float n = pair_norm(uu, vv, uv, eps);
        norms[row * m + o] = n;
        if (nearly_parallel(uu, vv, uv) && direct_count < 64) {
          direct[direct_count++] = static_cast<std::int32_t>(o);
          continue;
        }
        add_scaled(w, v, 1.0f / (n * static_cast<float>(valid)), nv);
      }
      // out = upper triangle of u w^T - w u^T, row by row.
      alignas(64) float uw[2][64];
      for (int k = 0; k < nv; ++k) {
        _mm512_store_ps(uw[0] + 16 * k, u.v[k]);
        _mm512_store_ps(uw[1] + 16 * k, w.v[k]);
      }
      float* dst = out + row * P;
      for (i64 i = 0; i + 1 < r; ++i) {
        const __m512 ui = _mm512_set1_ps(uw[0][i]), wi = _mm512_set1_ps(uw[1][i]);
        for (int k = 0; k < nv; ++k) {
          const __mmask16 lanes = upper_lanes(static_cast<int>(i), k, r);
          if (!lanes) continue;
          const __m512 vals = _mm512_fmsub_ps(ui, w.v[k], _mm512_mul_ps(wi, u.v[k]));
          const int count = __builtin_popcount(lanes);
          _mm512_mask_storeu_ps(dst, first_lanes(count), _mm512_maskz_compress_ps(lanes, vals));
          dst += count;
        }
      }
      for (i64 d = 0; d < direct_count; ++d) {
        const i64 o = direct[d];
        add_pair_direct(z + row * r, z + (b * L + t - offsets[o]) * r, r, norms[row * m + o],
                        double(valid), out + row * P);
      }
    }
  });
}

template <int nv>
void mean_backward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m,
                   float eps, const float* norms, const float* gout, float* gz) {
  const i64 P = r * (r - 1) / 2;
  parallel_for(0, B * L, 32, [&](i64 row0, i64 row1) {
    // Row s needs G(s) and G(s + offset) for every offset: keep the matrices of the last
    // kSlots rows (by global row index) so each is built about once per thread.
    constexpr i64 kSlots = 32;
    float* cache = t_g_cache.get(static_cast<std::size_t>(kSlots * 64 * 64));
    i64 tags[kSlots];
    for (i64& tag : tags) tag = -1;
    auto antisymmetric_of = [&](i64 global_row) -> const float* {
      const i64 slot = global_row % kSlots;
      float* G = cache + slot * 64 * 64;
      if (tags[slot] != global_row) {
        build_antisymmetric(gout + global_row * P, r, nv, G);
        tags[slot] = global_row;
      }
      return G;
    };
    for (i64 row = row0; row < row1; ++row) {
      const i64 b = row / L, s = row % L;
      Vec acc;
      for (int k = 0; k < nv; ++k) acc.v[k] = _mm512_setzero_ps();

      // The gradient of pair (t, t - offsets[o]) for its first (u) or second (v) vector.
      auto pair_term = [&](i64 t, i64 o, bool first_vector, const float* G_t) {
        const i64 partner = t - offsets[o];
        const float* u_ptr = z + (b * L + t) * r;
        const float* v_ptr = z + (b * L + partner) * r;
        const Vec u = load_vec(u_ptr, r, nv), v = load_vec(v_ptr, r, nv);
        const float valid = static_cast<float>(count_valid(t, offsets, m));
        const float n = norms[(b * L + t) * m + o];
        if (n > eps &&
            nearly_parallel(dot_double(u, u, nv), dot_double(v, v, nv), dot_double(u, v, nv))) {
          alignas(64) float grad[64];
          pair_gradient_direct(u_ptr, v_ptr, gout + (b * L + t) * P, r, n, valid, eps, first_vector,
                               grad);
          add_scaled(acc, load_vec(grad, r, nv), 1.0f, nv);
          return;
        }
        // gu needs G v, gv needs G u.
        const Vec gx = antisym_times(G_t, first_vector ? v_ptr : u_ptr, r, nv);
        if (!(n > eps)) {
          add_scaled(acc, gx, (first_vector ? 1.0f : -1.0f) / (valid * eps), nv);
          return;
        }
        // c = u^T G v / (n valid); u^T G v = -v^T G u, so either product gives it.
        double ugv = 0;
        {
          const Vec& other = first_vector ? u : v;  // u . (G v)  or  v . (G u)
          ugv = dot_double(other, gx, nv);
          if (!first_vector) ugv = -ugv;
        }
        const float c = static_cast<float>(ugv / (double(n) * valid));
        const float k_over_n = c / n;
        // M v = u (v.v) - v (u.v),  M u = u (u.v) - v (u.u)
        const double uv = dot_double(u, v, nv);
        const double coeff_u = first_vector ? dot_double(v, v, nv) : uv;
        const double coeff_v = first_vector ? -uv : -dot_double(u, u, nv);
        const float sign = first_vector ? 1.0f : -1.0f;
        // term = sign * (gx / valid - k_over_n * (coeff_u u + coeff_v v)) / n
        add_scaled(acc, gx, sign / (valid * n), nv);
        add_scaled(acc, u, -sign * k_over_n * static_cast<float>(coeff_u) / n, nv);
        add_scaled(acc, v, -sign * k_over_n * static_cast<float>(coeff_v) / n, nv);
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
      for (int k = 0; k < nv; ++k)
        _mm512_mask_storeu_ps(gz + row * r + 16 * k, first_lanes(r - 16 * k), acc.v[k]);
    }
  });
}

}  // namespace

void plucker_mean_forward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m,
                          float eps, float* out, float* norms) {
  switch ((r + 15) / 16) {
    case 1:
      if (r >= 2) return mean_forward<1>(z, B, L, r, offsets, m, eps, out, norms);
      break;
    case 2:
      return mean_forward<2>(z, B, L, r, offsets, m, eps, out, norms);
    case 3:
      return mean_forward<3>(z, B, L, r, offsets, m, eps, out, norms);
    case 4:
      return mean_forward<4>(z, B, L, r, offsets, m, eps, out, norms);
    default:
      break;
  }
  ref_table_f32().plucker_mean_forward(z, B, L, r, offsets, m, eps, out, norms);
}

void plucker_mean_backward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m,
                           float eps, const float* norms, const float* gout, float* gz) {
  switch ((r + 15) / 16) {
    case 1:
      if (r >= 2) return mean_backward<1>(z, B, L, r, offsets, m, eps, norms, gout, gz);
      break;
    case 2:
      return mean_backward<2>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 3:
      return mean_backward<3>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    case 4:
      return mean_backward<4>(z, B, L, r, offsets, m, eps, norms, gout, gz);
    default:
      break;
  }
  ref_table_f32().plucker_mean_backward(z, B, L, r, offsets, m, eps, norms, gout, gz);
}

}  // namespace wedge::kernels::cpu::avx512
