// Scaled dot-product attention, forward and backward, AVX-512, blocked "flash" style:
// the L x L score matrix never exists; 64 x 64 tiles of it are computed, used and
// dropped. Same math as kernels/ref/attention.cpp.
//
// Forward (per head, per block of 64 query rows; threads split heads x query blocks):
//   for each block of 64 keys (only those at or before the queries when causal):
//     S = scale Q K^T (64 x 64 tile)        -- keys packed transposed so the tile is
//                                              built 64 keys (4 vectors) at a time
//     running row max m, row sum l (the online softmax): when m grows, rescale l and the
//     output accumulator by exp(m_old - m_new) before adding this tile's P V.
//   out = O / l,  lse = m + log l.
// Backward (per head; threads split heads, so gq, gk, gv each have one writer):
//   with P = exp(S - lse) rebuilt per tile, dP = gout V^T, D_i = gout_i . out_i,
//   dS = P (dP - D):  gv += P^T gout,  gk += scale dS^T Q,  gq += scale dS K.
// Every product is one of two small kernels: `tile_scores` (rows x packed columns) and
// `accumulate_rows` (acc += W X). Scratch tiles live in per-thread buffers reused across
// calls.
// Decoding over a cache (attention_decode_forward) runs the same forward on the n newest
// query rows, placed at positions L - n .. L - 1. One decoded token is one row: packing 64
// keys transposed costs more than the row's own products with them, so blocks of fewer than
// kPackRows rows form their scores straight from the key rows (`row_scores`).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/scratch.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

constexpr i64 kBlock = 64;  // query rows and keys per tile
constexpr int kTileVectors = kBlock / 16;
constexpr i64 kPackRows = 8;  // from this many query rows on, a key block is packed once for all
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

thread_local ScratchBuffer t_scratch;  // per-thread tiles, kept across calls

// dst[c * dst_stride + r] = src[r * src_stride + c] for r < rows, c < cols, by 16 x 16
// blocks transposed in registers.
void transpose_into(const float* src, i64 src_stride, i64 rows, i64 cols, float* dst,
                    i64 dst_stride) {
  for (i64 r0 = 0; r0 < rows; r0 += 16) {
    const __mmask16 row_lanes = first_lanes(rows - r0);
    for (i64 c0 = 0; c0 < cols; c0 += 16) {
      const __mmask16 col_lanes = first_lanes(cols - c0);
      __m512 block[16];
      for (int i = 0; i < 16; ++i) {
        block[i] = r0 + i < rows
                       ? _mm512_maskz_loadu_ps(col_lanes, src + (r0 + i) * src_stride + c0)
                       : _mm512_setzero_ps();
      }
      transpose_square(block);
      for (i64 q = 0; q < 16 && c0 + q < cols; ++q) {
        _mm512_mask_storeu_ps(dst + (c0 + q) * dst_stride + r0, row_lanes, block[q]);
      }
    }
  }
}

// dst (dh x 64) = rows [0, count) of src (count x dh, row stride dh) transposed; columns
// past `count` are zero.
void pack_transposed(const float* src, i64 count, i64 dh, float* dst) {
  if (count < kBlock) {
    for (i64 d = 0; d < dh; ++d) std::fill(dst + d * kBlock + count, dst + (d + 1) * kBlock, 0.0f);
  }
  transpose_into(src, dh, count, dh, dst, kBlock);
}

// out (rows x 64, row stride 64) = A (rows x dh, row stride lda) times packed (dh x 64).
void tile_scores(const float* a, i64 lda, i64 rows, const float* packed, i64 dh, float* out) {
  i64 r = 0;
  for (; r + 4 <= rows; r += 4) {
    __m512 acc[4][kTileVectors];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < kTileVectors; ++v) acc[i][v] = _mm512_setzero_ps();
    const float* a0 = a + r * lda;
    for (i64 d = 0; d < dh; ++d) {
      const float* brow = packed + d * kBlock;
      const __m512 b0 = _mm512_load_ps(brow), b1 = _mm512_load_ps(brow + 16);
      const __m512 b2 = _mm512_load_ps(brow + 32), b3 = _mm512_load_ps(brow + 48);
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512 x = _mm512_set1_ps(a0[i * lda + d]);
        acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        acc[i][2] = _mm512_fmadd_ps(x, b2, acc[i][2]);
        acc[i][3] = _mm512_fmadd_ps(x, b3, acc[i][3]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < kTileVectors; ++v)
        _mm512_store_ps(out + (r + i) * kBlock + 16 * v, acc[i][v]);
  }
  for (; r < rows; ++r) {
    __m512 acc[kTileVectors];
    for (int v = 0; v < kTileVectors; ++v) acc[v] = _mm512_setzero_ps();
    for (i64 d = 0; d < dh; ++d) {
      const __m512 x = _mm512_set1_ps(a[r * lda + d]);
      for (int v = 0; v < kTileVectors; ++v)
        acc[v] = _mm512_fmadd_ps(x, _mm512_load_ps(packed + d * kBlock + 16 * v), acc[v]);
    }
    for (int v = 0; v < kTileVectors; ++v) _mm512_store_ps(out + r * kBlock + 16 * v, acc[v]);
  }
}

// Lane j of the result = the sum of the 16 lanes of a[j], by a tree of in-lane unpacks and
// 128-bit shuffles (30 shuffles and 15 additions, against a transpose's 64 and 15).
__m512 sum16(const __m512 a[16]) {
  __m512 b[8], c[4];
  // b[i], per 128-bit lane: (x[0] + x[2], y[0] + y[2], x[1] + x[3], y[1] + y[3]) of that lane
  // of x = a[2i], y = a[2i + 1]
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  // c[i], per 128-bit lane: the sums of that lane of a[4i], ..., a[4i + 3]
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // 128-bit lane q of the result: the four lanes of c[q] added
  const __m512 f0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                                  _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
  const __m512 f1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88),
                                  _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(f0, f1, 0x88), _mm512_shuffle_f32x4(f0, f1, 0xDD));
}

// out[j] = q . k_j for the `count` (<= 64) key rows at k (row stride dh), 16 keys at a time:
// one accumulator per key over dh, then sum16. Lanes past `count` are written as zero.
void row_scores(const float* q, const float* k, i64 count, i64 dh, float* out) {
  for (i64 j0 = 0; j0 < count; j0 += 16) {
    const i64 keys = std::min<i64>(16, count - j0);
    const float* kb = k + j0 * dh;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    if (keys == 16) {
      for (i64 d = 0; d < dh; d += 16) {
        const __mmask16 mask = first_lanes(dh - d);
        const __m512 x = _mm512_maskz_loadu_ps(mask, q + d);
#pragma GCC unroll 16
        for (int j = 0; j < 16; ++j)
          acc[j] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, kb + j * dh + d), acc[j]);
      }
    } else {
      for (i64 d = 0; d < dh; d += 16) {
        const __mmask16 mask = first_lanes(dh - d);
        const __m512 x = _mm512_maskz_loadu_ps(mask, q + d);
        for (i64 j = 0; j < keys; ++j)
          acc[j] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(mask, kb + j * dh + d), acc[j]);
      }
    }
    _mm512_store_ps(out + j0, sum16(acc));
  }
  for (i64 j = (count + 15) / 16 * 16; j < kBlock; ++j) out[j] = 0.0f;
}

// acc (rows x dh, row stride dh) += W (rows x inner, row stride ldw) times X (inner x dh,
// row stride dh). dh is walked 64 floats at a time, the last chunk masked.
void accumulate_rows(const float* w, i64 ldw, i64 rows, i64 inner, const float* x, i64 dh,
                     float* acc) {
  for (i64 d0 = 0; d0 < dh; d0 += 64) {
    __mmask16 mask[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) mask[v] = first_lanes(dh - d0 - 16 * v);
    i64 r = 0;
    for (; r + 4 <= rows; r += 4) {
      __m512 sum[4][4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v)
          sum[i][v] = _mm512_maskz_loadu_ps(mask[v], acc + (r + i) * dh + d0 + 16 * v);
      const float* w0 = w + r * ldw;
      for (i64 c = 0; c < inner; ++c) {
        const float* xrow = x + c * dh + d0;
        __m512 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v) xv[v] = _mm512_maskz_loadu_ps(mask[v], xrow + 16 * v);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const __m512 s = _mm512_set1_ps(w0[i * ldw + c]);
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) sum[i][v] = _mm512_fmadd_ps(s, xv[v], sum[i][v]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v)
          _mm512_mask_storeu_ps(acc + (r + i) * dh + d0 + 16 * v, mask[v], sum[i][v]);
    }
    for (; r < rows; ++r) {
      __m512 sum[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v)
        sum[v] = _mm512_maskz_loadu_ps(mask[v], acc + r * dh + d0 + 16 * v);
      for (i64 c = 0; c < inner; ++c) {
        const __m512 s = _mm512_set1_ps(w[r * ldw + c]);
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v)
          sum[v] =
              _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(mask[v], x + c * dh + d0 + 16 * v), sum[v]);
      }
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v)
        _mm512_mask_storeu_ps(acc + r * dh + d0 + 16 * v, mask[v], sum[v]);
    }
  }
}

// The keys of block [j0, j0 + count) visible from query i: all of them, or those j <= i.
__mmask16 visible(i64 i, i64 j0, i64 count, int vector, bool causal) {
  const i64 first = j0 + 16 * vector;
  i64 n = count - 16 * vector;
  if (causal) n = std::min(n, i - first + 1);
  return first_lanes(n);
}

// `rows` query rows of one head, the first at position `first` (q, out and lse point at its
// row; lse may be null), against the head's keys: all L of them, or with a causal mask those
// at or before each row's position. The scores of a key block come from the block packed
// transposed when `pack`, else row by row from the key rows.
void forward_query_block(const float* q, const float* k, const float* v, i64 L, i64 dh, float scale,
                         bool causal, i64 first, i64 rows, bool pack, float* out, float* lse) {
  float* kt = t_scratch.get(
      static_cast<std::size_t>(dh * kBlock + 2 * kBlock * kBlock + kBlock * dh + 2 * kBlock));
  float* s = kt + dh * kBlock;     // scores, then probabilities (rows x 64)
  float* o = s + kBlock * kBlock;  // output accumulator (rows x dh)
  float* row_max = o + kBlock * dh;
  float* row_sum = row_max + kBlock;
  for (i64 r = 0; r < rows; ++r) {
    row_max[r] = kNegInf;
    row_sum[r] = 0.0f;
  }
  std::fill(o, o + rows * dh, 0.0f);
  const __m512 vscale = _mm512_set1_ps(scale);
  const i64 key_end = causal ? first + rows : L;
  for (i64 j0 = 0; j0 < key_end; j0 += kBlock) {
    const i64 count = std::min(kBlock, key_end - j0);
    if (pack) {
      pack_transposed(k + j0 * dh, count, dh, kt);
      tile_scores(q, dh, rows, kt, dh, s);
    } else {
      for (i64 r = 0; r < rows; ++r) row_scores(q + r * dh, k + j0 * dh, count, dh, s + r * kBlock);
    }
    for (i64 r = 0; r < rows; ++r) {
      const i64 i = first + r;
      float* sr = s + r * kBlock;
      __m512 vals[kTileVectors];
      __mmask16 keep[kTileVectors];
      __m512 mx = _mm512_set1_ps(kNegInf);
      for (int w = 0; w < kTileVectors; ++w) {
        keep[w] = visible(i, j0, count, w, causal);
        vals[w] = _mm512_mask_mov_ps(_mm512_set1_ps(kNegInf), keep[w],
                                     _mm512_mul_ps(_mm512_load_ps(sr + 16 * w), vscale));
        mx = _mm512_max_ps(mx, vals[w]);
      }
      const float m_new = std::max(row_max[r], hmax(mx));
      if (m_new == kNegInf) {  // nothing visible yet in this row
        for (int w = 0; w < kTileVectors; ++w) _mm512_store_ps(sr + 16 * w, _mm512_setzero_ps());
        continue;
      }
      const __m512 vm = _mm512_set1_ps(m_new);
      __m512 total = _mm512_setzero_ps();
      for (int w = 0; w < kTileVectors; ++w) {
        const __m512 p = _mm512_maskz_mov_ps(keep[w], exp(_mm512_sub_ps(vals[w], vm)));
        _mm512_store_ps(sr + 16 * w, p);
        total = _mm512_add_ps(total, p);
      }
      const float correction = row_max[r] == kNegInf ? 0.0f : std::exp(row_max[r] - m_new);
      row_sum[r] = row_sum[r] * correction + hsum(total);
      row_max[r] = m_new;
      if (correction != 1.0f) {
        const __m512 vc = _mm512_set1_ps(correction);
        float* orow = o + r * dh;
        for (i64 d = 0; d < dh; d += 16) {
          const __mmask16 mask = first_lanes(dh - d);
          _mm512_mask_storeu_ps(orow + d, mask,
                                _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, orow + d), vc));
        }
      }
    }
    accumulate_rows(s, kBlock, rows, count, v + j0 * dh, dh, o);
  }
  for (i64 r = 0; r < rows; ++r) {
    const float inv = 1.0f / row_sum[r];
    const float* orow = o + r * dh;
    float* dst = out + r * dh;
    for (i64 d = 0; d < dh; ++d) dst[d] = orow[d] * inv;
    if (lse != nullptr) lse[r] = row_max[r] + std::log(row_sum[r]);
  }
}

// A rows x cols tile (row stride 64) transposed into cols x rows (row stride 64).
void transpose_tile(const float* src, i64 rows, i64 cols, float* dst) {
  transpose_into(src, kBlock, rows, cols, dst, kBlock);
}

void backward_head(const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* gout, i64 L, i64 dh, float scale, bool causal,
                   float* gq, float* gk, float* gv) {
  float* kt = t_scratch.get(static_cast<std::size_t>(2 * dh * kBlock + 4 * kBlock * kBlock + L));
  float* vt = kt + dh * kBlock;
  float* p = vt + dh * kBlock;                  // P tile (rows x 64)
  float* ds = p + kBlock * kBlock;              // dP, then scale * dS (rows x 64)
  float* tile_t = ds + kBlock * kBlock;         // a transposed tile (64 x rows)
  float* delta = tile_t + 2 * kBlock * kBlock;  // D_i = gout_i . out_i
  for (i64 i = 0; i < L; ++i) {
    __m512 acc = _mm512_setzero_ps();
    for (i64 d = 0; d < dh; d += 16) {
      const __mmask16 mask = first_lanes(dh - d);
      acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, gout + i * dh + d),
                            _mm512_maskz_loadu_ps(mask, out + i * dh + d), acc);
    }
    delta[i] = hsum(acc);
  }
  std::fill(gq, gq + L * dh, 0.0f);
  std::fill(gk, gk + L * dh, 0.0f);
  std::fill(gv, gv + L * dh, 0.0f);
  const __m512 vscale = _mm512_set1_ps(scale);
  for (i64 j0 = 0; j0 < L; j0 += kBlock) {
    const i64 count = std::min(kBlock, L - j0);
    pack_transposed(k + j0 * dh, count, dh, kt);
    pack_transposed(v + j0 * dh, count, dh, vt);
    // With a causal mask, query blocks entirely before this key block see none of it.
    for (i64 i0 = causal ? (j0 / kBlock) * kBlock : 0; i0 < L; i0 += kBlock) {
      const i64 rows = std::min(kBlock, L - i0);
      tile_scores(q + i0 * dh, dh, rows, kt, dh, p);
      tile_scores(gout + i0 * dh, dh, rows, vt, dh, ds);
      for (i64 r = 0; r < rows; ++r) {
        const i64 i = i0 + r;
        const __m512 row_lse = _mm512_set1_ps(lse[i]);
        const __m512 d_i = _mm512_set1_ps(delta[i]);
        for (int w = 0; w < kTileVectors; ++w) {
          const __mmask16 keep = visible(i, j0, count, w, causal);
          const __m512 sv = _mm512_mul_ps(_mm512_load_ps(p + r * kBlock + 16 * w), vscale);
          const __m512 pv = _mm512_maskz_mov_ps(keep, exp(_mm512_sub_ps(sv, row_lse)));
          const __m512 dpv = _mm512_load_ps(ds + r * kBlock + 16 * w);
          _mm512_store_ps(p + r * kBlock + 16 * w, pv);
          _mm512_store_ps(ds + r * kBlock + 16 * w,
                          _mm512_mul_ps(vscale, _mm512_mul_ps(pv, _mm512_sub_ps(dpv, d_i))));
        }
      }
      // gq_i += (scale dS) K_j
      accumulate_rows(ds, kBlock, rows, count, k + j0 * dh, dh, gq + i0 * dh);
      // gv_j += P^T gout_i,  gk_j += (scale dS)^T Q_i
      transpose_tile(p, rows, count, tile_t);
      accumulate_rows(tile_t, kBlock, count, rows, gout + i0 * dh, dh, gv + j0 * dh);
      transpose_tile(ds, rows, count, tile_t);
      accumulate_rows(tile_t, kBlock, count, rows, q + i0 * dh, dh, gk + j0 * dh);
    }
  }
}

}  // namespace

void attention_forward(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh,
                       float scale, bool causal, float* out, float* lse) {
  const i64 blocks = (L + kBlock - 1) / kBlock;
  // With a causal mask later query blocks cost more. Tiles are numbered head-fastest
  // (t = block * BH + head) and dealt round-robin, so every thread gets the same mix of
  // early and late blocks, whether there are many heads or one long one.
  parallel_team(0, [&](int tid, int team) {
    for (i64 t = tid; t < BH * blocks; t += team) {
      const i64 h = t % BH, i0 = (t / BH) * kBlock;
      const i64 base = h * L * dh;
      forward_query_block(q + base + i0 * dh, k + base, v + base, L, dh, scale, causal, i0,
                          std::min(kBlock, L - i0), true, out + base + i0 * dh, lse + h * L + i0);
    }
  });
}

void attention_decode_forward(const float* q, const float* k, const float* v, i64 BH, i64 n, i64 L,
                              i64 kv_stride, i64 dh, float scale, float* out) {
  const i64 blocks = (n + kBlock - 1) / kBlock;
  // Units of (head, block of query rows), dealt round-robin as in attention_forward: a
  // decoding step (n = 1) is one unit per head. Each row is computed by one thread, in steps
  // that depend on the shape only, so the bits do not depend on the thread count.
  parallel_team(0, [&](int tid, int team) {
    for (i64 t = tid; t < BH * blocks; t += team) {
      const i64 h = t % BH, i0 = (t / BH) * kBlock;
      const i64 rows = std::min(kBlock, n - i0);
      forward_query_block(q + (h * n + i0) * dh, k + h * kv_stride, v + h * kv_stride, L, dh, scale,
                          true, L - n + i0, rows, rows >= kPackRows, out + (h * n + i0) * dh, nullptr);
    }
  });
}

void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* gout, i64 BH, i64 L, i64 dh, float scale,
                        bool causal, float* gq, float* gk, float* gv) {
  parallel_for(0, BH, 1, [&](i64 h0, i64 h1) {
    for (i64 h = h0; h < h1; ++h) {
      const i64 base = h * L * dh;
      backward_head(q + base, k + base, v + base, out + base, lse + h * L, gout + base, L, dh,
                    scale, causal, gq + base, gk + base, gv + base);
    }
  });
}

}  // namespace wedge::kernels::cpu::avx512
