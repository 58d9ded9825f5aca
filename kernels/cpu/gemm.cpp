// The packed GEMM driver (BLIS-style), independent of the instruction set.
//
// For one matrix C = alpha op(A) op(B) + beta C the loops are, outermost first:
//
//   for each block of mc rows of A            (the packed A block lives in L3)
//     for each slice of kc along k            (beta applies on the first slice only)
//       pack A[rows, slice] into mr-row panels        -- shared by all threads
//       for each block of nc columns of B (this thread's share of the columns)
//         pack B[slice, cols] into nr-column panels   -- this thread's L2
//         for each A panel (mr rows)                  -- stays in L1
//           for each B panel (nr columns)             -- streams from L2
//             micro-kernel: one mr x nr tile of C, kc deep
//
// How the threads share the work depends on the shape (all static, no work stealing):
//   split columns  threads own column ranges and share the packed A block (packed
//                  cooperatively, one barrier per slice, double-buffered);
//   split rows     many rows: threads own row ranges and each packs all of B (a small
//                  duplicate cost, no barriers). When all columns fit one B block and the
//                  rows of op(A) are contiguous in k, each A panel is packed right before
//                  use into an L1 buffer (streaming); op(A) = A^T is packed a block of
//                  rows at a time instead, each source row read once, front to back;
//   split k        small C, long k (weight gradients): threads own k ranges and the
//                  partial products are added in thread order at the end;
//   whole matrices a batch of small products is spread over the threads.
//
// Where this would pack all of B more than once in one call (split rows: every thread
// packs it; one thread or split columns: once per block of mc rows), the threads first pack
// all of it between them and read the panels in place (PackedB, GemmBlocking::pack_b_once).
//
// Except for split k, every element of C is produced by the same sequence of FMAs (same
// kc slices, same micro-kernel) whatever the partition, so results are bit-identical
// across runs and across thread counts. Split k is bit-identical across runs with the
// same thread count.
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "engine/profile.h"
#include "engine/thread_pool.h"

namespace wedge::kernels::cpu {
namespace {

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }


thread_local ScratchBuffer t_a_block[2];  // shared A block (double-buffered) or private A
thread_local ScratchBuffer t_b_block;     // this thread's packed B block

// Times one packing call for `wedge bench-step --profile` (thread time; nothing unless a
// profiler records).
class PackTimer {
 public:
  PackTimer() : t0_(profile::active() ? profile::now_ns() : -1) {}
  ~PackTimer() {
    if (t0_ >= 0) profile::add_packing_ns(profile::now_ns() - t0_);
  }
  PackTimer(const PackTimer&) = delete;
  PackTimer& operator=(const PackTimer&) = delete;

 private:
  std::int64_t t0_;
};

// One matrix of the batch, with op() already resolved into strides.
struct MatrixProblem {
  i64 m, n, k;
  float alpha, beta;
  const float* a;
  i64 a_row_stride, a_col_stride;  // element (i, p) of op(A)
  const float* b;
  i64 b_row_stride, b_col_stride;  // element (p, j) of op(B)
  float* c;
  i64 ldc;
  // The epilogue: applied to each tile of C right after its last k slice.
  const float* bias;
  Activation act;
  float* aux;
  bool has_epilogue() const { return bias != nullptr || act != Activation::None; }
};

MatrixProblem matrix_of_batch(const GemmArgs<float>& g, i64 index) {
  MatrixProblem p;
  p.m = g.m;
  p.n = g.n;
  p.k = g.k;
  p.alpha = g.alpha;
  p.beta = g.beta;
  p.a = g.a + index * g.stride_a;
  p.b = g.b + index * g.stride_b;
  p.c = g.c + index * g.stride_c;
  p.ldc = g.ldc;
  p.bias = g.bias;
  p.act = g.act;
  p.aux = g.aux == nullptr ? nullptr : g.aux + index * g.stride_c;
  if (g.trans_a == Trans::N) {
    p.a_row_stride = g.lda;
    p.a_col_stride = 1;
  } else {
    p.a_row_stride = 1;
    p.a_col_stride = g.lda;
  }
  if (g.trans_b == Trans::N) {
    p.b_row_stride = g.ldb;
    p.b_col_stride = 1;
  } else {
    p.b_row_stride = 1;
    p.b_col_stride = g.ldb;
  }
  return p;
}

// C = beta * C over an m x n block (the whole product when k == 0 or alpha == 0).
void scale_c(float* c, i64 ldc, i64 m, i64 n, float beta) {
  for (i64 i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f)
      std::memset(row, 0, static_cast<std::size_t>(n) * sizeof(float));
    else if (beta != 1.0f)
      for (i64 j = 0; j < n; ++j) row[j] *= beta;
  }
}

// The epilogue of the tile of C whose top-left element is (i, j).
void finish_tile(const SgemmMicroKernel& mk, const MatrixProblem& pr, i64 i, i64 j, int m_valid, int n_valid) {
  mk.epilogue(pr.c + i * pr.ldc + j, pr.ldc, m_valid, n_valid, pr.bias == nullptr ? nullptr : pr.bias + j,
              pr.act, pr.aux == nullptr ? nullptr : pr.aux + i * pr.ldc + j);
}

// The epilogue of rows [row0, row0 + rows) x columns [col0, col1) of C, tile by tile
// (C already holds the whole product).
void finish_rows(const SgemmMicroKernel& mk, const MatrixProblem& pr, i64 row0, i64 rows, i64 col0,
                 i64 col1) {
  for (i64 i = row0; i < row0 + rows; i += mk.mr) {
    const int m_valid = static_cast<int>(std::min<i64>(mk.mr, row0 + rows - i));
    for (i64 j = col0; j < col1; j += mk.nr)
      finish_tile(mk, pr, i, j, m_valid, static_cast<int>(std::min<i64>(mk.nr, col1 - j)));
  }
}

// The depth of the next k slice to prefetch while packing `lines` rows (of A) or columns
// (of B): all of it when it fits comfortably in L2 beside the packed blocks, else none
// (prefetching megabytes would only evict the blocks in use).
i64 worth_prefetching(i64 lines, i64 next_kc) {
  constexpr i64 kMaxPrefetchBytes = 256 * 1024;
  return next_kc > 0 && lines * next_kc * i64{sizeof(float)} <= kMaxPrefetchBytes ? next_kc : 0;
}

// Packs A panels [first, last) of the block starting at row `row0`, slice `p0`..p0+kc.
void pack_a_panels(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                   i64 row0, i64 rows, i64 p0, i64 kc, i64 first, i64 last, float* block) {
  if (first >= last) return;
  const i64 next_kc = worth_prefetching((last - first) * mk.mr, std::min(blk.kc, pr.k - p0 - kc));
  const i64 r = first * mk.mr;
  const PackTimer timer;
  mk.pack_a(pr.a + (row0 + r) * pr.a_row_stride + p0 * pr.a_col_stride, pr.a_row_stride,
            pr.a_col_stride, std::min(rows, last * mk.mr) - r, kc, next_kc,
            block + first * mk.mr * panel_depth(mk, kc));
}

// All of op(B) packed once for the whole call, for shapes where the driver would otherwise
// pack it several times (once per thread, or once per block of A rows). The layout is the
// driver's own: slice by slice along k (blk.kc values each, the last one shorter), each
// slice the ceil(n / nr) panels of its columns, so the panels of columns [jc, jc + nc) of
// one slice lie one after the other -- exactly the B block compute_block would pack, read
// in place. The same panels and the same kernel calls: the same bits either way.
struct PackedB {
  const float* panels = nullptr;  // null: pack B block by block as usual
  i64 kc = 0;                     // depth in k of every slice but the last
  i64 slice_floats = 0;           // floats of one full slice
  // The panels of slice [p0, p0 + kc) from column jc (a multiple of nr) on.
  const float* block(const SgemmMicroKernel& mk, i64 p0, i64 slice_kc, i64 jc) const {
    return panels + (p0 / kc) * slice_floats + (jc / mk.nr) * mk.nr * panel_depth(mk, slice_kc);
  }
};

// How many times the driver packs all of B when each thread packs it for its own rows
// (split rows; team 1 is one thread with all of them): once per block of mc rows, or once
// in all when every column fits one B block and the rows of op(A) are contiguous in k (the
// rows are then streamed; op(A) = A^T goes block by block).
i64 b_packings_split_rows(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                          int team) {
  const i64 panels = ceil_div(pr.m, mk.mr);
  i64 packings = 0;
  for (int t = 0; t < team; ++t) {
    const i64 first = panels * t / team, last = panels * (t + 1) / team;
    if (first == last) continue;
    const i64 rows = std::min(pr.m, last * mk.mr) - first * mk.mr;
    packings += pr.n <= blk.nc && pr.a_col_stride == 1 ? 1 : ceil_div(rows, blk.mc);
  }
  return packings;
}

// Floats of all of op(B) in the PackedB layout.
i64 whole_b_floats(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr) {
  const i64 full = pr.k / blk.kc, rest = pr.k - full * blk.kc;
  const i64 columns = ceil_div(pr.n, mk.nr) * mk.nr;
  return columns * (full * panel_depth(mk, blk.kc) + (rest > 0 ? panel_depth(mk, rest) : 0));
}

std::atomic<i64> g_whole_b_packings{0};
std::atomic<i64> g_b_packings{0};  // every packing of op(B), whole or one block

// Thread `tid` of `team` packs its share of all of op(B) into `out` (the PackedB layout):
// the work is cut into (slice, block of nc columns) pieces, dealt out in turn.
void pack_whole_b(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr, float* out,
                  int tid, int team) {
  if (tid == 0) {
    g_whole_b_packings.fetch_add(1, std::memory_order_relaxed);
    g_b_packings.fetch_add(1, std::memory_order_relaxed);
  }
  const i64 col_blocks = ceil_div(pr.n, blk.nc);
  const i64 slice_floats = ceil_div(pr.n, mk.nr) * mk.nr * panel_depth(mk, blk.kc);
  i64 piece = 0;
  for (i64 p0 = 0; p0 < pr.k; p0 += blk.kc) {
    const i64 kc = std::min(blk.kc, pr.k - p0);
    for (i64 cb = 0; cb < col_blocks; ++cb, ++piece) {
      if (piece % team != tid) continue;
      const i64 jc = cb * blk.nc, nc = std::min(blk.nc, pr.n - jc);
      const PackTimer timer;
      mk.pack_b(pr.b + p0 * pr.b_row_stride + jc * pr.b_col_stride, pr.b_row_stride, pr.b_col_stride, kc, 0, nc,
                out + (p0 / blk.kc) * slice_floats + (jc / mk.nr) * mk.nr * panel_depth(mk, kc));
    }
  }
}

// The panels of op(B) rows [p0, p0 + kc) x columns [jc, jc + nc): read in place from all
// of B packed up front, or else packed now into this thread's B block.
const float* block_of_b(const SgemmMicroKernel& mk, const MatrixProblem& pr, const PackedB& whole, i64 p0,
                        i64 kc, i64 jc, i64 nc, i64 next_kc) {
  if (whole.panels) return whole.block(mk, p0, kc, jc);
  float* own = t_b_block.get(static_cast<std::size_t>(ceil_div(nc, mk.nr) * mk.nr * panel_depth(mk, kc)));
  g_b_packings.fetch_add(1, std::memory_order_relaxed);
  {
    const PackTimer timer;
    mk.pack_b(pr.b + p0 * pr.b_row_stride + jc * pr.b_col_stride, pr.b_row_stride, pr.b_col_stride, kc, next_kc,
              nc, own);
  }
  return own;
}

// The inner three loops: every tile of a packed A block [a_first, a_last) panels times
// columns [col0, col1) of C, B block by block.
void compute_block(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                   const float* a_block, i64 row0, i64 rows, i64 a_first, i64 a_last, i64 p0,
                   i64 kc, i64 col0, i64 col1, float beta, const PackedB& whole) {
  // course 13 begin: the blocked GEMM's inner loops: pack a block of B, then every mr x nr tile of C from the packed panels
  const i64 depth = panel_depth(mk, kc);
  // Prefetch the next k slice only when this B block is the last one before it (the same
  // columns come back right after; with several B blocks the data would be evicted first).
  const i64 next_kc =
      col1 - col0 <= blk.nc ? worth_prefetching(col1 - col0, std::min(blk.kc, pr.k - p0 - kc)) : 0;
  const bool last_slice = pr.has_epilogue() && p0 + kc == pr.k;
  for (i64 jc = col0; jc < col1; jc += blk.nc) {
    const i64 nc = std::min(blk.nc, col1 - jc);
    const i64 b_panels = ceil_div(nc, mk.nr);
    const float* b_block = block_of_b(mk, pr, whole, p0, kc, jc, nc, next_kc);
    for (i64 ap = a_first; ap < a_last; ++ap) {
      const i64 i = ap * mk.mr;
      const int m_valid = static_cast<int>(std::min<i64>(mk.mr, rows - i));
      const float* a_panel = a_block + ap * mk.mr * depth;
      float* c_row = pr.c + (row0 + i) * pr.ldc;
      for (i64 bpanel = 0; bpanel < b_panels; ++bpanel) {
        const i64 j = jc + bpanel * mk.nr;
        const int n_valid = static_cast<int>(std::min<i64>(mk.nr, col1 - j));
        mk.kernel(depth, a_panel, b_block + bpanel * mk.nr * depth, c_row + j, pr.ldc, m_valid, n_valid,
                  pr.alpha, beta);
        if (last_slice) finish_tile(mk, pr, row0 + i, j, m_valid, n_valid);
      }
    }
  }
  // course 13 end
}

// Asks for the source of one A panel (rows [row, row + mr) of op(A), k slice [p0, p0 + kc);
// the rows contiguous in k) to be brought into L2, in `parts` portions: portion `part` now.
// One cache line per 16 floats of each row.
void prefetch_a_panel(const SgemmMicroKernel& mk, const MatrixProblem& pr, i64 row, i64 rows_left,
                      i64 p0, i64 kc, i64 part, i64 parts) {
  const i64 rows = std::min<i64>(mk.mr, rows_left);
  if (rows <= 0) return;
  const i64 along = ceil_div(kc, 16);  // lines per source row
  const i64 lines = rows * along;
  const i64 begin = lines * part / parts, end = lines * (part + 1) / parts;
  for (i64 line = begin; line < end; ++line) {
    const i64 outer = line / along, inner = line % along;
    __builtin_prefetch(pr.a + (row + outer) * pr.a_row_stride + p0 + 16 * inner, 0, 2);
  }
}

// One thread's rows when all of C's columns fit one B block and the rows of op(A) are
// contiguous in k: B is packed once per k slice, and each A panel is packed just before
// the row of tiles that uses it, into a buffer that stays in L1, while the source of the
// next panel is prefetched a little before each tile. Packed A then never travels to L2
// and back, and reading A from memory overlaps the arithmetic.
void matrix_rows_streaming(const SgemmMicroKernel& mk, const GemmBlocking& blk,
                           const MatrixProblem& pr, i64 row0, i64 rows, const PackedB& whole) {
  const i64 a_panels = ceil_div(rows, mk.mr);
  const i64 b_panels = ceil_div(pr.n, mk.nr);
  for (i64 p0 = 0; p0 < pr.k; p0 += blk.kc) {
    const i64 kc = std::min(blk.kc, pr.k - p0);
    const float beta = p0 == 0 ? pr.beta : 1.0f;
    const bool last_slice = pr.has_epilogue() && p0 + kc == pr.k;
    const i64 depth = panel_depth(mk, kc);
    const float* b_block = block_of_b(mk, pr, whole, p0, kc, 0, pr.n, 0);
    float* a_panel = t_a_block[0].get(static_cast<std::size_t>(mk.mr * depth));
    for (i64 ap = 0; ap < a_panels; ++ap) {
      const i64 i = ap * mk.mr;
      const int m_valid = static_cast<int>(std::min<i64>(mk.mr, rows - i));
      {
        const PackTimer timer;
        mk.pack_a(pr.a + (row0 + i) * pr.a_row_stride + p0 * pr.a_col_stride, pr.a_row_stride,
                  pr.a_col_stride, m_valid, kc, 0, a_panel);
      }
      float* c_row = pr.c + (row0 + i) * pr.ldc;
      for (i64 bp = 0; bp < b_panels; ++bp) {
        prefetch_a_panel(mk, pr, row0 + i + mk.mr, rows - i - mk.mr, p0, kc, bp, b_panels);
        const i64 j = bp * mk.nr;
        const int n_valid = static_cast<int>(std::min<i64>(mk.nr, pr.n - j));
        mk.kernel(depth, a_panel, b_block + bp * mk.nr * depth, c_row + j, pr.ldc, m_valid, n_valid,
                  pr.alpha, beta);
        if (last_slice) finish_tile(mk, pr, row0 + i, j, m_valid, n_valid);
      }
    }
  }
}

// Threads own disjoint row ranges (whole A panels); each packs its own A and all of B.
void matrix_split_rows(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                       int tid, int team, const PackedB& whole) {
  const i64 panels = ceil_div(pr.m, mk.mr);
  const i64 first = panels * tid / team, last = panels * (tid + 1) / team;
  if (first == last) return;
  const i64 my_row0 = first * mk.mr;
  const i64 my_rows = std::min(pr.m, last * mk.mr) - my_row0;
  // Streaming reads each source row of an A^T panel for only mr floats, kc rows far apart
  // (often a power of two apart, so they collide in the caches' sets): measured slower than
  // packing the block, whose packer reads every source row once, front to back.
  if (pr.n <= blk.nc && pr.a_col_stride == 1) {
    matrix_rows_streaming(mk, blk, pr, my_row0, my_rows, whole);
    return;
  }
  for (i64 ic = 0; ic < my_rows; ic += blk.mc) {
    const i64 mc = std::min(blk.mc, my_rows - ic);
    const i64 a_panels = ceil_div(mc, mk.mr);
    for (i64 p0 = 0; p0 < pr.k; p0 += blk.kc) {
      const i64 kc = std::min(blk.kc, pr.k - p0);
      float* a_block = t_a_block[0].get(static_cast<std::size_t>(a_panels * mk.mr * panel_depth(mk, kc)));
      pack_a_panels(mk, blk, pr, my_row0 + ic, mc, p0, kc, 0, a_panels, a_block);
      compute_block(mk, blk, pr, a_block, my_row0 + ic, mc, 0, a_panels, p0, kc, 0, pr.n,
                    p0 == 0 ? pr.beta : 1.0f, whole);
    }
  }
}

// Threads own disjoint column ranges (whole B panels) and share each packed A block.
void matrix_split_cols(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                       float* const shared_a[2], Barrier& barrier, int tid, int team, const PackedB& whole) {
  const i64 b_panels = ceil_div(pr.n, mk.nr);
  const i64 col0 = std::min(pr.n, b_panels * tid / team * mk.nr);
  const i64 col1 = std::min(pr.n, b_panels * (tid + 1) / team * mk.nr);
  int step = 0;
  for (i64 ic = 0; ic < pr.m; ic += blk.mc) {
    const i64 mc = std::min(blk.mc, pr.m - ic);
    const i64 a_panels = ceil_div(mc, mk.mr);
    for (i64 p0 = 0; p0 < pr.k; p0 += blk.kc, ++step) {
      const i64 kc = std::min(blk.kc, pr.k - p0);
      float* a_block = shared_a[step & 1];
      pack_a_panels(mk, blk, pr, ic, mc, p0, kc, a_panels * tid / team, a_panels * (tid + 1) / team,
                    a_block);
      // Past this barrier every share of the A block is packed. It also makes the double
      // buffer safe: a thread packs step s+1 only after this barrier of step s, which
      // every thread reaches only after it finished computing step s-1, the last reader
      // of the buffer that step s+1 overwrites.
      barrier.arrive_and_wait();
      if (col0 < col1) {
        compute_block(mk, blk, pr, a_block, ic, mc, 0, a_panels, p0, kc, col0, col1,
                      p0 == 0 ? pr.beta : 1.0f, whole);
      }
    }
  }
}

void matrix_single_thread(const SgemmMicroKernel& mk, const GemmBlocking& blk,
                          const MatrixProblem& pr, const PackedB& whole = {}) {
  matrix_split_rows(mk, blk, pr, 0, 1, whole);
}

thread_local ScratchBuffer t_c_partial;  // a thread's share of a split-k product
thread_local ScratchBuffer t_whole_b;    // all of op(B), packed once for a call (PackedB)

PackedB whole_b_view(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                     const float* panels) {
  return {panels, blk.kc, ceil_div(pr.n, mk.nr) * mk.nr * panel_depth(mk, blk.kc)};
}

// All of op(B) packed on this thread, into its own buffer.
PackedB pack_whole_b_here(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr) {
  float* out = t_whole_b.get(static_cast<std::size_t>(whole_b_floats(mk, blk, pr)));
  pack_whole_b(mk, blk, pr, out, 0, 1);
  return whole_b_view(mk, blk, pr, out);
}

// Packing B once up front pays when the driver would pack all of it at least twice; the
// PackedB layout needs B blocks of whole panels.
bool worth_packing_whole_b(const SgemmMicroKernel& mk, const GemmBlocking& blk, i64 packings) {
  return blk.pack_b_once && packings >= 2 && blk.nc % mk.nr == 0;
}

// Threads own disjoint ranges of k slices: for small C and long k (a weight gradient over
// all tokens) this packs nothing twice, shares nothing between cores and needs one
// barrier. Thread 0 accumulates into C with the caller's beta; thread t > 0 writes its
// partial product into its own scratch; then C += partial_1 + ... + partial_{T-1}, the
// rows split over the threads, each element summed in thread order. The result is the
// same on every run with this thread count, though rounded differently from a run on
// one thread (which sums all of k in one chain).
void matrix_split_k(const SgemmMicroKernel& mk, const GemmBlocking& blk, const MatrixProblem& pr,
                    float** partials, Barrier& barrier, int tid, int team) {
  const i64 slices = ceil_div(pr.k, blk.kc);
  const i64 first = slices * tid / team * blk.kc;
  const i64 last = std::min(pr.k, slices * (tid + 1) / team * blk.kc);
  MatrixProblem mine = pr;
  mine.bias = nullptr;  // the epilogue runs once the partial products are summed
  mine.act = Activation::None;
  mine.a = pr.a + first * pr.a_col_stride;
  mine.b = pr.b + first * pr.b_row_stride;
  mine.k = last - first;
  if (tid > 0) {
    mine.c = partials[tid] = t_c_partial.get(static_cast<std::size_t>(pr.m * pr.n));
    mine.ldc = pr.n;
    mine.beta = 0.0f;
  }
  if (mine.k > 0)
    matrix_single_thread(mk, blk, mine);
  else
    scale_c(mine.c, mine.ldc, pr.m, pr.n, mine.beta);
  barrier.arrive_and_wait();
  const i64 row0 = pr.m * tid / team, row1 = pr.m * (tid + 1) / team;
  for (i64 i = row0; i < row1; ++i) {
    float* c_row = pr.c + i * pr.ldc;
    for (int t = 1; t < team; ++t) {
      const float* part = partials[t] + i * pr.n;
      for (i64 j = 0; j < pr.n; ++j) c_row[j] += part[j];
    }
  }
  if (pr.has_epilogue()) finish_rows(mk, pr, row0, row1 - row0, 0, pr.n);
}

}  // namespace

void tile_epilogue_scalar(float* c, i64 ldc, int m_valid, int n_valid, const float* bias,
                          Activation act, float* aux) {
  for (int i = 0; i < m_valid; ++i) {
    for (int j = 0; j < n_valid; ++j) {
      float h = c[i * ldc + j] + (bias != nullptr ? bias[j] : 0.0f);
      if (act == Activation::Gelu) {
        aux[i * ldc + j] = h;
        h = h * 0.5f * std::erfc(-h * 0.70710678118654752440f);
      }
      c[i * ldc + j] = h;
    }
  }
}

i64 whole_b_packings() { return g_whole_b_packings.load(std::memory_order_relaxed); }
i64 b_packings() { return g_b_packings.load(std::memory_order_relaxed); }

GemmBlocking default_blocking(const SgemmMicroKernel& mk) {
  GemmBlocking blk;
  // 384 slots of depth: 384 values of k in fp32 panels, 768 in bf16 pairs (the same bytes).
  blk.kc = 384 * mk.k_per_slot;
  // The B block (kc x nc) stays in a core's L2 while every A panel streams past it.
  blk.nc = mk.nr * 15;
  // A block rows, a multiple of mr: kc x mc floats, shared through L3.
  blk.mc = mk.mr * 220;
  return blk;
}

void sgemm_packed(const SgemmMicroKernel& mk, const GemmBlocking& blk, const GemmArgs<float>& args,
                  int threads) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return;
  if (args.k <= 0 || args.alpha == 0.0f) {
    for (i64 b = 0; b < args.batch; ++b) {
      const MatrixProblem pr = matrix_of_batch(args, b);
      scale_c(pr.c, pr.ldc, pr.m, pr.n, pr.beta);
      if (pr.has_epilogue()) finish_rows(mk, pr, 0, pr.m, 0, pr.n);
    }
    return;
  }
  int team = in_parallel_region() ? 1 : num_threads();
  if (threads > 0) team = std::min(team, threads);

  const i64 work = args.m * args.n * args.k;
  // Spread a batch of matrices over the threads whole when each one is too small to be
  // worth splitting (or there are plenty of them). C matrices must not alias.
  const bool spread_batch = team > 1 && args.batch > 1 && args.stride_c != 0 &&
                            (work < (i64{1} << 24) || args.batch >= 4 * team);
  if (team == 1 || spread_batch) {
    const int used = static_cast<int>(std::min<i64>(team, args.batch));
    // One B for every matrix of the batch (stride 0) is packed once for all of them.
    const MatrixProblem first_matrix = matrix_of_batch(args, 0);
    const bool shared_b = args.stride_b == 0 &&
                          worth_packing_whole_b(mk, blk, args.batch * b_packings_split_rows(mk, blk, first_matrix, 1));
    const PackedB shared = shared_b ? pack_whole_b_here(mk, blk, first_matrix) : PackedB{};
    parallel_team(used, [&](int tid, int size) {
      const i64 first = args.batch * tid / size, last = args.batch * (tid + 1) / size;
      for (i64 b = first; b < last; ++b) {
        const MatrixProblem pr = matrix_of_batch(args, b);
        if (shared_b) {
          matrix_single_thread(mk, blk, pr, shared);
        } else if (worth_packing_whole_b(mk, blk, b_packings_split_rows(mk, blk, pr, 1))) {
          matrix_single_thread(mk, blk, pr, pack_whole_b_here(mk, blk, pr));
        } else {
          matrix_single_thread(mk, blk, pr);
        }
      }
    });
    return;
  }

  const i64 row_panels = ceil_div(args.m, mk.mr);
  const i64 col_panels = ceil_div(args.n, mk.nr);
  // A small C over a long k: split k (see matrix_split_k).
  const bool split_k = args.k >= 4 * blk.kc * team && args.m * args.n <= 512 * 512 &&
                       args.m * args.n * team <= args.k * (args.m + args.n);
  // Splitting rows duplicates the packing of B (k x n) in every thread; that is cheap
  // when each thread still has many rows to amortise it over (and where B would be packed
  // more than once, the threads pack it once between them first).
  const bool split_rows = (args.m >= 400 * team && row_panels >= 4 * team) || col_panels < 2 * team;
  if (split_rows && row_panels < 2) team = 1;

  for (i64 b = 0; b < args.batch; ++b) {
    const MatrixProblem pr = matrix_of_batch(args, b);
    if (team == 1) {
      if (worth_packing_whole_b(mk, blk, b_packings_split_rows(mk, blk, pr, 1))) {
        matrix_single_thread(mk, blk, pr, pack_whole_b_here(mk, blk, pr));
      } else {
        matrix_single_thread(mk, blk, pr);
      }
    } else if (split_k) {
      std::vector<float*> partials(static_cast<std::size_t>(team), nullptr);
      Barrier barrier(team);
      parallel_team(team, [&](int tid, int size) {
        if (size != team) {  // pool busy elsewhere: thread 0 alone
          if (tid == 0) matrix_single_thread(mk, blk, pr);
          return;
        }
        matrix_split_k(mk, blk, pr, partials.data(), barrier, tid, size);
      });
    } else {
      // The threads pack all of B between them first when the split would pack it twice or
      // more (split rows: once per thread at least; split columns: once per block of rows).
      const i64 packings = split_rows ? b_packings_split_rows(mk, blk, pr, team) : ceil_div(pr.m, blk.mc);
      const bool whole = worth_packing_whole_b(mk, blk, packings);
      float* whole_panels = whole ? t_whole_b.get(static_cast<std::size_t>(whole_b_floats(mk, blk, pr))) : nullptr;
      const PackedB packed = whole ? whole_b_view(mk, blk, pr, whole_panels) : PackedB{};
      float* shared_a[2] = {nullptr, nullptr};
      if (!split_rows) {
        const i64 a_floats =
            ceil_div(std::min(blk.mc, pr.m), mk.mr) * mk.mr * panel_depth(mk, std::min(blk.kc, pr.k));
        shared_a[0] = t_a_block[0].get(static_cast<std::size_t>(a_floats));
        shared_a[1] = t_a_block[1].get(static_cast<std::size_t>(a_floats));
      }
      Barrier barrier(team);
      parallel_team(team, [&](int tid, int size) {
        // The pool hands back a smaller team only when it is busy elsewhere (then size
        // is 1); the barrier needs exactly `team` threads, so thread 0 does it all.
        if (size != team) {
          if (tid == 0) {
            if (whole) pack_whole_b(mk, blk, pr, whole_panels, 0, 1);
            matrix_single_thread(mk, blk, pr, packed);
          }
          return;
        }
        if (whole) {
          pack_whole_b(mk, blk, pr, whole_panels, tid, size);
          barrier.arrive_and_wait();  // every thread's share of B is packed
        }
        if (split_rows) {
          matrix_split_rows(mk, blk, pr, tid, size, packed);
        } else {
          matrix_split_cols(mk, blk, pr, shared_a, barrier, tid, size, packed);
        }
      });
    }
  }
}

}  // namespace wedge::kernels::cpu
