// The small-m GEMM's column kernel (gemv.h), written once for any vector width. Included
// only by gemv_avx512.cpp and gemv_avx2.cpp, after the vector layer of their width
// (simd_avx512.h / simd_avx2.h: vf, vmask, kLanes, first_lanes, load, load_masked, store,
// store_masked, fmadd, mul, add, set1, zero), each of which defines `Lanes` -- the few
// operations the layer has no name for -- and instantiates Gemv<Lanes> (the members are
// static; `columns` is the entry):
//
//   kRegisters            vector registers of the instruction set
//   opaque(v)             v, through an empty asm: the compiler cannot fuse the multiply
//                         that made v into the add that uses it
//   quads(p, s)           kLanes / 4 runs of 4 floats, run r at p + r * s, run r in lanes 4r..4r+3
//   quads_first(p, s, n)  the same, the first n (< 4) floats of each run, zeros after
//   transpose4(v[4])      4 x 4 transposes within each run of 4 lanes: lane 4r + g of v[s]
//                         becomes lane 4r + s of v[g]
//   from_row_order(v)     lane g kLanes/4 + r of the result is lane 4r + g of v (r < kLanes/4,
//                         g < 4): undoes the order in which transposed quads hold their rows
//   micro_kernel()        the packed GEMM's micro-kernel of the same instruction set: its
//                         epilogue finishes each block of columns
//   kPairs                false; true for the bf16 kernel (gemv_avx512bf16.cpp), which also
//                         defines pair_up(even, odd) (16 bf16 pairs along k, rounded as the
//                         packers round), broadcast_pair(slot) and dot(acc, a, b) (vdpbf16ps)
//
// With kPairs, op(A) arrives paired along k (gemv.h) and every step takes two values of k:
// the B values of k = 2s and 2s + 1 are rounded and paired in registers and one vdpbf16ps
// per row adds both products to each lane, exactly as the bf16 micro-kernel's slot s does.
//
// THE SAME BITS AS THE PACKED GEMM. Every output is summed exactly as the packed
// micro-kernel sums it: one chain of FMAs over k in increasing order, restarted from zero
// at every slice of kc = default_blocking(micro kernel).kc values, each slice's sum s then
// folded in as alpha s (+ beta C on the first slice, + C on the others: a multiply and an
// add, not fused). So an output does not depend on how many other rows the call has: the
// same row of A gives the same bits in a GEMM of 1, 8 or 1000 rows, whichever path runs it
// (a model whose row counts depend on the data -- tokens routed to experts -- relies on
// that to stay causal to the bit). For trans_b N the chain runs along the lanes of a
// vector of columns of C; for trans_b T each lane needs W[j, p] for one row j of W, so the
// rows of W are transposed in registers, 4 values of k at a time (quads), never stored.
//
// Everything here is in an unnamed namespace: each including file gets its own copy,
// compiled for its own instruction set (an inline function shared between the two files
// would be merged by the linker, and one of the two copies would run on the wrong CPU).
#pragma once

#include <algorithm>
#include <utility>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemv.h"

#if !defined(WEDGE_SIMD_ISA)
#error "kernels/cpu/gemv_impl.h: include simd_avx512.h or simd_avx2.h first"
#endif

namespace wedge::kernels::cpu {
namespace {

using namespace WEDGE_SIMD_ISA;

template <class L>
struct Gemv {
  using V = vf;
  using Mask = vmask;
  static constexpr int W = kLanes;
  static_assert(W % 4 == 0, "a vector holds whole quads");

  // J, the width of a group: J vectors of columns of C per pass over k, with M x J
  // accumulators. About 8 independent chains (an FMA's latency times the two FMA ports),
  // as far as the registers hold them beside the B vectors and the broadcast of A.
  template <int M>
  static constexpr int group() {
    const int want = (8 + M - 1) / M;
    const int fit = (L::kRegisters - 6) / M;
    return std::max(1, std::min(want, fit));
  }

  // The same for trans_b T, where each step of 4 values of k costs a group W quad loads and
  // two rounds of shuffles besides its 4 M FMAs: 2 chains keep the FMAs' latency behind that
  // work, and more rows of W in flight would only run out of registers for their pointers.
  template <int M>
  static constexpr int nt_group_width() {
    return M == 1 ? 2 : 1;
  }

  // Columns per block: the epilogue runs on each block right after its sums, while the
  // block of C is still in L1. A whole number of groups of either kind, about 128 columns.
  template <int M>
  static constexpr i64 block_columns() {
    const i64 g = i64{group<M>()} * W;
    static_assert(group<M>() % nt_group_width<M>() == 0, "blocks of whole trans_b T groups");
    return g * std::max<i64>(1, 128 / g);
  }

  // One slice's sums into C, as the micro-kernel stores its tile: alpha s, then on the
  // first slice beta C (C not read when beta == 0), on the others + C.
  template <int M, int J, bool kTail>
  static void finish_slice(const GemvMatrix& p, const V (&acc)[M][J], i64 j, Mask last, bool first) {
    const float beta = first ? p.beta : 1.0f;
    const V alpha = set1(p.alpha), vbeta = set1(beta);
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
      for (int jj = 0; jj < J; ++jj) {
        float* at = p.c + i * p.ldc + j + jj * W;
        const bool masked = kTail && jj == J - 1;
        V r = L::opaque(mul(acc[i][jj], alpha));
        if (beta == 1.0f)
          r = add(r, masked ? load_masked(at, last) : load(at));
        else if (beta != 0.0f)
          r = fmadd(vbeta, masked ? load_masked(at, last) : load(at), r);
        if (masked)
          store_masked(at, last, r);
        else
          store(at, r);
      }
  }

  template <int M, int J>
  [[gnu::always_inline]] static void clear(V (&acc)[M][J]) {
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
      for (int jj = 0; jj < J; ++jj) acc[i][jj] = zero();
  }

  // trans_b N: J vectors of columns from column j, for the M rows: per slice, C[i, cols]
  // accumulates op(A)[i, q] B[q, cols] for q in order, each B vector loaded once for all
  // rows. kTail: the last vector holds only the lanes of `last` (loads and stores masked).
  template <int M, int J, bool kTail>
  static void nn_group(const GemvMatrix& p, i64 j, Mask last, i64 kc) {
    for (i64 p0 = 0; p0 < p.k; p0 += kc) {
      const i64 p1 = std::min(p.k, p0 + kc);
      V acc[M][J];
      clear(acc);
      const float* row = p.b + p0 * p.ldb + j;
      if constexpr (L::kPairs) {
        for (i64 q = p0; q < p1; q += 2, row += 2 * p.ldb) {
          const bool odd = q + 1 < p1;  // else the pair's second value is 0, as packed
          V bv[J];
#pragma GCC unroll 8
          for (int jj = 0; jj < J; ++jj) {
            const bool masked = kTail && jj == J - 1;
            const V even = masked ? load_masked(row + jj * W, last) : load(row + jj * W);
            const V next = !odd ? zero() : masked ? load_masked(row + p.ldb + jj * W, last) : load(row + p.ldb + jj * W);
            bv[jj] = L::pair_up(even, next);
          }
#pragma GCC unroll 8
          for (int i = 0; i < M; ++i) {
            const V av = L::broadcast_pair(p.a + i * p.lda + q / 2);
#pragma GCC unroll 8
            for (int jj = 0; jj < J; ++jj) acc[i][jj] = L::dot(acc[i][jj], av, bv[jj]);
          }
        }
        finish_slice<M, J, kTail>(p, acc, j, last, p0 == 0);
        continue;
      }
      for (i64 q = p0; q < p1; ++q, row += p.ldb) {
        V bv[J];
#pragma GCC unroll 8
        for (int jj = 0; jj < J; ++jj)
          bv[jj] = kTail && jj == J - 1 ? load_masked(row + jj * W, last) : load(row + jj * W);
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) {
          const V av = set1(p.a[i * p.lda + q]);
#pragma GCC unroll 8
          for (int jj = 0; jj < J; ++jj) acc[i][jj] = fmadd(av, bv[jj], acc[i][jj]);
        }
      }
      finish_slice<M, J, kTail>(p, acc, j, last, p0 == 0);
    }
  }

  // trans_b T: rows j .. j + W - 1 of W, 4 values of k from q, transposed in registers.
  // v[g] holds quads (runs of 4 values of k) of W / 4 consecutive rows, g W/4 + r for run r
  // (row pointers at row[g], the rows ldb apart); the 4 x 4 transposes within the runs then
  // give t[s] = W[rows, q + s] with row g W/4 + r in lane 4 r + g -- the rows in a permuted
  // order, which the accumulators keep until L::from_row_order restores it for C.
  // Consecutive rows keep the addressing to one pointer per 4 rows plus ldb and 3 ldb.
  // `count` < 4: only the first count values of k (the rest zero).
  static void transposed_quad(const float* const (&row)[4], i64 ldb, i64 q, V (&t)[4]) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) t[g] = L::quads(row[g] + q, ldb);
    L::transpose4(t);
  }
  static void transposed_quad(const float* const (&row)[4], i64 ldb, i64 q, int count, V (&t)[4]) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) t[g] = L::quads_first(row[g] + q, ldb, count);
    L::transpose4(t);
  }

  // trans_b T: the products of `count` (1..4) values of k from q, t[s] = W[rows, q + s]
  // (zeros past count), for the M rows, into column vector jj of acc. Pairs: q is even (the
  // slices start at multiples of kc), so the values of k pair up as the packed panels do.
  template <int M, int J>
  [[gnu::always_inline]] static void accumulate(const GemvMatrix& p, i64 q, const V (&t)[4], int count, V (&acc)[M][J],
                                                int jj) {
    if constexpr (L::kPairs) {
#pragma GCC unroll 2
      for (int s = 0; s < 4; s += 2) {
        if (s >= count) break;
        const V pair = L::pair_up(t[s], t[s + 1]);
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) acc[i][jj] = L::dot(acc[i][jj], L::broadcast_pair(p.a + i * p.lda + (q + s) / 2), pair);
      }
    } else {
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        if (s >= count) break;
#pragma GCC unroll 8
        for (int i = 0; i < M; ++i) acc[i][jj] = fmadd(set1(p.a[i * p.lda + q + s]), t[s], acc[i][jj]);
      }
    }
  }

  // trans_b T: J vectors of columns from column j (J * W whole rows of W), for the M rows.
  template <int M, int J>
  static void nt_group(const GemvMatrix& p, i64 j, i64 kc) {
    const float* row[J][4];
#pragma GCC unroll 8
    for (int jj = 0; jj < J; ++jj)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) row[jj][g] = p.b + (j + jj * W + g * (W / 4)) * p.ldb;
    for (i64 p0 = 0; p0 < p.k; p0 += kc) {
      const i64 p1 = std::min(p.k, p0 + kc);
      V acc[M][J];
      clear(acc);
      // A whole cache line (16 values of k) of each row at a time, so that each line is used
      // up while it is in L1: the rows of a group lie ldb apart and, for ldb a multiple of
      // 256 floats, crowd the same few sets of L1.
      // The same line of the next group's rows is asked for ahead of its use: a weight read
      // once per token comes from memory, and a group's rows are too many interleaved
      // streams for the hardware prefetchers to follow. (The last group has no next one.)
      const bool next = j + 2 * J * W <= p.n;
      const float* ahead = next ? p.b + (j + J * W) * p.ldb : p.b;
      i64 q = p0;
      for (; q + 16 <= p1; q += 16) {
        if (next)
#pragma GCC unroll 32
          for (int r = 0; r < J * W; ++r) __builtin_prefetch(ahead + r * p.ldb + q);
#pragma GCC unroll 8
        for (int jj = 0; jj < J; ++jj)
#pragma GCC unroll 4
          for (int c = 0; c < 16; c += 4) {
            V t[4];
            transposed_quad(row[jj], p.ldb, q + c, t);
            accumulate<M>(p, q + c, t, 4, acc, jj);
          }
      }
      for (; q < p1; q += 4) {  // the slice's last k % 16 values, then k % 4
        const int count = static_cast<int>(std::min<i64>(4, p1 - q));
#pragma GCC unroll 8
        for (int jj = 0; jj < J; ++jj) {
          V t[4];
          if (count == 4)
            transposed_quad(row[jj], p.ldb, q, t);
          else
            transposed_quad(row[jj], p.ldb, q, count, t);
          accumulate<M>(p, q, t, count, acc, jj);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i)
#pragma GCC unroll 8
        for (int jj = 0; jj < J; ++jj) acc[i][jj] = L::from_row_order(acc[i][jj]);
      finish_slice<M, J, false>(p, acc, j, Mask{}, p0 == 0);
    }
  }

  // trans_b T, the last `lines` (< W) rows of W: the same sums, the transposed values
  // gathered through a small array (rows past the matrix are never read).
  template <int M>
  static void nt_edge(const GemvMatrix& p, i64 j, int lines, i64 kc) {
    const float* w = p.b + j * p.ldb;
    alignas(64) float block[4][W];
    for (i64 p0 = 0; p0 < p.k; p0 += kc) {
      const i64 p1 = std::min(p.k, p0 + kc);
      V acc[M][1];
#pragma GCC unroll 8
      for (int i = 0; i < M; ++i) acc[i][0] = zero();
      for (i64 q = p0; q < p1; q += 4) {
        const int count = static_cast<int>(std::min<i64>(4, p1 - q));
        for (int s = 0; s < count; ++s)
          for (int r = 0; r < W; ++r) block[s][r] = r < lines ? w[r * p.ldb + q + s] : 0.0f;
        V t[4];
        for (int s = 0; s < 4; ++s) t[s] = s < count ? load(block[s]) : zero();
        accumulate<M>(p, q, t, count, acc, 0);
      }
      finish_slice<M, 1, true>(p, acc, j, first_lanes(lines), p0 == 0);
    }
  }

  // No products (k == 0 or alpha == 0): C = beta C, as the packed GEMM does.
  static void scale(const GemvMatrix& p, i64 j0, i64 j1) {
    for (i64 i = 0; i < p.m; ++i)
      for (i64 j = j0; j < j1; ++j) {
        float* at = p.c + i * p.ldc + j;
        *at = p.beta == 0.0f ? 0.0f : p.beta * *at;
      }
  }

  // The micro-kernel's epilogue on columns [j0, j1) of every row, tile by tile.
  static void epilogue(const SgemmMicroKernel& mk, const GemvMatrix& p, i64 j0, i64 j1) {
    for (i64 i = 0; i < p.m; i += mk.mr)
      for (i64 j = j0; j < j1; j += mk.nr)
        mk.epilogue(p.c + i * p.ldc + j, p.ldc, static_cast<int>(std::min<i64>(mk.mr, p.m - i)),
                    static_cast<int>(std::min<i64>(mk.nr, j1 - j)), p.bias == nullptr ? nullptr : p.bias + j,
                    p.act, p.aux == nullptr ? nullptr : p.aux + i * p.ldc + j);
  }

  template <int M>
  static void columns_of(const GemvMatrix& p, i64 j0, i64 j1) {
    constexpr int J = group<M>(), Jt = nt_group_width<M>();
    const SgemmMicroKernel& mk = L::micro_kernel();
    static const i64 kc = default_blocking(mk).kc;  // the packed GEMM's slices of k
    const bool products = p.k > 0 && p.alpha != 0.0f;
    const bool finish = p.bias != nullptr || p.act != Activation::None;
    for (i64 jb = j0; jb < j1; jb += block_columns<M>()) {
      const i64 je = std::min(j1, jb + block_columns<M>());
      i64 j = jb;
      if (!products) {
        scale(p, jb, je);
      } else if (p.trans_b == Trans::T) {
        for (; j + Jt * W <= je; j += Jt * W) nt_group<M, Jt>(p, j, kc);
        for (; j + W <= je; j += W) nt_group<M, 1>(p, j, kc);
        if (j < je) nt_edge<M>(p, j, static_cast<int>(je - j), kc);
      } else {
        for (; j + J * W <= je; j += J * W) nn_group<M, J, false>(p, j, Mask{}, kc);
        for (; j + W <= je; j += W) nn_group<M, 1, false>(p, j, Mask{}, kc);
        if (j < je) nn_group<M, 1, true>(p, j, first_lanes(je - j), kc);
      }
      if (finish) epilogue(mk, p, jb, je);
    }
  }

  using Columns = void (*)(const GemvMatrix&, i64, i64);
  template <int... Ms>
  static Columns pick(i64 m, std::integer_sequence<int, Ms...>) {
    static constexpr Columns by_rows[] = {&columns_of<Ms + 1>...};
    return by_rows[m - 1];
  }

  // SgemvKernel::columns: 1 <= p.m <= kGemvMaxRows.
  static void columns(const GemvMatrix& p, i64 j0, i64 j1) {
    pick(p.m, std::make_integer_sequence<int, static_cast<int>(kGemvMaxRows)>{})(p, j0, j1);
  }
};

}  // namespace
}  // namespace wedge::kernels::cpu
