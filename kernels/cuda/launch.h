// Launch-shape arithmetic of the CUDA kernels: grid and block sizes, tile sizes, how a
// reduction is split, how an N-d layout is simplified, how a row-major GEMM maps onto
// column-major cuBLAS, and how Plücker pair indices are numbered. Everything here is
// small inline host (and device) code that compiles as plain C++, so it is unit tested
// on machines without a GPU (tests/kernels/test_cuda_launch.cpp).
//
// Determinism rule: every choice below depends on the problem shape only, never on the
// GPU model or its SM count, so the same shape always gets the same summation order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/tables.h"

#if defined(__CUDACC__)
#define WEDGE_CUDA_HD __host__ __device__ __forceinline__
#else
#define WEDGE_CUDA_HD inline
#endif

namespace wedge::kernels::cuda_launch {

WEDGE_CUDA_HD constexpr i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }
WEDGE_CUDA_HD constexpr i64 round_up(i64 a, i64 b) { return ceil_div(a, b) * b; }

// ---- element-wise maps: grid-stride loops ---------------------------------------------
constexpr int kElementwiseThreads = 256;
// Enough blocks to fill any current GPU several times over; beyond that each thread
// loops (grid-stride), which costs nothing and keeps the grid within limits.
constexpr i64 kMaxElementwiseBlocks = 8192;
inline i64 elementwise_blocks(i64 n) {
  return std::clamp<i64>(ceil_div(n, kElementwiseThreads), 1, kMaxElementwiseBlocks);
}

// ---- one block per row (softmax, layer norm, cross-entropy) ---------------------------
// A power of two in [32, 1024] giving each thread about 8 elements of the row: a row of
// 256 (the model width) gets one warp, a 30,522-wide vocabulary row gets 1024 threads.
inline int row_threads(i64 n) {
  i64 t = 32;
  while (t < 1024 && t * 8 < n) t *= 2;
  return static_cast<int>(t);
}

// ---- deterministic two-stage reductions -------------------------------------------------
// A reduction with few outputs but a long axis (a bias gradient: 256 columns over 4096
// rows; a gradient norm: one output over millions) would leave most of the GPU idle with
// one block per output. So the axis is cut into `splits` chunks of `chunk` elements; stage
// one writes one partial result per chunk, stage two reduces the partials in a second
// launch. The split depends on the shape only, so the order of additions is fixed.
struct SplitPlan {
  i64 splits = 1;
  i64 chunk = 0;  // elements of the reduced axis per split; the last split may be shorter
};
constexpr i64 kReduceTargetBlocks = 1024;
constexpr i64 kReduceMaxSplits = 1024;
constexpr i64 kRowReduceMinChunk = 4096;  // elements per block, reducing a contiguous row
constexpr i64 kColumnReduceMinChunk = 64;  // rows per block, reducing down columns
inline SplitPlan plan_splits(i64 n, i64 blocks_without_split, i64 min_chunk) {
  SplitPlan plan{1, n};
  if (n <= min_chunk || blocks_without_split >= kReduceTargetBlocks) return plan;
  const i64 wanted = ceil_div(kReduceTargetBlocks, std::max<i64>(blocks_without_split, 1));
  const i64 splits = std::min({wanted, ceil_div(n, min_chunk), kReduceMaxSplits});
  plan.chunk = ceil_div(n, splits);
  plan.splits = ceil_div(n, plan.chunk);  // no empty split at the end
  return plan;
}
// The column kernel's block: 32 columns (coalesced) x 8 row phases.
constexpr int kColumnTileX = 32;
constexpr int kColumnTileY = 8;

// ---- N-d layouts -------------------------------------------------------------------------
// The kernels take layouts through kernels::coalesce (engine/kernel_table.h): size-1
// dimensions dropped, neighbouring ones that both operands walk contiguously merged, so
// the kernel spends one division per remaining dimension.
inline i64 layout_size(int ndim, const i64* shape) {
  i64 size = 1;
  for (int d = 0; d < ndim; ++d) size *= shape[d];
  return size;
}
// True when every element index and every offset reached fits in int32, so the kernel
// may decompose indices with 32-bit division (several times cheaper than 64-bit on a GPU).
inline bool fits_int32(int ndim, const i64* shape, const i64* stride0, const i64* stride1) {
  constexpr i64 kLimit = std::numeric_limits<std::int32_t>::max();
  i64 reach0 = 0, reach1 = 0;
  for (int d = 0; d < ndim; ++d) {
    reach0 += (shape[d] - 1) * (stride0[d] < 0 ? -stride0[d] : stride0[d]);
    reach1 += (shape[d] - 1) * (stride1[d] < 0 ? -stride1[d] : stride1[d]);
  }
  return layout_size(ndim, shape) <= kLimit && reach0 <= kLimit && reach1 <= kLimit;
}

// ---- row-major GEMM on column-major cuBLAS ------------------------------------------------
// A row-major m x n matrix with leading dimension ld is, read column-major, its n x m
// transpose. So C = op(A) op(B) in row-major is C^T = op(B)^T op(A)^T in column-major:
// swap the operands (B first) and the sizes m <-> n, keep each operand's transpose flag.
// No data moves. This struct is what cublasSgemmStridedBatched / cublasLtMatmul receive.
//
// The epilogue's bias has one value per row-major column j of C, i.e. per ROW of the
// column-major C^T (length cm.m = g.n): exactly what cuBLASLt's CUBLASLT_EPILOGUE_BIAS
// broadcasts ("bias vector length must match matrix D rows", added to every column, and
// with CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE left at 0, to every matrix of the batch).
// D is where cuBLASLt writes alpha op(A) op(B) + beta C (+ bias): C itself, or another
// buffer laid out like C (the GEMM's aux output, when a GELU follows).
struct ColumnMajorGemm {
  bool trans_a = false, trans_b = false;  // op(X) = X^T when set
  i64 m = 0, n = 0, k = 0;                // op(A) m x k, op(B) k x n, C m x n (column-major)
  float alpha = 1, beta = 0;
  const float* a = nullptr; i64 lda = 0; i64 stride_a = 0;
  const float* b = nullptr; i64 ldb = 0; i64 stride_b = 0;
  float* c = nullptr;       i64 ldc = 0; i64 stride_c = 0;
  i64 batch = 1;
  const float* bias = nullptr;  // m values (one per column-major row), or none
  float* d = nullptr;           // the output, laid out like C (ldc, stride_c); c by default
};
inline ColumnMajorGemm row_major_as_column_major(const GemmArgs<float>& g) {
  ColumnMajorGemm cm;
  cm.trans_a = g.trans_b == Trans::T;
  cm.trans_b = g.trans_a == Trans::T;
  cm.m = g.n;
  cm.n = g.m;
  cm.k = g.k;
  cm.alpha = g.alpha;
  cm.beta = g.beta;
  cm.a = g.b; cm.lda = g.ldb; cm.stride_a = g.stride_b;
  cm.b = g.a; cm.ldb = g.lda; cm.stride_b = g.stride_a;
  cm.c = g.c; cm.ldc = g.ldc; cm.stride_c = g.stride_c;
  cm.batch = g.batch;
  cm.bias = g.bias;
  cm.d = g.c;
  // cuBLAS insists on ld >= rows even where a matrix has a single column and the leading
  // dimension is never used; raise it there (callers may pass 0 or the column count).
  const i64 rows_a = cm.trans_a ? cm.k : cm.m, cols_a = cm.trans_a ? cm.m : cm.k;
  const i64 rows_b = cm.trans_b ? cm.n : cm.k, cols_b = cm.trans_b ? cm.k : cm.n;
  if (cols_a <= 1) cm.lda = std::max<i64>({cm.lda, rows_a, 1});
  if (cols_b <= 1) cm.ldb = std::max<i64>({cm.ldb, rows_b, 1});
  if (cm.n <= 1) cm.ldc = std::max<i64>({cm.ldc, cm.m, 1});
  return cm;
}
// What cublasSgemmStridedBatched (bias == null, d == c) and cublasLtMatmul with
// CUBLASLT_EPILOGUE_BIAS compute, as a loop: D = alpha op(A) op(B) + beta C (+ bias[i]);
// beta == 0: C is not read. The tests run the mapping above through it; the host
// emulation of the CUDA kernels uses it in place of cuBLAS and cuBLASLt.
inline void column_major_gemm_host(const ColumnMajorGemm& g) {
  float* const d_base = g.d != nullptr ? g.d : g.c;
  for (i64 batch = 0; batch < g.batch; ++batch) {
    const float* A = g.a + batch * g.stride_a;
    const float* B = g.b + batch * g.stride_b;
    const float* C = g.c + batch * g.stride_c;
    float* D = d_base + batch * g.stride_c;
    for (i64 j = 0; j < g.n; ++j) {
      for (i64 i = 0; i < g.m; ++i) {
        double dot = 0;
        for (i64 p = 0; p < g.k; ++p) {
          const float a = g.trans_a ? A[p + i * g.lda] : A[i + p * g.lda];
          const float b = g.trans_b ? B[j + p * g.ldb] : B[p + j * g.ldb];
          dot += double(a) * double(b);
        }
        const double previous = g.beta == 0.0f ? 0.0 : double(g.beta) * C[i + j * g.ldc];
        const double bias = g.bias != nullptr ? double(g.bias[i]) : 0.0;
        D[i + j * g.ldc] = float(double(g.alpha) * dot + previous + bias);
      }
    }
  }
}

// cuBLASLt picks its kernels for the alignment it is promised (the preference's
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, 256 by default). The promise for one operand
// is the largest power of two, at most 16 bytes (the widest vector load), dividing its
// address and, in a batch, its stride in bytes, so every matrix of the batch keeps it.
inline unsigned gemm_alignment_bytes(const void* ptr, i64 stride_elems, std::size_t elem_size) {
  std::uint64_t bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(ptr)) | 16u;
  if (stride_elems != 0) {
    bits |= static_cast<std::uint64_t>(stride_elems < 0 ? -stride_elems : stride_elems) * elem_size;
  }
  return static_cast<unsigned>(bits & (~bits + 1));  // the lowest set bit
}

// ---- Adam over many tensors at once -------------------------------------------------------
// adam_update receives a host array of segments (param, grad, m, v, n). They go to the
// kernel by value, kAdamChunkSegments at a time, with prefix offsets: segment s of a chunk
// owns the chunk's elements [begin[s], begin[s + 1]). One grid-stride launch per chunk
// covers the chunk's total element count, so a model's many small tensors (biases, layer
// norm parameters) cost one launch together instead of one each. Empty segments are left
// out. The chunk stays far below the 4 KiB a kernel's parameters may take.
constexpr int kAdamChunkSegments = 32;
template <typename T>
struct AdamChunk {
  int count = 0;                              // segments in this chunk, 1..kAdamChunkSegments
  i64 begin[kAdamChunkSegments + 1] = {};     // prefix offsets; begin[count] = total elements
  T* param[kAdamChunkSegments] = {};
  const T* grad[kAdamChunkSegments] = {};
  T* m[kAdamChunkSegments] = {};
  T* v[kAdamChunkSegments] = {};
};
static_assert(sizeof(AdamChunk<float>) + 64 <= 4096, "Adam chunk exceeds the kernel parameter space");

template <typename T>
inline std::vector<AdamChunk<T>> adam_chunks(const AdamSegment<T>* segments, i64 count) {
  std::vector<AdamChunk<T>> chunks;
  for (i64 i = 0; i < count; ++i) {
    const AdamSegment<T>& seg = segments[i];
    if (seg.n <= 0) continue;
    if (chunks.empty() || chunks.back().count == kAdamChunkSegments) chunks.emplace_back();
    AdamChunk<T>& c = chunks.back();
    const int s = c.count++;
    c.param[s] = seg.param;
    c.grad[s] = seg.grad;
    c.m[s] = seg.m;
    c.v[s] = seg.v;
    c.begin[s + 1] = c.begin[s] + seg.n;
  }
  return chunks;
}

// The segment holding element e of a chunk, searched forward from segment `from` (a
// grid-stride loop visits increasing e, so each thread resumes where it stopped; the
// walk over at most 32 offsets is amortised over the thread's elements).
WEDGE_CUDA_HD int adam_segment_of(const i64* begin, int count, i64 e, int from) {
  int s = from;
  while (s + 1 < count && e >= begin[s + 1]) ++s;
  return s;
}

// ---- flash attention tiles -----------------------------------------------------------------
// One warp per block, one thread per query row (forward, dQ pass) or key row (dK/dV
// pass). The thread's own row lives in shared memory with one float of padding
// (kPad = kMaxDh + 1) so 32 threads reading their rows at the same column hit 32
// different banks; the streamed tile (keys, or queries) is read by all threads at the same
// address, a broadcast. kMaxDh is the head dimension rounded up to 16, 32, 64 or 128
// (unused columns are zero). Tiles are sized so every kernel's shared memory stays under
// the 48 KiB a block may use without opting in.
template <int kMaxDh>
struct AttentionTiles {
  static constexpr int kRows = 32;
  static constexpr int kTile = kMaxDh <= 64 ? 32 : 8;
  static constexpr int kPad = kMaxDh + 1;
  static constexpr std::size_t kForwardShared = sizeof(float) * (kRows * kPad + 2 * kTile * kMaxDh);
  static constexpr std::size_t kGradQueryShared = sizeof(float) * (2 * kRows * kPad + 2 * kTile * kMaxDh);
  static constexpr std::size_t kGradKeyValueShared =
      sizeof(float) * (2 * kRows * kPad + 2 * kTile * kMaxDh + 2 * kTile);
  static_assert(kForwardShared <= 48 * 1024 && kGradQueryShared <= 48 * 1024 &&
                kGradKeyValueShared <= 48 * 1024, "attention tile exceeds 48 KiB of shared memory");
};
constexpr i64 kAttentionMaxHeadDim = 128;
// The kMaxDh instantiation serving head dimension dh, or 0 when dh is not supported.
inline int attention_head_dim_class(i64 dh) {
  if (dh < 1) return 0;
  for (int c : {16, 32, 64, 128}) {
    if (dh <= c) return c;
  }
  return 0;
}
inline i64 attention_blocks(i64 BH, i64 L) { return BH * ceil_div(L, 32); }

// ---- Plücker pairs --------------------------------------------------------------------------
// Pairs (a, b), a < b, numbered row by row: (0,1)..(0,r-1) are 0..r-2, then (1,2).. .
// Row a starts after a rows of lengths r-1, r-2, ..., r-a: a(2r - a - 1)/2 pairs.
WEDGE_CUDA_HD i64 pair_index(i64 a, i64 b, i64 r) { return a * (2 * r - a - 1) / 2 + (b - a - 1); }
// The inverse: walk the rows (r is small: 32 in the paper's model).
WEDGE_CUDA_HD void pair_of_index(i64 q, i64 r, int* a, int* b) {
  i64 row = 0;
  while (q >= r - 1 - row) {
    q -= r - 1 - row;
    ++row;
  }
  *a = static_cast<int>(row);
  *b = static_cast<int>(row + 1 + q);
}
constexpr int kMaxPluckerOffsets = 64;
// Threads per (b, t) block: one per Plücker coordinate up to 256 (P = 496 in the model:
// two coordinates per thread).
inline int plucker_threads(i64 P) { return static_cast<int>(std::clamp<i64>(round_up(P, 32), 32, 256)); }
// Shared memory: the rows of z a block reads (its own and one or two per offset) plus,
// for the backward kernels, the gradient accumulator of the block's own row.
inline std::size_t plucker_forward_shared(i64 r, i64 m) { return sizeof(float) * std::size_t((m + 1) * r + m); }
inline std::size_t plucker_backward_shared(i64 r, i64 m) { return sizeof(float) * std::size_t((2 * m + 2) * r); }
constexpr std::size_t kMaxDefaultShared = 48 * 1024;

// ---- embedding backward -----------------------------------------------------------------------
// The prefix sum over the vocabulary runs in one block of kScanThreads threads, each
// owning a contiguous segment of the counts.
constexpr int kScanThreads = 1024;
inline i64 scan_segment(i64 V) { return ceil_div(V, kScanThreads); }

}  // namespace wedge::kernels::cuda_launch
