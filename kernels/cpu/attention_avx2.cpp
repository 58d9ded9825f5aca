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

constexpr i64 kRows = 64;  // query rows per block
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
    const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), s));
    _mm256_storeu_ps(row + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  return hsum8(sum);
}

float row_max(const float* row, i64 ld) {
  __m256 m = _mm256_set1_ps(kNegInf);
  for (i64 j = 0; j < ld; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row + j));
  return hmax8(m);
}

float dot(const float* x, const float* y, i64 n) {
  __m256 acc = _mm256_setzero_ps();
  i64 d = 0;
  for (; d + 8 <= n; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d), acc);
  float s = hsum8(acc);
  for (; d < n; ++d) s += x[d] * y[d];
  return s;
}

// Forward of rows [i0, i0 + rows) of one head (q, k, v, out, lse point at the head).
void forward_block(const float* q, const float* k, const float* v, i64 L, i64 dh, float scale, bool causal, i64 i0,
                   i64 rows, float* out, float* lse) {
  const i64 keys = causal ? i0 + rows : L;
  const i64 ld = padded(keys);
  float* s = t_scores.get(static_cast<std::size_t>(rows * ld));
  gemm(Trans::N, Trans::T, rows, keys, dh, scale, q + i0 * dh, dh, k, dh, 0.0f, s, ld);
  for (i64 r = 0; r < rows; ++r) {
    float* row = s + r * ld;
    mask_row(row, visible_keys(causal, i0 + r, L), ld);
    const float max = row_max(row, ld);
    const float sum = exp_shifted(row, ld, max);
    lse[i0 + r] = max + std::log(sum);
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i64 j = 0; j < ld; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
  }
  gemm(Trans::N, Trans::N, rows, dh, keys, 1.0f, s, ld, v, dh, 0.0f, out + i0 * dh, dh);
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
      forward_block(q + base, k + base, v + base, L, dh, scale, causal, i0, std::min(kRows, L - i0), out + base,
                    lse + h * L);
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
