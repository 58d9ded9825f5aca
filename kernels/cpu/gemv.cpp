// The small-m GEMM's driver (gemv.h): op(A) made row-major where it is not (and, for the
// bf16 kernel, rounded to bf16 and paired along k), the columns of every matrix of the
// batch dealt out to the threads, and one instruction set's column kernel (gemv_avx512.cpp,
// gemv_avx2.cpp, gemv_avx512bf16.cpp) on each share. Plain C++, no instruction set.
#include "kernels/cpu/gemv.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/ref/bf16.h"

namespace wedge::kernels::cpu {
namespace {

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

// Threads split C in whole units of this many columns (a multiple of both vector widths).
constexpr i64 kUnitColumns = 16;

// Units worth a thread of their own: at least 32 K elements of B (128 KB) per share, some
// microseconds of reading. On an idle 2-core machine handing work to a spinning pool thread
// costs about 1.5 us, and a layer's 1 MB matrix (d 256 x d_ff 1024) is read in ~35 us on two
// threads against ~60 us on one, so every matrix of the paper models but the smallest is
// shared. Where another process holds a core, its share waits for a time slice: there a
// decode step is faster on one thread (`--threads 1`).
i64 grain_units(i64 k) { return std::max<i64>(1, ceil_div(32768, kUnitColumns * std::max<i64>(k, 1))); }

thread_local ScratchBuffer t_rows;  // op(A) row-major (trans_a T), or in bf16 pairs

}  // namespace

const SgemvKernel* best_sgemv_kernel() {
  if (has_avx512()) return &sgemv_avx512_kernel();
  if (has_avx2()) return &sgemv_avx2_kernel();
  return nullptr;
}

bool gemv_suits(const GemmArgs<float>& args) { return args.m >= 1 && args.m <= kGemvMaxRows; }

void sgemv(const SgemvKernel& kernel, const GemmArgs<float>& args, int threads) {
  const i64 m = args.m, n = args.n, k = std::max<i64>(args.k, 0);
  if (m <= 0 || n <= 0 || args.batch <= 0) return;

  // op(A) row-major: in place (trans_a N), else copied on this thread -- m x k values per
  // matrix (one for all when stride_a is 0). The bf16 kernel takes it in pairs along k
  // instead: m x ceil(k / 2) slots per matrix, each two values rounded as the packers round.
  const bool pairs = k > 0 && kernel.bf16_pairs;
  const bool copy_a = k > 0 && (args.trans_a == Trans::T || pairs);
  const i64 a_matrices = args.stride_a == 0 ? 1 : args.batch;
  const i64 row_length = pairs ? (k + 1) / 2 : k;  // of one row of the copy, in floats
  float* rows = nullptr;
  if (copy_a) {
    rows = t_rows.get(static_cast<std::size_t>(a_matrices * m * row_length));
    for (i64 b = 0; b < a_matrices; ++b) {
      const float* a = args.a + b * args.stride_a;
      float* out = rows + b * m * row_length;
      auto at = [&](i64 i, i64 p) { return args.trans_a == Trans::T ? a[p * args.lda + i] : a[i * args.lda + p]; };
      if (pairs) {
        for (i64 i = 0; i < m; ++i)
          for (i64 s = 0; s < row_length; ++s) {
            const std::uint32_t lo = ref::float_to_bf16(at(i, 2 * s));
            const std::uint32_t hi = 2 * s + 1 < k ? ref::float_to_bf16(at(i, 2 * s + 1)) : 0u;
            out[i * row_length + s] = ref::float_from_bits(lo | hi << 16);
          }
      } else {
        for (i64 p = 0; p < k; ++p)
          for (i64 i = 0; i < m; ++i) out[i * k + p] = at(i, p);
      }
    }
  }

  auto matrix = [&](i64 b) {
    GemvMatrix p;
    p.m = m, p.n = n, p.k = k;
    p.alpha = args.alpha, p.beta = args.beta;
    if (copy_a) {
      p.a = rows + (args.stride_a == 0 ? 0 : b) * m * row_length;
      p.lda = row_length;
    } else {
      p.a = args.a + b * args.stride_a;
      p.lda = args.lda;
    }
    p.b = args.b + b * args.stride_b;
    p.ldb = args.ldb;
    p.trans_b = args.trans_b;
    p.c = args.c + b * args.stride_c;
    p.ldc = args.ldc;
    p.bias = args.bias;
    p.act = args.act;
    p.aux = args.aux == nullptr ? nullptr : args.aux + b * args.stride_c;
    return p;
  };

  int team = in_parallel_region() ? 1 : num_threads();
  if (threads > 0) team = std::min(team, threads);
  // The units of every matrix, one after the other, cut into contiguous chunks as
  // parallel_for cuts a range (at most `team`, each at least a grain). Matrices that share
  // C (stride_c 0) are done one after the other instead, each split alone.
  const i64 units = ceil_div(n, kUnitColumns);
  const i64 together = args.batch > 1 && args.stride_c == 0 ? 1 : args.batch;
  const i64 total = together * units;
  const int chunks = parallel_chunk_count(0, total, grain_units(k), team);
  for (i64 b0 = 0; b0 < args.batch; b0 += together) {
    auto run_units = [&](i64 u0, i64 u1) {
      while (u0 < u1) {
        const i64 b = u0 / units, first = u0 % units, last = std::min(units, first + (u1 - u0));
        kernel.columns(matrix(b0 + b), first * kUnitColumns, std::min(n, last * kUnitColumns));
        u0 += last - first;
      }
    };
    if (chunks <= 1) {
      run_units(0, total);
      continue;
    }
    parallel_team(chunks, [&](int index, int size) {
      // A smaller team than asked (the pool busy elsewhere) takes several chunks each; the
      // chunks stay the same.
      for (int c = index; c < chunks; c += size) run_units(total * c / chunks, total * (c + 1) / chunks);
    });
  }
}

}  // namespace wedge::kernels::cpu
