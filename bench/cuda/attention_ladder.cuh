// The causal attention ladder's kernels (forward), per head of q, k, v, out (BH, T, dh):
//   out_i = sum_{j <= i} p_ij v_j,   p_ij = exp(s_ij - m_i) / l_i,   s_ij = scale q_i . k_j
// with m_i the row's largest score and l_i = sum_{j <= i} exp(s_ij - m_i). Each rung is a
// step up from the last:
//
//   1. naive     one thread per query row, everything from global memory: one sweep over
//                the keys for the row max, a second that recomputes every score for the
//                exponentials and the weighted sum of values (the threads of a warp read
//                the same key at the same time, so those loads are broadcasts from cache)
//   2. shared    one block per query row: the scaled query row in shared memory, the row's
//                scores (a row of the T x T matrix) in dynamic shared memory, max and sum
//                by shared-memory trees, then thread c forms out_ic (coalesced reads of v)
//   3. warp      one warp per query row, no shared memory: lane l scores key j0 + l of
//                each chunk of 32 keys, the chunk's max and sum are shuffle butterflies
//                feeding an online softmax, and the 32 probabilities are broadcast by
//                __shfl_sync to the lanes, each of which owns dh / 32 output channels
//   4. fused     flash-style (Dao et al. 2022, the engine's scheme in
//                kernels/cuda/attention.cu): a block of 64 query rows, one per thread, the
//                scaled query and the output accumulator in registers; tiles of 32 keys and
//                values staged in shared memory (coalesced, once per block instead of once
//                per row) and read as broadcasts; an online softmax across tiles. Causal
//                tiles past the block's last query are skipped, and only tiles crossing the
//                diagonal pay for the mask
//
// FLOPs counted: 4 dh per (query, key) pair with key <= query (a multiply-add for the
// score, one for the value), the causal half only; recomputed scores are not credited.
// Head dimensions up to kMaxDh = 64 (the paper models'). Built two ways (see
// bench/cuda/ladder.cuh): the GPU program bench/cuda/attention_ladder.cu, and the emulated
// test tests/kernels/test_cuda_ladders_emulated.cpp, which is how CI checks these kernels.
#pragma once

#include "ladder.cuh"

namespace wedge::WEDGE_LADDER_NS::attention {

using ::wedge::WEDGE_LADDER_NS::kRungs;
using ::wedge::WEDGE_LADDER_NS::Rung;
inline const char* rung_name(Rung r) { return rung_label(r, "4 flash (fused)"); }

constexpr int kMaxDh = 64;
constexpr std::size_t kMaxDynamicShared = 48 * 1024;
// Rung 2 keeps a row of scores in shared memory: T floats.
inline bool supported(Rung r, int T, int dh) {
  return dh >= 1 && dh <= kMaxDh && (r != Rung::shared || std::size_t(T) * sizeof(float) <= kMaxDynamicShared);
}
inline double causal_flops(int BH, int T, int dh) { return 4.0 * dh * BH * (double(T) * (T + 1) / 2); }

// ---- 1. naive ----------------------------------------------------------------------------
constexpr int kNaiveThreads = 128;
__global__ void naive_kernel(const float* q, const float* k, const float* v, int BH, int T, int dh, float scale,
                             float* out) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= (long long)BH * T) return;
  const int i = int(row % T);
  const float* qi = q + row * dh;
  const float* kh = k + (row - i) * dh;  // this head's keys and values
  const float* vh = v + (row - i) * dh;
  float m = -INFINITY;
  for (int j = 0; j <= i; ++j) {
    float s = 0.0f;
    for (int c = 0; c < dh; ++c) s += qi[c] * kh[std::size_t(j) * dh + c];
    m = fmaxf(m, s * scale);
  }
  float acc[kMaxDh];
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) acc[c] = 0.0f;
  float l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    float s = 0.0f;
    for (int c = 0; c < dh; ++c) s += qi[c] * kh[std::size_t(j) * dh + c];
    const float p = expf(s * scale - m);
    l += p;
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) {
      if (c < dh) acc[c] += p * vh[std::size_t(j) * dh + c];
    }
  }
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) {
    if (c < dh) out[row * dh + c] = acc[c] / l;
  }
}

// ---- 2. shared memory: a row of scores, trees ----------------------------------------------
constexpr int kSharedThreads = 64;  // >= kMaxDh: one thread per output channel at the end
__global__ void shared_kernel(const float* q, const float* k, const float* v, int T, int dh, float scale, float* out) {
  __shared__ float q_row[kMaxDh];
  __shared__ float slots[kSharedThreads];
  WEDGE_DYNAMIC_SHARED(float, scores);  // T floats; entries 0..i used
  const long long row = blockIdx.x;
  const int i = int(row % T);
  const float* kh = k + (row - i) * dh;
  const float* vh = v + (row - i) * dh;
  for (int c = threadIdx.x; c < dh; c += blockDim.x) q_row[c] = q[row * dh + c] * scale;
  __syncthreads();  // the query row is complete
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    float s = 0.0f;
    for (int c = 0; c < dh; ++c) s += q_row[c] * kh[std::size_t(j) * dh + c];
    scores[j] = s;
    m = fmaxf(m, s);
  }
  m = tree_max(m, slots);
  float l = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float p = expf(scores[j] - m);  // each thread rereads only the scores it wrote
    scores[j] = p;
    l += p;
  }
  l = tree_sum(l, slots);  // its barriers also publish every thread's p
  for (int c = threadIdx.x; c < dh; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += scores[j] * vh[std::size_t(j) * dh + c];
    out[row * dh + c] = acc / l;
  }
}

// ---- 3. warp shuffles ------------------------------------------------------------------------
constexpr int kWarpsPerBlock = 4;
constexpr int kLaneChannels = kMaxDh / 32;  // output channels per lane: lane, lane + 32
__global__ void warp_kernel(const float* q, const float* k, const float* v, int BH, int T, int dh, float scale,
                            float* out) {
  const long long row = (long long)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= (long long)BH * T) return;  // the whole warp leaves: no shuffle is left half-attended
  const int i = int(row % T);
  const float* kh = k + (row - i) * dh;
  const float* vh = v + (row - i) * dh;
  float qv[kMaxDh];  // every lane holds the whole scaled query (the same loads: broadcasts)
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) qv[c] = c < dh ? q[row * dh + c] * scale : 0.0f;
  float acc[kLaneChannels];
  WEDGE_UNROLL
  for (int a = 0; a < kLaneChannels; ++a) acc[a] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = 0; j0 <= i; j0 += 32) {
    const int j = j0 + lane;
    float s = -INFINITY;  // keys after the query are masked
    if (j <= i) {
      s = 0.0f;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) {
        if (c < dh) s += qv[c] * kh[std::size_t(j) * dh + c];
      }
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= i is in the chunk
    const float correction = expf(m - m_new);   // 0 on the first chunk (m = -inf)
    const float p = expf(s - m_new);            // 0 for masked keys
    l = l * correction + warp_sum(p);
    WEDGE_UNROLL
    for (int a = 0; a < kLaneChannels; ++a) acc[a] *= correction;
    // Key j0 + jj's probability travels from lane jj to all lanes; each lane then reads its
    // channels of that value row (32 consecutive floats across the warp).
    const int keys = min_int(32, i - j0 + 1);  // the same on every lane: the loop stays converged
    for (int jj = 0; jj < keys; ++jj) {
      const float pj = __shfl_sync(kFullMask, p, jj);
      WEDGE_UNROLL
      for (int a = 0; a < kLaneChannels; ++a) {
        const int c = lane + 32 * a;
        if (c < dh) acc[a] += pj * vh[std::size_t(j0 + jj) * dh + c];
      }
    }
    m = m_new;
  }
  WEDGE_UNROLL
  for (int a = 0; a < kLaneChannels; ++a) {
    const int c = lane + 32 * a;
    if (c < dh) out[row * dh + c] = acc[a] / l;
  }
}

// ---- 4. flash: key/value tiles in shared memory, online softmax, causal tiles skipped -------
// The query, the accumulator and a tile's scores in registers: about 230 per thread at
// kMaxDh = 64 on sm_90 (no spills), so few warps share an SM, each with plenty of
// independent multiply-adds. The engine's kernel keeps the query in padded shared memory
// instead.
constexpr int kFlashRows = 64;  // query rows per block, one per thread
constexpr int kFlashKeys = 32;  // keys per shared-memory tile
__global__ void __launch_bounds__(kFlashRows)
    fused_kernel(const float* q, const float* k, const float* v, int T, int dh, float scale, float* out) {
  __shared__ float k_tile[kFlashKeys][kMaxDh];
  __shared__ float v_tile[kFlashKeys][kMaxDh];
  const int q_blocks = ceil_div(T, kFlashRows);
  const long long head = blockIdx.x / q_blocks;
  const int q0 = (blockIdx.x % q_blocks) * kFlashRows;
  const int i = q0 + threadIdx.x;  // this thread's query row (>= T in a tail block: computed, not written)
  const float* qh = q + head * T * dh;
  const float* kh = k + head * T * dh;
  const float* vh = v + head * T * dh;

  float qv[kMaxDh], acc[kMaxDh];
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) {
    qv[c] = (i < T && c < dh) ? qh[std::size_t(i) * dh + c] * scale : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // Keys after the block's last query are masked for every row of it: those tiles are
  // never loaded.
  const int key_end = min_int(T, q0 + kFlashRows);
  for (int k0 = 0; k0 < key_end; k0 += kFlashKeys) {
    __syncthreads();  // everyone is done with the previous tile
    // Zero-filled past T and past dh, so the fixed-size loops below need no bounds checks.
    for (int e = threadIdx.x; e < kFlashKeys * kMaxDh; e += blockDim.x) {
      const int r = e / kMaxDh, c = e % kMaxDh, j = k0 + r;
      const bool in = j < T && c < dh;
      k_tile[r][c] = in ? kh[std::size_t(j) * dh + c] : 0.0f;
      v_tile[r][c] = in ? vh[std::size_t(j) * dh + c] : 0.0f;
    }
    __syncthreads();  // the tile is complete

    // A tile whose last key is at or before the block's first query is unmasked for every
    // row; only a tile crossing the diagonal (which includes any tile reaching past T)
    // needs the mask.
    const bool diagonal = k0 + kFlashKeys - 1 > q0;
    float s[kFlashKeys];
    float tile_max = -INFINITY;
    WEDGE_UNROLL
    for (int jj = 0; jj < kFlashKeys; ++jj) {
      float dot = 0.0f;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) dot += qv[c] * k_tile[jj][c];  // same address for all: broadcast
      const int j = k0 + jj;
      s[jj] = diagonal && (j > i || j >= T) ? -INFINITY : dot;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    const float m_new = fmaxf(m, tile_max);  // finite: key 0 is unmasked for every row
    const float correction = expf(m - m_new);
    l *= correction;
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) acc[c] *= correction;
    WEDGE_UNROLL
    for (int jj = 0; jj < kFlashKeys; ++jj) {
      const float p = expf(s[jj] - m_new);  // 0 for masked keys
      l += p;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) acc[c] += p * v_tile[jj][c];
    }
    m = m_new;
  }
  if (i < T) {
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) {
      if (c < dh) out[(std::size_t(head) * T + i) * dh + c] = acc[c] / l;
    }
  }
}

// ---- the launch (device pointers on a GPU, host pointers in the emulation) -----------------

inline void run(Rung rung, const float* q, const float* k, const float* v, int BH, int T, int dh, float* out) {
  if (BH <= 0 || T <= 0 || !supported(rung, T, dh)) return;
  const float scale = 1.0f / std::sqrt(float(dh));
  const long long rows = (long long)BH * T;
  switch (rung) {
    case Rung::naive:
      LADDER_LAUNCH(dim3(ceil_div(rows, kNaiveThreads)), dim3(kNaiveThreads), 0, naive_kernel)(
          q, k, v, BH, T, dh, scale, out);
      break;
    case Rung::shared:
      LADDER_LAUNCH(dim3(unsigned(rows)), dim3(kSharedThreads), std::size_t(T) * sizeof(float), shared_kernel)(
          q, k, v, T, dh, scale, out);
      break;
    case Rung::warp:
      LADDER_LAUNCH(dim3(ceil_div(rows, kWarpsPerBlock)), dim3(32 * kWarpsPerBlock), 0, warp_kernel)(
          q, k, v, BH, T, dh, scale, out);
      break;
    case Rung::fused:
      LADDER_LAUNCH(dim3(BH * ceil_div(T, kFlashRows)), dim3(kFlashRows), 0, fused_kernel)(q, k, v, T, dh, scale, out);
      break;
  }
}

// The float64 reference: the oracle every rung is checked against.
inline void reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int BH,
                      int T, int dh, std::vector<double>& out) {
  out.assign(std::size_t(BH) * T * dh, 0.0);
  const double scale = 1.0 / std::sqrt(double(dh));
  std::vector<double> s(static_cast<std::size_t>(T));
  for (int h = 0; h < BH; ++h) {
    const std::size_t o = std::size_t(h) * T * dh;
    for (int i = 0; i < T; ++i) {
      double m = -INFINITY, l = 0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int c = 0; c < dh; ++c) dot += double(q[o + std::size_t(i) * dh + c]) * k[o + std::size_t(j) * dh + c];
        s[std::size_t(j)] = dot * scale;
        m = std::max(m, s[std::size_t(j)]);
      }
      for (int j = 0; j <= i; ++j) l += (s[std::size_t(j)] = std::exp(s[std::size_t(j)] - m));
      for (int j = 0; j <= i; ++j) {
        for (int c = 0; c < dh; ++c)
          out[o + std::size_t(i) * dh + c] += s[std::size_t(j)] / l * v[o + std::size_t(j) * dh + c];
      }
    }
  }
}

// float32 against float64, relative to the largest |out|: each output is a convex
// combination of values, each score a dh-term dot product.
constexpr double kTolerance = 2e-5;

}  // namespace wedge::WEDGE_LADDER_NS::attention
