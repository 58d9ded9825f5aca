// The small-m GEMM (kernels/cpu only): C = alpha op(A) op(B) + beta C for m <= 8 rows, the
// shape of every linear layer while a model generates one token at a time (batch 1).
//
// The packed GEMM (gemm.h) copies op(B) -- the weight -- into panels on every call: worth
// it when hundreds of rows of A reuse each panel, pure overhead for a matrix-vector
// product, which then reads the weight twice and writes a copy of it. Here nothing of B is
// copied: each element of B is read once, straight from the caller's memory, and used
// for all m rows of op(A) while it is in a register.
//
//   op(B) = B (trans_b N, B (k, n) row-major): a group of J vectors of columns of C stays
//     in registers while the rows of B stream past, each B vector multiplied by the m
//     broadcast values of op(A)[:, p].
//   op(B) = B^T (trans_b T, nn::Linear: W (n, k) row-major): the same, on the rows of W
//     transposed in registers: 4 values of k from each of W rows (one vector's worth of
//     columns of C) are loaded as quads and turned by in-register 4 x 4 transposes into 4
//     vectors of op(B) rows. Nothing is written back.
//
// Every output gets the packed GEMM's exact bits (gemv_impl.h says how): one FMA chain
// over k, in the packed GEMM's slices of kc, folded into C as its micro-kernel does, then
// its epilogue (SgemmMicroKernel::epilogue: bias, GELU with aux). So a row's result never
// depends on how many rows the call has, nor on which path ran it; and threads, which
// split the columns of C (over every matrix of the batch at once, in whole blocks of 16
// columns), cannot change it: the bits are the same for any thread count.
//
// op(A) is read in place when it is row-major (trans_a N); for trans_a T its m x k values,
// tiny beside B, are first copied row-major.
//
// Precision::BF16 where the AVX-512-BF16 micro-kernel runs has its own column kernel
// (gemv_avx512bf16.cpp, the same template with bf16 pairs): op(A) is rounded to bf16 and
// paired along k by the driver (m x k/2 values), each vector of B is rounded and paired in
// registers (vcvtne2ps2bf16, exactly as the packers round), and the products are summed by
// vdpbf16ps, one pair of k at a time in increasing order, in the micro-kernel's slices of
// kc = 768 values: the packed bf16 GEMM's bits, with the weights read once, in place. Where
// AMX tiles run the bf16 GEMM (tdpbf16ps, another order of additions), BF16 stays on the
// packed path.
//
// The kernel is written once (gemv_impl.h, a template over a vector width) and
// instantiated for AVX-512 (gemv_avx512.cpp) and AVX2 (gemv_avx2.cpp); gemv.cpp is the
// driver, plain C++.
#pragma once

#include "kernels/tables.h"

namespace wedge::kernels::cpu {

// The most rows (per matrix of the batch) the small-m path takes.
constexpr i64 kGemvMaxRows = 8;

// One matrix of the batch as the column kernels see it: op(A) row-major (row i at
// a + i * lda, k contiguous values), B as stored (trans_b T: W (n, k), row j at b + j * ldb;
// trans_b N: (k, n), row p at b + p * ldb).
struct GemvMatrix {
  i64 m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const float* a = nullptr;
  i64 lda = 0;
  const float* b = nullptr;
  i64 ldb = 0;
  Trans trans_b = Trans::N;
  float* c = nullptr;
  i64 ldc = 0;
  const float* bias = nullptr;  // the epilogue, as GemmArgs; bias indexed by column
  Activation act = Activation::None;
  float* aux = nullptr;
};

// One instruction set's column kernel: columns [j0, j1) of C for all m (1..kGemvMaxRows)
// rows of one matrix, alpha, beta and the epilogue included, with the bits of the packed
// GEMM on the micro-kernel of the same instruction set. j0 is a multiple of 16.
struct SgemvKernel {
  const char* name;
  void (*columns)(const GemvMatrix& p, i64 j0, i64 j1);
  // bf16 products (vdpbf16ps): op(A) comes as pairs along k, GemvMatrix::a holding m rows of
  // ceil(k / 2) 32-bit slots (bf16(A[i, 2s]) in the low half, bf16(A[i, 2s + 1]) in the high
  // half, 0 past k), lda counted in slots; sgemv makes them.
  bool bf16_pairs = false;
};

// Defined in gemv_avx512.cpp / gemv_avx2.cpp: call only where the CPU has the instruction set.
const SgemvKernel& sgemv_avx512_kernel();
const SgemvKernel& sgemv_avx2_kernel();
// AVX-512, else AVX2, else nullptr (gemv.cpp).
const SgemvKernel* best_sgemv_kernel();
// Defined in gemv_avx512bf16.cpp: the bf16 column kernel (vdpbf16ps), with the bits of
// bf16_avx512_microkernel(); call only where the CPU has AVX-512-BF16.
const SgemvKernel& sgemv_avx512bf16_kernel();

// Whether the small-m path can take this call: 1 <= m <= kGemvMaxRows (rows per matrix of
// the batch); any transposes, alpha, beta, batch, strides and epilogue. The fp32 kernels
// compute in fp32: sgemm_wedge gives them Precision::BF16 calls only when they run as fp32
// (bf16_path() Fp32), as the packed GEMM would, and the bf16 kernel those the AVX-512-BF16
// micro-kernel would run.
bool gemv_suits(const GemmArgs<float>& args);

// The whole GEMM `args` (m <= kGemvMaxRows; args.precision is not read: the kernel's
// arithmetic is) through `kernel`, on up to `threads` threads of the global pool (<= 0: all).
void sgemv(const SgemvKernel& kernel, const GemmArgs<float>& args, int threads = 0);

}  // namespace wedge::kernels::cpu
