// The attention teaching ladder: causal scaled-dot-product attention, forward and backward,
// from the reference loops to wedge's blocked AVX-512 kernel on every thread, each step
// checked against the float64 reference and timed as GFLOP/s and % of this machine's
// measured fp32 FMA peak. Attention is two matrix products per head with a softmax between
// them, so arithmetic is its ceiling; the question each step answers is how little of it is
// wasted (above the causal diagonal, on scores written out and read back, on scalar code).
//
//   build/bench/attention_ladder [heads] [T] [dh]   (default 128 x 128 x 64: the paper
//                                                    transformer's batch 32 x 4 heads, block
//                                                    128, head dim 256 / 4)
//
// The steps:
//   1. reference     kernels/ref/attention.cpp: every score recomputed from q and k in
//                    double each time it is needed (row max, row sum, then each P_ij v_j).
//   2. float loops,  what an unfused framework does: S = scale Q K^T for all T x T pairs,
//      full T x T    the causal mask written into S (-inf above the diagonal), a row softmax,
//                    then out = P V over all T keys, the masked zeros included. Each product
//                    row by row (i-p-j) over a transposed K, so the inner loops are unit
//                    stride; 16-lane maxima and sums and a float exp the compiler vectorises;
//                    compiled for AVX-512 (AVX2 without it) at -O3. Backward likewise: P
//                    rebuilt from S and lse, dP = gout V^T, dS = P (dP - D), then
//                    gq = scale dS K, gk = scale dS^T Q, gv = P^T gout, all T x T.
//   3. float loops,  the same loops on 64 x 64 tiles of S that never leave the caches (flash
//      tiled         attention): per block of 64 queries, a running row max and sum (the
//                    online softmax) rescale the output accumulator when the max grows, and
//                    key blocks past the diagonal are never touched. Backward: tile by tile,
//                    P and dS rebuilt from the saved lse, tiles above the diagonal skipped.
//   4. avx512        wedge's kernel (kernels/cpu/attention_avx512.cpp) on one thread: the
//                    same tiling, with register-blocked 4-row x 64-column products, keys
//                    packed transposed by 16 x 16 register transposes, a vector exp.
//   5. + threads     the same on all pool threads (forward: heads x query blocks dealt
//                    round-robin; backward: whole heads).
// Flops counted: only the causal half. Per head, query i meets keys 0..i, so each product
// of T x T x dh work does dh T (T + 1) / 2 multiply-adds: forward (Q K^T and P V) counts
// 2 dh T (T + 1) flops, backward (Q K^T again, gout V^T, dS K, dS^T Q, P^T gout) counts
// 5 dh T (T + 1). Exponentials, masks and rescaling are not counted. Steps 1 and 2 do more
// work than they are credited with (step 1 recomputes scores, step 2 computes all T x T).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/tables.h"
#include "ladder.h"

using namespace wedge;
using namespace wedge::kernels;
using namespace wedge::ladder;

namespace {

// ---- steps 2 and 3: plain float loops --------------------------------------------------------

// dst (cols x rows, row stride rows) = src (rows x cols, row stride ld) transposed.
LADDER_INLINE void transpose(const float* src, i64 ld, i64 rows, i64 cols, float* dst) {
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

// c (m x n, row stride ldc) += a (m x k, row stride lda) b (k x n, row stride ldb), row by
// row: the inner loop runs along rows of b and c (the GEMM ladder's loop order).
LADDER_INLINE void matmul_rows(const float* __restrict a, i64 lda, const float* __restrict b, i64 ldb,
                               float* __restrict c, i64 ldc, i64 m, i64 k, i64 n) {
  for (i64 i = 0; i < m; ++i) {
    float* c_row = c + i * ldc;
    for (i64 p = 0; p < k; ++p) {
      const float a_ip = a[i * lda + p];
      const float* b_row = b + p * ldb;
      for (i64 j = 0; j < n; ++j) c_row[j] += a_ip * b_row[j];
    }
  }
}

LADDER_INLINE float dot(const float* x, const float* y, i64 n) {
  float acc[kLanes] = {};
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l] * y[j + l];
  for (; j < n; ++j) acc[0] += x[j] * y[j];
  return lanes_sum(acc, kLanes);
}

// The float steps index raw pointers and call at_most, not std::vector's operator[] or
// std::min: library functions are not inlined into code compiled with LADDER_FLAGS.
LADDER_INLINE i64 at_most(i64 a, i64 b) { return a < b ? a : b; }

// The keys of [j0, j0 + count) that query i sees: all of them, or those j <= i.
LADDER_INLINE i64 visible(i64 i, i64 j0, i64 count, bool causal) {
  if (!causal) return count;
  const i64 v = i - j0 + 1;
  return v < 0 ? 0 : v < count ? v : count;
}

// Backward, one row of a tile of `count` keys of which the first `vis` are visible: s holds
// the raw scores q_i . k_j, dp holds gout_i . v_j. Leaves P_ij = exp(scale s - lse_i) in s
// and scale dS_ij = scale P_ij (dP_ij - D_i) in dp, zero past `vis`.
LADDER_INLINE void probability_gradients(float* s, float* dp, i64 vis, i64 count, float scale, float lse_i,
                                         float d_i) {
  for (i64 c = 0; c < count; ++c) {
    const float p = c < vis ? exp_float(s[c] * scale - lse_i) : 0.0f;
    s[c] = p;
    dp[c] = scale * p * (dp[c] - d_i);
  }
}

// Step 2 forward: the whole T x T score matrix of each head, masked, then softmax, then P V.
LADDER_INLINE void full_forward_body(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh,
                                     float scale, bool causal, float* out, float* lse) {
  std::vector<float> scratch(static_cast<std::size_t>(dh * L + L * L));
  float *kt = scratch.data(), *s = kt + dh * L;
  for (i64 h = 0; h < BH; ++h) {
    const i64 base = h * L * dh;
    transpose(k + base, dh, L, dh, kt);
    for (i64 e = 0; e < L * L; ++e) s[e] = 0.0f;
    matmul_rows(q + base, dh, kt, L, s, L, L, dh, L);
    for (i64 i = 0; i < L; ++i) {
      float* row = s + i * L;
      for (i64 j = 0; j < L; ++j) row[j] = causal && j > i ? -INFINITY : row[j] * scale;  // the mask
      const float m = lanes_max(row, L);
      for (i64 j = 0; j < L; ++j) row[j] = exp_float(row[j] - m);  // exp(-inf) = 0
      const float sum = lanes_sum(row, L), inv = 1.0f / sum;
      for (i64 j = 0; j < L; ++j) row[j] *= inv;
      lse[h * L + i] = m + std::log(sum);
    }
    float* o = out + base;
    for (i64 e = 0; e < L * dh; ++e) o[e] = 0.0f;
    matmul_rows(s, L, v + base, dh, o, dh, L, L, dh);  // all T keys, zeros included
  }
}

// Step 2 backward: P, dP and dS as full T x T matrices.
LADDER_INLINE void full_backward_body(const float* q, const float* k, const float* v, const float* out,
                                      const float* lse, const float* gout, i64 BH, i64 L, i64 dh, float scale,
                                      bool causal, float* gq, float* gk, float* gv) {
  std::vector<float> scratch(static_cast<std::size_t>(2 * dh * L + 3 * L * L));
  float *kt = scratch.data(), *vt = kt + dh * L, *p = vt + dh * L, *ds = p + L * L, *t = ds + L * L;
  for (i64 e = 0; e < BH * L * dh; ++e) gq[e] = gk[e] = gv[e] = 0.0f;
  for (i64 h = 0; h < BH; ++h) {
    const i64 base = h * L * dh;
    transpose(k + base, dh, L, dh, kt);
    transpose(v + base, dh, L, dh, vt);
    for (i64 e = 0; e < L * L; ++e) p[e] = ds[e] = 0.0f;
    matmul_rows(q + base, dh, kt, L, p, L, L, dh, L);      // S
    matmul_rows(gout + base, dh, vt, L, ds, L, L, dh, L);  // dP
    for (i64 i = 0; i < L; ++i) {
      const float d_i = dot(gout + base + i * dh, out + base + i * dh, dh);
      probability_gradients(p + i * L, ds + i * L, visible(i, 0, L, causal), L, scale, lse[h * L + i], d_i);
    }
    matmul_rows(ds, L, k + base, dh, gq + base, dh, L, L, dh);
    transpose(ds, L, L, L, t);
    matmul_rows(t, L, q + base, dh, gk + base, dh, L, L, dh);
    transpose(p, L, L, L, t);
    matmul_rows(t, L, gout + base, dh, gv + base, dh, L, L, dh);
  }
}

constexpr i64 kTile = 64;  // queries and keys per tile: a 16 KB tile of S stays in L1

// Step 3 forward: per block of 64 queries, the key tiles up to the diagonal, an online
// softmax across them.
LADDER_INLINE void tiled_forward_body(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh,
                                      float scale, bool causal, float* out, float* lse) {
  std::vector<float> scratch(static_cast<std::size_t>(2 * dh * kTile + kTile * kTile));
  float *kt = scratch.data(), *o = kt + dh * kTile, *s = o + kTile * dh;
  float row_max[kTile], row_sum[kTile];
  for (i64 h = 0; h < BH; ++h) {
    const i64 base = h * L * dh;
    for (i64 i0 = 0; i0 < L; i0 += kTile) {
      const i64 rows = at_most(kTile, L - i0);
      for (i64 r = 0; r < rows; ++r) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
      }
      for (i64 e = 0; e < rows * dh; ++e) o[e] = 0.0f;
      const i64 key_end = causal ? i0 + rows : L;  // tiles past the diagonal: never visited
      for (i64 j0 = 0; j0 < key_end; j0 += kTile) {
        const i64 count = at_most(kTile, key_end - j0);
        transpose(k + base + j0 * dh, dh, count, dh, kt);
        for (i64 e = 0; e < kTile * kTile; ++e) s[e] = 0.0f;
        matmul_rows(q + base + i0 * dh, dh, kt, count, s, kTile, rows, dh, count);
        for (i64 r = 0; r < rows; ++r) {
          float* row = s + r * kTile;
          const i64 vis = visible(i0 + r, j0, count, causal);
          for (i64 c = 0; c < vis; ++c) row[c] *= scale;
          const float tile_max = lanes_max(row, vis);
          const float m = tile_max > row_max[r] ? tile_max : row_max[r];
          for (i64 c = 0; c < count; ++c) row[c] = c < vis ? exp_float(row[c] - m) : 0.0f;
          // The terms summed so far were relative to the old max: rescale them (exp(-inf) = 0
          // on the first tile).
          const float correction = exp_float(row_max[r] - m);
          row_sum[r] = row_sum[r] * correction + lanes_sum(row, vis);
          row_max[r] = m;
          for (i64 d = 0; d < dh; ++d) o[r * dh + d] *= correction;
        }
        matmul_rows(s, kTile, v + base + j0 * dh, dh, o, dh, rows, count, dh);
      }
      for (i64 r = 0; r < rows; ++r) {
        const float inv = 1.0f / row_sum[r];
        for (i64 d = 0; d < dh; ++d) out[base + (i0 + r) * dh + d] = o[r * dh + d] * inv;
        lse[h * L + i0 + r] = row_max[r] + std::log(row_sum[r]);
      }
    }
  }
}

// Step 3 backward: per tile of (64 keys, 64 queries) at or below the diagonal, P and dS
// rebuilt from lse, then their three products accumulated into gq, gk and gv.
LADDER_INLINE void tiled_backward_body(const float* q, const float* k, const float* v, const float* out,
                                       const float* lse, const float* gout, i64 BH, i64 L, i64 dh, float scale,
                                       bool causal, float* gq, float* gk, float* gv) {
  std::vector<float> scratch(static_cast<std::size_t>(2 * dh * kTile + 3 * kTile * kTile + L));
  float *kt = scratch.data(), *vt = kt + dh * kTile, *p = vt + dh * kTile, *ds = p + kTile * kTile,
        *t = ds + kTile * kTile, *delta = t + kTile * kTile;
  for (i64 e = 0; e < BH * L * dh; ++e) gq[e] = gk[e] = gv[e] = 0.0f;
  for (i64 h = 0; h < BH; ++h) {
    const i64 base = h * L * dh;
    for (i64 i = 0; i < L; ++i) delta[i] = dot(gout + base + i * dh, out + base + i * dh, dh);
    for (i64 j0 = 0; j0 < L; j0 += kTile) {
      const i64 count = at_most(kTile, L - j0);
      transpose(k + base + j0 * dh, dh, count, dh, kt);
      transpose(v + base + j0 * dh, dh, count, dh, vt);
      for (i64 i0 = causal ? j0 : 0; i0 < L; i0 += kTile) {  // query blocks before j0 see none of it
        const i64 rows = at_most(kTile, L - i0);
        for (i64 e = 0; e < kTile * kTile; ++e) p[e] = ds[e] = 0.0f;
        matmul_rows(q + base + i0 * dh, dh, kt, count, p, kTile, rows, dh, count);
        matmul_rows(gout + base + i0 * dh, dh, vt, count, ds, kTile, rows, dh, count);
        for (i64 r = 0; r < rows; ++r) {
          const i64 i = i0 + r;
          probability_gradients(p + r * kTile, ds + r * kTile, visible(i, j0, count, causal), count, scale,
                                lse[h * L + i], delta[i]);
        }
        matmul_rows(ds, kTile, k + base + j0 * dh, dh, gq + base + i0 * dh, dh, rows, count, dh);
        transpose(ds, kTile, rows, count, t);
        matmul_rows(t, rows, q + base + i0 * dh, dh, gk + base + j0 * dh, dh, count, rows, dh);
        transpose(p, kTile, rows, count, t);
        matmul_rows(t, rows, gout + base + i0 * dh, dh, gv + base + j0 * dh, dh, count, rows, dh);
      }
    }
  }
}

#define LADDER_FORWARD_PARAMS                                                                                    \
  (const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh, float scale, bool causal, float* out, \
   float* lse)
#define LADDER_BACKWARD_PARAMS                                                                                     \
  (const float* q, const float* k, const float* v, const float* out, const float* lse, const float* gout, i64 BH, \
   i64 L, i64 dh, float scale, bool causal, float* gq, float* gk, float* gv)
LADDER_FLOAT_LOOPS(full_forward, LADDER_FORWARD_PARAMS, full_forward_body(q, k, v, BH, L, dh, scale, causal, out, lse))
LADDER_FLOAT_LOOPS(tiled_forward, LADDER_FORWARD_PARAMS,
                   tiled_forward_body(q, k, v, BH, L, dh, scale, causal, out, lse))
LADDER_FLOAT_LOOPS(full_backward, LADDER_BACKWARD_PARAMS,
                   full_backward_body(q, k, v, out, lse, gout, BH, L, dh, scale, causal, gq, gk, gv))
LADDER_FLOAT_LOOPS(tiled_backward, LADDER_BACKWARD_PARAMS,
                   tiled_backward_body(q, k, v, out, lse, gout, BH, L, dh, scale, causal, gq, gk, gv))

// float32 against float64, relative to each output's largest magnitude. Forward: sums of up
// to T terms, near 1e-6 in every step. Backward: every gradient is a float sum over up to T
// query or key rows (the reference's too), so it gets the backend harness's 1e-3. A wrong
// mask, a lost rescaling or a skipped tile is off by far more.
constexpr double kForwardTolerance = 1e-4, kBackwardTolerance = 1e-3;

}  // namespace

int main(int argc, char** argv) {
  const i64 BH = argc > 1 ? std::atoll(argv[1]) : 128, L = argc > 2 ? std::atoll(argv[2]) : 128,
            dh = argc > 3 ? std::atoll(argv[3]) : 64;
  if (BH <= 0 || L <= 0 || dh <= 0) {
    std::fprintf(stderr, "usage: attention_ladder [heads > 0] [T > 0] [dh > 0]\n");
    return 1;
  }
  if (!has_float_loops("attention_ladder")) return 1;
  const int threads = num_threads();
  const Ceiling peak = fma_peak();
  std::printf("causal attention, %lld heads x T %lld x dh %lld, fp32.  %s\n", static_cast<long long>(BH),
              static_cast<long long>(L), static_cast<long long>(dh), cpu_backend_name());
  peak.print("fp32 FMA peak", "GFLOP/s");
  std::printf("\n");

  const auto n = static_cast<std::size_t>(BH * L * dh);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> q(n), k(n), v(n), gout(n);
  for (std::vector<float>* t : {&q, &k, &v, &gout})
    for (float& e : *t) e = dist(gen);
  const float scale = 1.0f / std::sqrt(float(dh));

  // The oracle: the reference in float64. The backward steps read its out and lse, so each
  // direction's error is its own.
  std::vector<double> out_ref(n), lse_ref(static_cast<std::size_t>(BH * L)), gq_ref(n), gk_ref(n), gv_ref(n);
  {
    const std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()),
        gd(gout.begin(), gout.end());
    ref_table_f64().attention_forward(qd.data(), kd.data(), vd.data(), BH, L, dh, scale, true, out_ref.data(),
                                      lse_ref.data());
    ref_table_f64().attention_backward(qd.data(), kd.data(), vd.data(), out_ref.data(), lse_ref.data(), gd.data(), BH,
                                       L, dh, scale, true, gq_ref.data(), gk_ref.data(), gv_ref.data());
  }
  const std::vector<float> out_in(out_ref.begin(), out_ref.end()), lse_in(lse_ref.begin(), lse_ref.end());

  using Forward = decltype(KernelTable<float>::attention_forward);
  using Backward = decltype(KernelTable<float>::attention_backward);
  using Step = PairStep<Forward, Backward>;
  std::vector<Step> steps = {
      {"1 reference (double, scalar)", 1, ref_table_f32().attention_forward, ref_table_f32().attention_backward},
      {"2 float loops, full T x T", 1, LADDER_PICK(full_forward), LADDER_PICK(full_backward)},
      {"3 float loops, tiled (flash)", 1, LADDER_PICK(tiled_forward), LADDER_PICK(tiled_backward)},
  };
  if (has_avx512()) {
    const KernelTable<float>& cpu = cpu_table_f32();
    steps.push_back({"4 avx512 kernel", 1, cpu.attention_forward, cpu.attention_backward});
    steps.push_back({"5 + all threads", threads, cpu.attention_forward, cpu.attention_backward});
  } else {
    std::printf("(no AVX-512 on this CPU: steps 4-5 skipped)\n");
  }

  const double causal_macs = double(BH) * double(dh) * double(L) * double(L + 1) / 2;
  std::vector<float> out(n), lse(static_cast<std::size_t>(BH * L)), gq(n), gk(n), gv(n);
  Table table({"fwd", "bwd"}, "GFLOP/s", "peak");
  table.header();
  for (const Step& st : steps) {
    Cell fwd = timed([&] { st.forward(q.data(), k.data(), v.data(), BH, L, dh, scale, true, out.data(), lse.data()); },
                     2 * 2 * causal_macs, peak, st.threads);
    fwd.error = worst(max_error(out, out_ref), max_error(lse, lse_ref));
    fwd.ok = fwd.error.rel < kForwardTolerance;
    Cell bwd = timed(
        [&] {
          st.backward(q.data(), k.data(), v.data(), out_in.data(), lse_in.data(), gout.data(), BH, L, dh, scale, true,
                      gq.data(), gk.data(), gv.data());
        },
        5 * 2 * causal_macs, peak, st.threads);
    bwd.error = worst(max_error(gq, gq_ref), worst(max_error(gk, gk_ref), max_error(gv, gv_ref)));
    bwd.ok = bwd.error.rel < kBackwardTolerance;
    table.row(st.name, st.threads, {fwd, bwd});
  }
  set_num_threads(threads);
  return table.all_ok() ? 0 : 1;
}
