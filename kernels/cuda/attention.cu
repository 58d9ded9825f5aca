// Fused scaled dot-product attention (the flash-attention scheme, Dao et al. 2022), in
// FP32, forward and backward, never writing the L x L score matrix.
//
// Layout: q, k, v, out are (BH, L, dh). A block is one warp; thread t owns one row (a
// query row in the forward and dQ kernels, a key row in the dK/dV kernel), staged in
// shared memory with one float of padding so the 32 threads reading their own rows hit
// 32 different banks. The other side is streamed through shared memory in tiles of kTile
// rows that all threads read at the same address (a broadcast). launch.h AttentionTiles
// holds the sizes; head dimensions up to 128 are instantiated (16, 32, 64, 128).
//
// Forward, per query row i, over key tiles (online softmax):
//   s_j = scale q_i.k_j (-inf where masked),  m' = max(m, max_j s_j),
//   l = l e^(m - m') + sum_j e^(s_j - m'),     acc = acc e^(m - m') + sum_j e^(s_j - m') v_j
//   out_i = acc / l,  lse_i = m + log l.
// Causal blocks stop at the tile holding their last query row: later keys are masked for
// every row of the block.
//
// Backward recomputes P_ij = exp(s_ij - lse_i) from the saved lse instead of storing P:
//   D_i = gout_i . out_i,   dS_ij = P_ij (gout_i . v_j - D_i)
//   gq_i = scale sum_j dS_ij k_j                   (kernel 1: one thread per query row)
//   gk_j = scale sum_i dS_ij q_i,  gv_j = sum_i P_ij gout_i   (kernel 2: one per key row)
// Each gradient row is owned by one thread that adds its terms in increasing index, so
// there are no atomics and the results are deterministic.
//
// Decoding over a cache (attention_decode_forward): one block of kDecodeThreads threads per
// query row, since a decoding step has a single row per head and the 32-row tiles above would
// leave 31 threads idle. Over chunks of kDecodeChunk keys (online softmax as above):
//   scores   warp w takes keys w, w + 4, ...; its lanes split q . k_j over dh (consecutive
//            lanes, consecutive addresses) and warp_sum adds them;
//   softmax  the chunk's max (block_max_sum) and sum of p_j = e^(s_j - m') (block_sum);
//   P V      thread t owns output columns t, t + kDecodeThreads, ... and adds p_j v_j in
//            increasing j, reading v's rows coalesced.
// Every sum is formed in an order fixed by the shape: deterministic, no atomics.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace attention_impl {

// Copies `count` rows of width dh starting at row `first` of a (L, dh) head into a
// shared [count][kWidth] array (kWidth >= dh), zero-filling columns >= dh and rows >= L so
// the fixed-width loops below need no bounds checks. Row-major and consecutive threads
// read consecutive addresses when dh == kWidth.
template <int kWidth>
__device__ __forceinline__ void stage_rows(const float* head, i64 first, int count, i64 L, int dh,
                                           float* shared, int shared_stride) {
  for (int e = threadIdx.x; e < count * kWidth; e += blockDim.x) {
    const int row = e / kWidth, col = e % kWidth;
    const i64 at = first + row;
    shared[row * shared_stride + col] = (col < dh && at < L) ? head[at * dh + col] : 0.0f;
  }
}

template <int kMaxDh>
__global__ void __launch_bounds__(32)
    attention_forward_kernel(const float* q, const float* k, const float* v, i64 L, int dh, float scale,
                             bool causal, float* out, float* lse) {
  using Tiles = launch::AttentionTiles<kMaxDh>;
  constexpr int kRows = Tiles::kRows, kTile = Tiles::kTile, kPad = Tiles::kPad;
  __shared__ float q_rows[kRows][kPad];
  __shared__ float k_tile[kTile][kMaxDh];
  __shared__ float v_tile[kTile][kMaxDh];

  const i64 q_tiles = launch::ceil_div(L, kRows);
  const i64 bh = blockIdx.x / q_tiles, q0 = (blockIdx.x % q_tiles) * kRows;
  const i64 head = bh * L * dh;
  const unsigned me = threadIdx.x;
  const i64 i = q0 + me;  // this thread's query row (>= L in a tail block: computed, not written)
  stage_rows<kMaxDh>(q + head, q0, kRows, L, dh, &q_rows[0][0], kPad);

  float acc[kMaxDh];
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const i64 key_end = causal ? min_i64(L, q0 + kRows) : L;
  for (i64 k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // everyone is done with the previous tile (and q_rows is staged)
    stage_rows<kMaxDh>(k + head, k0, kTile, L, dh, &k_tile[0][0], kMaxDh);
    stage_rows<kMaxDh>(v + head, k0, kTile, L, dh, &v_tile[0][0], kMaxDh);
    __syncthreads();  // the tile is complete

    float s[kTile];
    float tile_max = -INFINITY;
    WEDGE_UNROLL
    for (int jj = 0; jj < kTile; ++jj) {
      const i64 j = k0 + jj;
      float dot = 0.0f;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) dot += q_rows[me][c] * k_tile[jj][c];
      const bool valid = i < L && j < L && (!causal || j <= i);
      s[jj] = valid ? dot * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // nothing unmasked yet for this row
    const float correction = expf(m - m_new);  // 0 when m was -inf
    l *= correction;
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) acc[c] *= correction;
    WEDGE_UNROLL
    for (int jj = 0; jj < kTile; ++jj) {
      const float p = expf(s[jj] - m_new);  // 0 for masked keys
      l += p;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) acc[c] += p * v_tile[jj][c];
    }
    m = m_new;
  }
  if (i < L) {
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) {
      if (c < dh) out[head + i * dh + c] = acc[c] / l;
    }
    lse[bh * L + i] = m + logf(l);
  }
}

// D_i = gout_i . out_i for every row, one warp per row.
__global__ void attention_row_dot_kernel(const float* gout, const float* out, i64 rows, int dh, float* D) {
  const i64 row = static_cast<i64>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together: no shuffle is left half-attended
  float local = 0.0f;
  for (int c = threadIdx.x % 32; c < dh; c += 32) local += gout[row * dh + c] * out[row * dh + c];
  local = warp_sum(local);
  if (threadIdx.x % 32 == 0) D[row] = local;
}

template <int kMaxDh>
__global__ void __launch_bounds__(32)
    attention_grad_query_kernel(const float* q, const float* k, const float* v, const float* gout,
                                const float* lse, const float* D, i64 L, int dh, float scale, bool causal,
                                float* gq) {
  using Tiles = launch::AttentionTiles<kMaxDh>;
  constexpr int kRows = Tiles::kRows, kTile = Tiles::kTile, kPad = Tiles::kPad;
  __shared__ float q_rows[kRows][kPad];
  __shared__ float go_rows[kRows][kPad];
  __shared__ float k_tile[kTile][kMaxDh];
  __shared__ float v_tile[kTile][kMaxDh];

  const i64 q_tiles = launch::ceil_div(L, kRows);
  const i64 bh = blockIdx.x / q_tiles, q0 = (blockIdx.x % q_tiles) * kRows;
  const i64 head = bh * L * dh;
  const unsigned me = threadIdx.x;
  const i64 i = q0 + me;
  stage_rows<kMaxDh>(q + head, q0, kRows, L, dh, &q_rows[0][0], kPad);
  stage_rows<kMaxDh>(gout + head, q0, kRows, L, dh, &go_rows[0][0], kPad);
  const float lse_i = i < L ? lse[bh * L + i] : 0.0f;
  const float D_i = i < L ? D[bh * L + i] : 0.0f;

  float dq[kMaxDh];
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) dq[c] = 0.0f;
  const i64 key_end = causal ? min_i64(L, q0 + kRows) : L;
  for (i64 k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();
    stage_rows<kMaxDh>(k + head, k0, kTile, L, dh, &k_tile[0][0], kMaxDh);
    stage_rows<kMaxDh>(v + head, k0, kTile, L, dh, &v_tile[0][0], kMaxDh);
    __syncthreads();
    for (int jj = 0; jj < kTile; ++jj) {
      const i64 j = k0 + jj;
      if (!(i < L && j < L && (!causal || j <= i))) continue;
      float s = 0.0f, dp = 0.0f;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) {
        s += q_rows[me][c] * k_tile[jj][c];
        dp += go_rows[me][c] * v_tile[jj][c];
      }
      const float p = expf(s * scale - lse_i);
      const float ds = p * (dp - D_i);
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) dq[c] += ds * k_tile[jj][c];
    }
  }
  if (i < L) {
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) {
      if (c < dh) gq[head + i * dh + c] = scale * dq[c];
    }
  }
}

template <int kMaxDh>
__global__ void __launch_bounds__(32)
    attention_grad_key_value_kernel(const float* q, const float* k, const float* v, const float* gout,
                                    const float* lse, const float* D, i64 L, int dh, float scale,
                                    bool causal, float* gk, float* gv) {
  using Tiles = launch::AttentionTiles<kMaxDh>;
  constexpr int kRows = Tiles::kRows, kTile = Tiles::kTile, kPad = Tiles::kPad;
  __shared__ float k_rows[kRows][kPad];
  __shared__ float v_rows[kRows][kPad];
  __shared__ float q_tile[kTile][kMaxDh];
  __shared__ float go_tile[kTile][kMaxDh];
  __shared__ float lse_tile[kTile];
  __shared__ float D_tile[kTile];

  const i64 k_tiles = launch::ceil_div(L, kRows);
  const i64 bh = blockIdx.x / k_tiles, k0 = (blockIdx.x % k_tiles) * kRows;
  const i64 head = bh * L * dh;
  const unsigned me = threadIdx.x;
  const i64 j = k0 + me;  // this thread's key row
  stage_rows<kMaxDh>(k + head, k0, kRows, L, dh, &k_rows[0][0], kPad);
  stage_rows<kMaxDh>(v + head, k0, kRows, L, dh, &v_rows[0][0], kPad);

  float dk[kMaxDh], dv[kMaxDh];
  WEDGE_UNROLL
  for (int c = 0; c < kMaxDh; ++c) dk[c] = dv[c] = 0.0f;
  // Causal: queries before this block's first key see none of its keys.
  for (i64 i0 = causal ? k0 : 0; i0 < L; i0 += kTile) {
    __syncthreads();
    stage_rows<kMaxDh>(q + head, i0, kTile, L, dh, &q_tile[0][0], kMaxDh);
    stage_rows<kMaxDh>(gout + head, i0, kTile, L, dh, &go_tile[0][0], kMaxDh);
    for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
      const bool in = i0 + r < L;
      lse_tile[r] = in ? lse[bh * L + i0 + r] : 0.0f;
      D_tile[r] = in ? D[bh * L + i0 + r] : 0.0f;
    }
    __syncthreads();
    for (int ii = 0; ii < kTile; ++ii) {
      const i64 i = i0 + ii;
      if (!(j < L && i < L && (!causal || j <= i))) continue;
      float s = 0.0f, dp = 0.0f;
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) {
        s += q_tile[ii][c] * k_rows[me][c];
        dp += go_tile[ii][c] * v_rows[me][c];
      }
      const float p = expf(s * scale - lse_tile[ii]);
      const float ds = p * (dp - D_tile[ii]);
      WEDGE_UNROLL
      for (int c = 0; c < kMaxDh; ++c) {
        dv[c] += p * go_tile[ii][c];
        dk[c] += ds * q_tile[ii][c];
      }
    }
  }
  if (j < L) {
    WEDGE_UNROLL
    for (int c = 0; c < kMaxDh; ++c) {
      if (c < dh) {
        gk[head + j * dh + c] = scale * dk[c];
        gv[head + j * dh + c] = dv[c];
      }
    }
  }
}

template <int kMaxDh>
void launch_forward(const float* q, const float* k, const float* v, i64 BH, i64 L, int dh, float scale,
                    bool causal, float* out, float* lse) {
  WEDGE_LAUNCH(grid_1d(launch::attention_blocks(BH, L)), 32, 0, attention_forward_kernel<kMaxDh>)(
      q, k, v, L, dh, scale, causal, out, lse);
  check_launch("attention_forward_kernel");
}

template <int kMaxDh>
void launch_backward(const float* q, const float* k, const float* v, const float* gout, const float* lse,
                     const float* D, i64 BH, i64 L, int dh, float scale, bool causal, float* gq, float* gk,
                     float* gv) {
  const dim3 grid = grid_1d(launch::attention_blocks(BH, L));
  WEDGE_LAUNCH(grid, 32, 0, attention_grad_query_kernel<kMaxDh>)(q, k, v, gout, lse, D, L, dh, scale, causal, gq);
  check_launch("attention_grad_query_kernel");
  WEDGE_LAUNCH(grid, 32, 0, attention_grad_key_value_kernel<kMaxDh>)(q, k, v, gout, lse, D, L, dh, scale, causal,
                                                                      gk, gv);
  check_launch("attention_grad_key_value_kernel");
}

constexpr int kDecodeThreads = 128;
constexpr int kDecodeChunk = kDecodeThreads;  // keys per chunk: one per thread in the softmax step

// Block b is query row i = b % n of head b / n. Dynamic shared memory: q's row and the output
// accumulator (dh floats each).
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(const float* q, const float* k, const float* v, i64 n, i64 L, i64 kv_stride, int dh,
                            float scale, float* out) {
  __shared__ float w[kDecodeChunk];  // the chunk's scores, then its p_j
  WEDGE_DYNAMIC_SHARED(float, rows);
  float* q_row = rows;
  float* acc = rows + dh;
  const i64 row = blockIdx.x;
  const i64 bh = row / n, i = row % n;
  const float* kh = k + bh * kv_stride;
  const float* vh = v + bh * kv_stride;
  const int me = threadIdx.x, lane = me % 32, warp = me / 32, warps = blockDim.x / 32;
  for (int c = me; c < dh; c += blockDim.x) {
    q_row[c] = q[row * dh + c];
    acc[c] = 0.0f;
  }
  const i64 visible = L - n + i + 1;  // keys 0 .. L - n + i
  float m = -INFINITY, l = 0.0f;
  for (i64 j0 = 0; j0 < visible; j0 += kDecodeChunk) {
    const int count = static_cast<int>(min_i64(kDecodeChunk, visible - j0));
    __syncthreads();  // q_row is staged; everyone is done with the previous chunk's p_j
    for (int jj = warp; jj < count; jj += warps) {
      const float* key = kh + (j0 + jj) * dh;
      float dot = 0.0f;
      for (int c = lane; c < dh; c += 32) dot += q_row[c] * key[c];
      dot = warp_sum(dot);
      if (lane == 0) w[jj] = dot * scale;
    }
    __syncthreads();  // the chunk's scores are complete
    const float s = me < count ? w[me] : -INFINITY;
    const float m_new = fmaxf(m, block_max_sum(MaxSum{s, me < count ? 1.0f : 0.0f}).max);
    const float p = expf(s - m_new);  // 0 past count
    if (me < count) w[me] = p;        // only this thread reads or writes w[me] here
    const float correction = expf(m - m_new);  // 0 on the first chunk (m = -inf)
    l = l * correction + block_sum(p);         // block_sum's barriers also publish w
    m = m_new;
    for (int c = me; c < dh; c += blockDim.x) {
      const float* column = vh + j0 * dh + c;
      float a = acc[c] * correction;
      for (int jj = 0; jj < count; ++jj) a += w[jj] * column[jj * dh];
      acc[c] = a;
    }
  }
  for (int c = me; c < dh; c += blockDim.x) out[row * dh + c] = acc[c] / l;
}

int head_dim_class_or_throw(i64 dh, const char* entry) {
  const int c = launch::attention_head_dim_class(dh);
  if (c == 0) {
    throw std::runtime_error(std::string("cuda ") + entry + ": head dimension " + std::to_string(dh) +
                             " is not supported (1.." + std::to_string(launch::kAttentionMaxHeadDim) + ")");
  }
  return c;
}

}  // namespace attention_impl

using namespace attention_impl;

void attention_forward(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh, float scale,
                       bool causal, float* out, float* lse) {
  if (BH <= 0 || L <= 0) return;
  const int d = static_cast<int>(dh);
  switch (head_dim_class_or_throw(dh, "attention_forward")) {
    case 16: return launch_forward<16>(q, k, v, BH, L, d, scale, causal, out, lse);
    case 32: return launch_forward<32>(q, k, v, BH, L, d, scale, causal, out, lse);
    case 64: return launch_forward<64>(q, k, v, BH, L, d, scale, causal, out, lse);
    default: return launch_forward<128>(q, k, v, BH, L, d, scale, causal, out, lse);
  }
}

void attention_decode_forward(const float* q, const float* k, const float* v, i64 BH, i64 n, i64 L, i64 kv_stride,
                              i64 dh, float scale, float* out) {
  if (BH <= 0 || n <= 0 || dh <= 0) return;
  const std::size_t shared = sizeof(float) * static_cast<std::size_t>(2 * dh);
  if (shared + sizeof(float) * kDecodeChunk > launch::kMaxDefaultShared) {
    throw std::runtime_error("cuda attention_decode_forward: head dimension " + std::to_string(dh) +
                             " does not fit in shared memory");
  }
  WEDGE_LAUNCH(grid_1d(BH * n), kDecodeThreads, shared, attention_decode_kernel)(
      q, k, v, n, L, kv_stride, static_cast<int>(dh), scale, out);
  check_launch("attention_decode_kernel");
}

void attention_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* gout, i64 BH, i64 L, i64 dh, float scale, bool causal, float* gq,
                        float* gk, float* gv) {
  if (BH <= 0 || L <= 0) return;
  const int d = static_cast<int>(dh);
  const int dh_class = head_dim_class_or_throw(dh, "attention_backward");
  const i64 rows = BH * L;
  Scratch<float> D(rows);
  constexpr int kWarpsPerBlock = 8;
  WEDGE_LAUNCH(grid_1d(launch::ceil_div(rows, kWarpsPerBlock)), 32 * kWarpsPerBlock, 0, attention_row_dot_kernel)(
      gout, out, rows, d, D.get());
  check_launch("attention_row_dot_kernel");
  switch (dh_class) {
    case 16: return launch_backward<16>(q, k, v, gout, lse, D.get(), BH, L, d, scale, causal, gq, gk, gv);
    case 32: return launch_backward<32>(q, k, v, gout, lse, D.get(), BH, L, d, scale, causal, gq, gk, gv);
    case 64: return launch_backward<64>(q, k, v, gout, lse, D.get(), BH, L, d, scale, causal, gq, gk, gv);
    default: return launch_backward<128>(q, k, v, gout, lse, D.get(), BH, L, d, scale, causal, gq, gk, gv);
  }
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
