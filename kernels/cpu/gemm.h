// Internal interface of the packed GEMM (kernels/cpu only; ops never include this).
//
// The driver (gemm.cpp) is plain C++ and knows nothing of any instruction set: it cuts
// C into blocks, asks an ISA's packers to copy slices of A and B into contiguous panels,
// and calls that ISA's register-blocked micro-kernel on every (mr x nr) tile of C.
// gemm_avx512.cpp and gemm_avx2.cpp each provide one SgemmMicroKernel.
#pragma once

#include "kernels/tables.h"

namespace wedge::kernels::cpu {

// One instruction set's register tile and packers.
//
// Panels are arrays of 32-bit slots. An fp32 kernel keeps one k per slot; a bf16 kernel
// (k_per_slot 2) keeps the pair of bf16 values at k = 2s and 2s + 1 in slot s (the low
// half holds the even k: the VNNI pair layout that vdpbf16ps and AMX multiply), so a
// panel over kc values of k is depth = ceil(kc / k_per_slot) slots deep (rounded up to a
// multiple of depth_multiple) and an odd kc ends in a slot whose high half is zero. The
// descriptions below count in slots. The layout inside a panel is the packers' and the
// kernel's business (the AMX kernel keeps A row-major in blocks of 16 slots); these are
// the k-major layouts of the fp32 and AVX-512-BF16 kernels:
//   A panel: op(A) rows [i, i+mr) x columns [p0, p0+kc), stored k-major: panel[p*mr + r],
//            rows beyond the matrix are zero (so edge tiles compute on zeros).
//   B panel: op(B) rows [p0, p0+kc) x columns [j, j+nr), stored k-major: panel[p*nr + c],
//            columns beyond the matrix are zero.
// A packer fills a run of consecutive panels (panel q at out + q*mr*kc, resp. q*nr*kc):
// when the source is k-major it can then read each of its rows once, front to back.
// The micro-kernel computes the full mr x nr product of one A panel and one B panel and
// writes only its valid m_valid x n_valid corner:
//   C = alpha * (Ap Bp) + beta * C,   C not read when beta == 0.
struct SgemmMicroKernel {
  const char* name;
  int mr, nr;
  // k values per panel slot: 1 (fp32 panels) or 2 (bf16 pairs).
  int k_per_slot;
  // Panels are a whole number of this many slots deep (the packers zero the slots past the
  // data): 1, or 16 for AMX, whose kernel multiplies whole tiles of 16 slots.
  int depth_multiple;
  // `depth` slots of each panel (the A panel as float slots, read as the kernel's type).
  void (*kernel)(i64 depth, const float* ap, const float* bp, float* c, i64 ldc, int m_valid,
                 int n_valid, float alpha, float beta);
  // Packs rows [0, rows) of op(A) into ceil(rows / mr) panels (kc and next_kc count k
  // values; each panel is panel_depth(kc) slots deep). Element (r, p) of op(A)
  // is a[r * row_stride + p * col_stride]; exactly one of the strides is 1 (A
  // untransposed: col_stride 1; transposed: row_stride 1). next_kc is the depth of the
  // next k slice of the same rows (0 if none): the packer may prefetch it into L2, so that
  // packing the next slice reads from cache instead of memory.
  void (*pack_a)(const float* a, i64 row_stride, i64 col_stride, i64 rows, i64 kc, i64 next_kc,
                 float* out);
  // Packs columns [0, cols) of op(B) into ceil(cols / nr) panels. Element (p, c) of op(B)
  // is b[p * row_stride + c * col_stride]; one stride is 1.
  void (*pack_b)(const float* b, i64 row_stride, i64 col_stride, i64 kc, i64 next_kc, i64 cols,
                 float* out);
  // The GEMM epilogue (kernels.h) on one finished m_valid x n_valid tile while it is still
  // in L1: c += bias[j] (bias may be null); under GELU aux = c, c = gelu(c). bias points
  // at the tile's first column, aux at the tile's origin (aux shares C's ldc).
  void (*epilogue)(float* c, i64 ldc, int m_valid, int n_valid, const float* bias,
                   Activation act, float* aux);
};

// Packers reading a source whose rows are far apart (often 4 KiB, where the hardware
// prefetchers stop at the page's end), each row once front to back, ask for the row
// kRowsAhead further on beside each piece they copy: prefetch_piece brings the floats
// [at, at + width) of that row (clipped to its `count` floats) into L2, a line per 16
// floats, and for the last piece also the row's end, so every line is asked for once the
// pieces are contiguous. Where the rows read lie back to back (stride == count) the
// source is one run that the hardware prefetchers follow: rows_ahead gives null then.
constexpr i64 kRowsAhead = 4;
inline const float* rows_ahead(const float* row, i64 stride, i64 count, i64 row_index, i64 rows) {
  return stride > count && row_index + kRowsAhead < rows ? row + kRowsAhead * stride : nullptr;
}
inline void prefetch_piece(const float* row, i64 at, i64 width, i64 count, bool last) {
  for (i64 j = at; j < at + width && j < count; j += 16) __builtin_prefetch(row + j, 0, 2);
  if (last) __builtin_prefetch(row + count - 1, 0, 2);
}

// Slots of one panel over kc values of k.
inline i64 panel_depth(const SgemmMicroKernel& mk, i64 kc) {
  const i64 slots = (kc + mk.k_per_slot - 1) / mk.k_per_slot;
  return (slots + mk.depth_multiple - 1) / mk.depth_multiple * mk.depth_multiple;
}

// A portable epilogue (scalar loops), for micro-kernels without a vector one.
void tile_epilogue_scalar(float* c, i64 ldc, int m_valid, int n_valid, const float* bias,
                          Activation act, float* aux);

// Cache blocking: kc columns of A / rows of B per pass (the panels' depth), mc rows of A
// packed together and shared by the threads, nc columns of B packed per thread (sized to
// stay in that core's L2).
struct GemmBlocking {
  i64 mc = 3072, kc = 384, nc = 480;
  // Where the blocking would pack all of op(B) more than once in one call (once per thread
  // when threads split the rows, once per block of mc rows), pack it once up front, the
  // threads sharing the work, and read the panels in place. The same panels feed the same
  // kernel calls, so the bits do not change; off only to measure or test the difference.
  bool pack_b_once = true;
};

// Defined in gemm_avx512.cpp / gemm_avx2.cpp (compiled with their ISA flags). Call only
// when the CPU supports the instruction set.
const SgemmMicroKernel& sgemm_avx512_microkernel();
const SgemmMicroKernel& sgemm_avx2_microkernel();
// The fp32 micro-kernel sgemm_wedge runs on this CPU (AVX-512, else AVX2), or nullptr
// without AVX2 (gemm_backend.cpp).
const SgemmMicroKernel* best_sgemm_microkernel();
// The bf16 micro-kernel (Precision::BF16; fp32 operands rounded to bf16 while packing), in
// gemm_avx512bf16.cpp: call only when the CPU has AVX-512-BF16.
const SgemmMicroKernel& bf16_avx512_microkernel();
// The AMX bf16 micro-kernel (gemm_amx.cpp): call only when amx_usable(). Its twin on
// emulated tiles runs the same kernel code on a plain C++ model of the tile instructions
// (any CPU with AVX-512-BF16; slow, for tests).
const SgemmMicroKernel& bf16_amx_microkernel();
const SgemmMicroKernel& bf16_amx_emulated_microkernel();
// True when the CPU has AMX-TILE, AMX-BF16 and AVX-512-BF16 and Linux granted this process
// the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool amx_usable();

// How many times a GEMM has packed all of op(B) up front (GemmBlocking::pack_b_once), in
// this process: for tests and benchmarks to see that the path ran.
i64 whole_b_packings();
// How many times a GEMM has packed op(B) in this process, all of it up front or one block
// of it (once per block per thread): a call that adds nothing here did not pack B (the
// small-m path of gemv.h never does).
i64 b_packings();

// Blocking tuned for a micro-kernel (measured; see README.md).
GemmBlocking default_blocking(const SgemmMicroKernel& mk);

// The packed, cache-blocked, threaded driver: batched, all transpose cases, alpha/beta as
// in kernels.h. Uses up to `threads` threads of the global pool (<= 0: all of them).
void sgemm_packed(const SgemmMicroKernel& mk, const GemmBlocking& blocking,
                  const GemmArgs<float>& args, int threads = 0);

}  // namespace wedge::kernels::cpu
