// Scaled dot-product attention, forward and backward, for CPUs with AVX2 but not AVX-512.
// Same math as kernels/ref/attention.cpp; where the AVX-512 kernel (attention_avx512.cpp)
// has register tiles of its own, this one hands every product to the packed GEMM with the
// AVX2 micro-kernel, on one thread, and keeps only the softmax in its own vector loops.
//
// Per head, per block of 64 query rows [i0, i0 + rows), over the keys it may see
// (j < i0 + rows when causal, else all L):
//   forward   S = scale Q K^T (GEMM); per row: max, P = exp(S - max) / sum (masked keys 0),
//             lse = max + log sum; out = P V (GEMM).
//   backward  S again, P = exp(S - lse); dP = gout V^T (GEMM); D_i = gout_i . out_i;
//             dS = P (dP - D); gv += P^T gout, gk += scale dS^T Q (GEMMs into the head's
//             whole gk, gv); gq = scale dS K (GEMM).
// The score tile is rows x L: 256 KB per thread at L = 1024, 2 MB at L = 8192. Threads split
// (head, block) pairs forward and heads backward (gk and gv rows collect every block of
// their head), so every output has one writer and the bits do not depend on the thread count.
//
// Decoding over a cache (attention_decode_forward) is the forward of the n newest query rows,
// at positions L - n .. L - 1. A decoded token is a single row, for which the GEMM would
// spend more packing the keys than multiplying: blocks of fewer than kGemmRows rows form
// S = scale q K^T 8 keys at a time (`row_scores`) and out = P V a key at a time
// (`weighted_rows`) in their own loops.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {
namespace {

constexpr i64 kRows = 64;     // query rows per block
constexpr i64 kGemmRows = 4;  // from this many query rows on, the products are GEMMs
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

thread_local ScratchBuffer t_scores;    // S, then P
thread_local ScratchBuffer t_gradient;  // dP, then dS

// C (m x n, row stride ldc) = alpha op(A) op(B) + beta C on this thread, by the AVX2 GEMM.
void gemm(Trans ta, Trans tb, i64 m, i64 n, i64 k, float alpha, const float* a, i64 lda, const float* b, i64 ldb,
          float beta, float* c, i64 ldc) {
  static const GemmBlocking blocking = default_blocking(sgemm_avx2_microkernel());
  GemmArgs<float> g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  g.a = a;
  g.lda = lda;
  g.b = b;
  g.ldb = ldb;
  g.c = c;
  g.ldc = ldc;
  sgemm_packed(sgemm_avx2_microkernel(), blocking, g, 1);
}

// The keys query row i sees, and the tile's width rounded up to whole vectors.
i64 visible_keys(bool causal, i64 i, i64 L) { return causal ? i + 1 : L; }
i64 padded(i64 n) { return (n + 7) / 8 * 8; }

// Row r of the tile (width `ld`, a multiple of 8): the entries at and past `valid` become
// -inf, so that exp turns them, and the padding, into exact zeros.
void mask_row(float* row, i64 valid, i64 ld) { std::fill(row + valid, row + ld, kNegInf); }

// row = exp(row - shift) over ld entries; returns their sum.
float exp_shifted(float* row, i64 ld, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  for (i64 j = 0; j < ld; j += 8) {
    const __m256 p = exp(_mm256_sub_ps(_mm256_loadu_ps(row + j), s));
    _mm256_storeu_ps(row + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  return hsum(sum);
}

float row_max(const float* row, i64 ld) {
  __m256 m = _mm256_set1_ps(kNegInf);
  for (i64 j = 0; j < ld; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row + j));
  return hmax(m);
}

float dot(const float* x, const float* y, i64 n) {
  __m256 acc = _mm256_setzero_ps();
  i64 d = 0;
  for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d), acc);
  float s = hsum(acc);
  for (; d < n; ++d) s += x[d] * y[d];
  return s;
}

// Lane j of the result = the sum of the 8 lanes of a[j] (horizontal adds, then the halves).
__m256 sum8(const __m256 a[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  // u0, per 128-bit half h: the sums of half h of a[0], ..., a[3]; u1 those of a[4], ..., a[7]
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// s[j] = scale q . k_j for the `keys` key rows at k (row stride dh), 8 keys at a time: one
// accumulator per key over dh, then sum8.
void row_scores(const float* q, const float* k, i64 keys, i64 dh, float scale, float* s) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const i64 body = dh / 8 * 8;
  for (i64 j0 = 0; j0 < keys; j0 += 8) {
    const i64 count = std::min<i64>(8, keys - j0);
    const float* kb = k + j0 * dh;
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
    if (count == 8) {
      for (i64 d = 0; d < body; d += 8) {
        const __m256 x = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(x, _mm256_loadu_ps(kb + j * dh + d), acc[j]);
      }
      if (body < dh) {
        const __m256 x = load_first(q + body, dh - body);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(x, load_first(kb + j * dh + body, dh - body), acc[j]);
      }
    } else {
      for (i64 d = 0; d < dh; d += 8) {
        const __m256 x = load_first(q + d, dh - d);
        for (i64 j = 0; j < count; ++j) acc[j] = _mm256_fmadd_ps(x, load_first(kb + j * dh + d, dh - d), acc[j]);
      }
    }
    store_first(s + j0, count, _mm256_mul_ps(sum8(acc), vscale));
  }
}

// out (dh) = sum over j < keys of p[j] v_j (v's rows dh apart), 32 columns at a time.
void weighted_rows(const float* p, i64 keys, const float* v, i64 dh, float* out) {
  for (i64 d0 = 0; d0 < dh; d0 += 32) {
    const i64 left = dh - d0;
    __m256 acc[4];
    for (int c = 0; c < 4; ++c) acc[c] = _mm256_setzero_ps();
    if (left >= 32) {
      for (i64 j = 0; j < keys; ++j) {
        const __m256 w = _mm256_set1_ps(p[j]);
        const float* row = v + j * dh + d0;
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8 * c), acc[c]);
      }
    } else {
      for (i64 j = 0; j < keys; ++j) {
        const __m256 w = _mm256_set1_ps(p[j]);
        const float* row = v + j * dh + d0;
        for (int c = 0; c < 4; ++c) acc[c] = _mm256_fmadd_ps(w, load_first(row + 8 * c, left - 8 * c), acc[c]);
      }
    }
    for (int c = 0; c < 4; ++c)
      if (left > 8 * c) store_first(out + d0 + 8 * c, left - 8 * c, acc[c]);
  }
}

// Forward of `rows` query rows of one head, the first at position `first` (q, out and lse
// point at its row; lse may be null), over the keys each may see: all L, or with a causal
// mask those at or before its position. The products are GEMMs when `use_gemm`, else the
// row loops above.
void forward_block(const float* q, const float* k, const float* v, i64 L, i64 dh, float scale, bool causal,
                   i64 first, i64 rows, bool use_gemm, float* out, float* lse) {
  const i64 keys = causal ? first + rows : L;
  const i64 ld = padded(keys);
  float* s = t_scores.get(static_cast<std::size_t>(rows * ld));
  if (use_gemm) {
    gemm(Trans::N, Trans::T, rows, keys, dh, scale, q, dh, k, dh, 0.0f, s, ld);
  } else {
    for (i64 r = 0; r < rows; ++r) row_scores(q + r * dh, k, keys, dh, scale, s + r * ld);
  }
  for (i64 r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    mask_row(row, visible_keys(causal, first + r, L), ld);
    const float max = row_max(row, ld);
    const float sum = exp_shifted(row, ld, max);
    if (lse != nullptr) lse[r] = max + std::log(sum);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i64 j = 0; j < ld; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
  }
  if (use_gemm) {
    gemm(Trans::N, Trans::N, rows, dh, keys, 1.0f, s, ld, v, dh, 0.0f, out, dh);
  } else {
    for (i64 r = 0; r < rows; ++r) weighted_rows(s + r * ld, keys, v, dh, out + r * dh);
  }
}

// Backward of one head: gq written, gk and gv accumulated over its blocks (zeroed first).
void backward_head(const float* q, const float* k, const float* v, const float* out, const float* lse,
                   const float* gout, i64 L, i64 dh, float scale, bool causal, float* gq, float* gk, float* gv) {
  std::fill(gk, gk + L * dh, 0.0f);
  std::fill(gv, gv + L * dh, 0.0f);
  for (i64 i0 = 0; i0 < L; i0 += kRows) {
    const i64 rows = std::min(kRows, L - i0);
    const i64 keys = causal ? i0 + rows : L;
    const i64 ld = padded(keys);
    float* p = t_scores.get(static_cast<std::size_t>(rows * ld));
    float* ds = t_gradient.get(static_cast<std::size_t>(rows * ld));
    gemm(Trans::N, Trans::T, rows, keys, dh, scale, q + i0 * dh, dh, k, dh, 0.0f, p, ld);
    gemm(Trans::N, Trans::T, rows, keys, dh, 1.0f, gout + i0 * dh, dh, v, dh, 0.0f, ds, ld);
    for (i64 r = 0; r < rows; ++r) {
      const i64 i = i0 + r;
      float* prow = p + r * ld;
      float* drow = ds + r * ld;
      mask_row(prow, visible_keys(causal, i, L), ld);
      exp_shifted(prow, ld, lse[i]);
      // dS = P (dP - D); the padding's dP is whatever was there, its P is 0.
      const __m256 d = _mm256_set1_ps(dot(gout + i * dh, out + i * dh, dh));
      for (i64 j = 0; j < keys; j += 8) {
        const i64 left = keys - j;
        if (left >= 8) {
          const __m256 pv = _mm256_loadu_ps(prow + j);
          _mm256_storeu_ps(drow + j, _mm256_mul_ps(pv, _mm256_sub_ps(_mm256_loadu_ps(drow + j), d)));
        } else {
          for (i64 t = j; t < keys; ++t) drow[t] = prow[t] * (drow[t] - _mm256_cvtss_f32(d));
        }
      }
    }
    gemm(Trans::T, Trans::N, keys, dh, rows, 1.0f, p, ld, gout + i0 * dh, dh, 1.0f, gv, dh);
    gemm(Trans::T, Trans::N, keys, dh, rows, scale, ds, ld, q + i0 * dh, dh, 1.0f, gk, dh);
    gemm(Trans::N, Trans::N, rows, dh, keys, scale, ds, ld, k, dh, 0.0f, gq + i0 * dh, dh);
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh, float scale,
                       bool causal, float* out, float* lse) {
  const i64 blocks = (L + kRows - 1) / kRows;
  parallel_for(0, BH * blocks, 1, [&](i64 first, i64 last) {
    for (i64 unit = first; unit < last; ++unit) {
      const i64 h = unit / blocks, i0 = unit % blocks * kRows;
      const i64 base = h * L * dh;
      forward_block(q + base + i0 * dh, k + base, v + base, L, dh, scale, causal, i0, std::min(kRows, L - i0), true,
                    out + base + i0 * dh, lse + h * L + i0);
    }
  });
}

void attention_decode_forward(const float* q, const float* k, const float* v, i64 BH, i64 n, i64 L, i64 kv_stride,
                              i64 dh, float scale, float* out) {
  const i64 blocks = (n + kRows - 1) / kRows;
  parallel_for(0, BH * blocks, 1, [&](i64 first, i64 last) {
    for (i64 unit = first; unit < last; ++unit) {
      const i64 h = unit / blocks, i0 = unit % blocks * kRows;
      const i64 rows = std::min(kRows, n - i0);
      forward_block(q + (h * n + i0) * dh, k + h * kv_stride, v + h * kv_stride, L, dh, scale, true, L - n + i0,
                    rows, rows >= kGemmRows, out + (h * n + i0) * dh, nullptr);
    }
  });
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* gout, i64 BH, i64 L, i64 dh, float scale, bool causal, float* gq, float* gk,
                        float* gv) {
  parallel_for(0, BH, 1, [&](i64 first, i64 last) {
    for (i64 h = first; h < last; ++h) {
      const i64 base = h * L * dh;
      backward_head(q + base, k + base, v + base, out + base, lse + h * L, gout + base, L, dh, scale, causal,
                    gq + base, gk + base, gv + base);
    }
  });
}

}  // namespace wedge::kernels::cpu::avx2
