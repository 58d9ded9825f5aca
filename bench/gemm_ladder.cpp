// The GEMM teaching ladder: from the textbook triple loop to wedge's packed AVX-512 GEMM,
// one idea per step, each checked against the reference kernel and timed as GFLOP/s and
// % of this machine's measured fp32 FMA peak.
//
//   build/bench/gemm_ladder [size]        (default 1024: C = A B, all size x size)
//   OPENBLAS_CORETYPE=SkylakeX build/bench/gemm_ladder   (for a fair last line)
//
// The steps (read them in order):
//   1. naive        C[i][j] = sum_p A[i][p] B[p][j]: B is walked down a column, one cache
//                   line per multiply-add, and nothing is vectorised.
//   2. loop order   i-p-j: the inner loop runs along rows of B and C, unit stride, so the
//                   compiler vectorises it. Every A element is used n times from a register.
//   3. blocked      the same loops over tiles sized for the caches, so a tile of B is
//                   reused from L2 by many rows of A instead of coming from memory each time.
//   4. packed       A and B tiles copied into contiguous k-major panels (the BLIS layout),
//                   and a portable micro-kernel that keeps an mr x nr tile of C in a local
//                   array. The compiler vectorises it but cannot keep 28 vectors in registers.
//   5. avx512       wedge's micro-kernel: the 14 x 32 tile held in 28 zmm registers, one
//                   broadcast + two FMAs per row per step of k (kernels/cpu/gemm_avx512.cpp),
//                   driven by the real packing/blocking code, on one thread.
//   6. threads      the same on all pool threads (threads split C's columns, share packed A).
//   7. openblas     cblas_sgemm on the same threads, for reference.
// Then mixed precision (Precision::BF16: operands rounded to bf16 while packing, fp32 sums),
// checked against the reference GEMM on the same rounded operands and timed against the
// measured peak of the instruction it uses:
//   8. avx512-bf16  the same 14 x 32 tile with vdpbf16ps: each instruction multiplies 16
//                   pairs of bf16 values, twice an FMA's work (kernels/cpu/gemm_avx512bf16.cpp);
//   9. + all threads
//  10. amx tiles    a 32 x 32 tile of C in four AMX tile registers, one tdpbf16ps per 16 x 16
//                   x 32 block (kernels/cpu/gemm_amx.cpp), where the CPU has AMX;
//  11. + all threads
// Steps 1-4 are compiled for AVX-512 when the CPU has it (AVX2 otherwise) and at -O3 (at
// the project's -O2, GCC 12 vectorises no loop whose trip count it does not know), so the
// gaps between steps come from the ideas, not from the instruction set or the flags.
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/tables.h"
#include "ladder.h"

using namespace wedge;
using namespace wedge::kernels;
using namespace wedge::ladder;

namespace {

// ---- steps 1-4: plain C++ --------------------------------------------------------------------
// Each body is compiled for AVX-512 and for AVX2 and picked by the CPU at run time
// (LADDER_FLOAT_LOOPS, ladder.h).

LADDER_INLINE void naive_body(int n, const float* a, const float* b, float* c) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      float sum = 0;
      for (int p = 0; p < n; ++p) sum += a[i * n + p] * b[p * n + j];
      c[i * n + j] = sum;
    }
  }
}

// __restrict: C never overlaps A or B. Without it the compiler must assume a store to
// c_row[j] may change b_row, and at -O2 it then leaves the loop scalar.
LADDER_INLINE void loop_order_body(int n, const float* __restrict a, const float* __restrict b,
                                   float* __restrict c) {
  for (int i = 0; i < n; ++i) {
    float* c_row = c + i * n;
    for (int j = 0; j < n; ++j) c_row[j] = 0;
    for (int p = 0; p < n; ++p) {
      const float a_ip = a[i * n + p];
      const float* b_row = b + p * n;
      for (int j = 0; j < n; ++j) c_row[j] += a_ip * b_row[j];
    }
  }
}

LADDER_INLINE void blocked_body(int n, const float* __restrict a, const float* __restrict b,
                                float* __restrict c) {
  constexpr int kMc = 64, kKc = 256, kNc = 512;  // B tile 256 x 512 floats = 512 KB, in L2
  for (int i = 0; i < n * n; ++i) c[i] = 0;
  for (int jc = 0; jc < n; jc += kNc) {
    const int j_end = std::min(n, jc + kNc);
    for (int pc = 0; pc < n; pc += kKc) {
      const int p_end = std::min(n, pc + kKc);
      for (int ic = 0; ic < n; ic += kMc) {
        const int i_end = std::min(n, ic + kMc);
        for (int i = ic; i < i_end; ++i) {
          float* c_row = c + i * n;
          for (int p = pc; p < p_end; ++p) {
            const float a_ip = a[i * n + p];
            const float* b_row = b + p * n;
            for (int j = jc; j < j_end; ++j) c_row[j] += a_ip * b_row[j];
          }
        }
      }
    }
  }
}

constexpr int kMr = 14, kNr = 32;

// The portable micro-kernel of step 4: the same tile shape as wedge's AVX-512 kernel.
LADDER_INLINE void portable_microkernel(int kc, const float* __restrict ap,
                                        const float* __restrict bp, float* __restrict c, int ldc,
                                        int m_valid, int n_valid, bool accumulate) {
  float acc[kMr][kNr] = {};
  for (int p = 0; p < kc; ++p) {
    for (int i = 0; i < kMr; ++i) {
      const float a = ap[p * kMr + i];
      for (int j = 0; j < kNr; ++j) acc[i][j] += a * bp[p * kNr + j];
    }
  }
  for (int i = 0; i < m_valid; ++i) {
    for (int j = 0; j < n_valid; ++j) {
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
    }
  }
}

LADDER_INLINE void packed_body(int n, const float* a, const float* b, float* c) {
  constexpr int kMc = 14 * 16, kKc = 256, kNc = 32 * 16;
  static std::vector<float> a_pack, b_pack;
  a_pack.resize(kMc * kKc);
  b_pack.resize(kNc * kKc);
  for (int jc = 0; jc < n; jc += kNc) {
    const int nc = std::min(kNc, n - jc);
    for (int pc = 0; pc < n; pc += kKc) {
      const int kc = std::min(kKc, n - pc);
      // B panels: kc x 32 columns, k-major, zero-padded past the edge.
      for (int jr = 0; jr < nc; jr += kNr) {
        float* panel = b_pack.data() + jr * kc;
        for (int p = 0; p < kc; ++p) {
          for (int j = 0; j < kNr; ++j) {
            panel[p * kNr + j] = jr + j < nc ? b[(pc + p) * n + jc + jr + j] : 0.0f;
          }
        }
      }
      for (int ic = 0; ic < n; ic += kMc) {
        const int mc = std::min(kMc, n - ic);
        // A panels: 14 rows x kc, k-major (a transpose of the row-major slice).
        for (int ir = 0; ir < mc; ir += kMr) {
          float* panel = a_pack.data() + ir * kc;
          for (int p = 0; p < kc; ++p) {
            for (int i = 0; i < kMr; ++i) {
              panel[p * kMr + i] = ir + i < mc ? a[(ic + ir + i) * n + pc + p] : 0.0f;
            }
          }
        }
        for (int ir = 0; ir < mc; ir += kMr) {
          for (int jr = 0; jr < nc; jr += kNr) {
            portable_microkernel(kc, a_pack.data() + ir * kc, b_pack.data() + jr * kc,
                                 c + (ic + ir) * n + jc + jr, n, std::min(kMr, mc - ir),
                                 std::min(kNr, nc - jr), pc > 0);
          }
        }
      }
    }
  }
}

#define LADDER_STEP(name) \
  LADDER_FLOAT_LOOPS(name, (int n, const float* a, const float* b, float* c), name##_body(n, a, b, c))
LADDER_STEP(naive)
LADDER_STEP(loop_order)
LADDER_STEP(blocked)
LADDER_STEP(packed)

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  if (n <= 0) {
    std::fprintf(stderr, "usage: gemm_ladder [size > 0]\n");
    return 1;
  }
  const bool avx512 = has_avx512();
  if (!has_float_loops("gemm_ladder")) return 1;
  const int threads = num_threads();
  const bool has_bf16 = cpu::has_avx512_bf16(), has_amx = cpu::amx_usable();
  const Ceiling fma = fma_peak();
  const Ceiling bf16 = has_bf16 ? Ceiling{measured_bf16_peak_gflops(1), measured_bf16_peak_gflops(threads)} : Ceiling{};
  const Ceiling amx = has_amx ? Ceiling{measured_amx_peak_gflops(1), measured_amx_peak_gflops(threads)} : Ceiling{};
  std::printf("C = A B, %d x %d x %d, fp32.  %s.  OpenBLAS core: %s\n", n, n, n, cpu_backend_name(),
              openblas_get_corename());
  fma.print("fp32 FMA peak", "GFLOP/s");
  if (has_bf16) bf16.print("bf16 vdpbf16ps peak", "GFLOP/s");
  if (has_amx)
    amx.print("AMX tdpbf16ps peak", "GFLOP/s");
  else
    std::printf("AMX: not on this CPU (or the tile state was refused); steps 10-11 skipped\n");
  std::printf("\n");

  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::size_t elems = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<float> a(elems), b(elems), want(elems), c(elems);
  for (float& x : a) x = dist(gen);
  for (float& x : b) x = dist(gen);

  GemmArgs<float> g;
  g.m = g.n = g.k = n;
  g.a = a.data();
  g.lda = n;
  g.b = b.data();
  g.ldb = n;
  g.c = want.data();
  g.ldc = n;
  ref_table_f32().gemm(g);  // the oracle (double accumulation)
  std::vector<float> want_bf16(elems);
  GemmArgs<float> g16 = g;
  g16.precision = Precision::BF16;
  g16.c = want_bf16.data();
  ref_table_f32().gemm(g16);  // the bf16 steps' oracle: the same sums of rounded operands
  g.c = c.data();
  g16.c = c.data();

  struct Step {
    const char* name;
    int threads;
    std::function<void()> run;
    const Ceiling* peak = nullptr;  // fp32 FMA unless given
  };
  auto plain = [&](void (*f)(int, const float*, const float*, float*)) {
    return [=, &a, &b, &c] { f(n, a.data(), b.data(), c.data()); };
  };
  const cpu::SgemmMicroKernel& mk =
      avx512 ? cpu::sgemm_avx512_microkernel() : cpu::sgemm_avx2_microkernel();
  const cpu::GemmBlocking blocking = cpu::default_blocking(mk);
  std::vector<Step> steps = {
      {"1 naive (i-j-p)", 1, plain(LADDER_PICK(naive))},
      {"2 loop order (i-p-j)", 1, plain(LADDER_PICK(loop_order))},
      {"3 cache-blocked", 1, plain(LADDER_PICK(blocked))},
      {"4 packed panels", 1, plain(LADDER_PICK(packed))},
      {avx512 ? "5 avx512 micro-kernel" : "5 avx2 micro-kernel", 1,
       [&] { cpu::sgemm_packed(mk, blocking, g, 1); }},
      {"6 + all threads", threads, [&] { cpu::sgemm_packed(mk, blocking, g, threads); }},
      {"7 openblas", threads, [&] { sgemm_openblas(g); }},
  };
  const cpu::SgemmMicroKernel& mk16 = cpu::bf16_avx512_microkernel();
  const cpu::GemmBlocking blocking16 = cpu::default_blocking(mk16);
  if (has_bf16) {
    steps.push_back({"8 avx512-bf16 kernel", 1, [&] { cpu::sgemm_packed(mk16, blocking16, g16, 1); }, &bf16});
    steps.push_back({"9 + all threads", threads, [&] { cpu::sgemm_packed(mk16, blocking16, g16, threads); }, &bf16});
  }
  if (has_amx) {
    const cpu::SgemmMicroKernel& amx_mk = cpu::bf16_amx_microkernel();
    steps.push_back(
        {"10 amx tiles", 1, [&] { cpu::sgemm_packed(amx_mk, cpu::default_blocking(amx_mk), g16, 1); }, &amx});
    steps.push_back({"11 + all threads", threads,
                     [&] { cpu::sgemm_packed(amx_mk, cpu::default_blocking(amx_mk), g16, threads); }, &amx});
  }

  Table table({"gemm"}, "GFLOP/s", "peak");
  table.header();
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  for (const Step& step : steps) {
    if (std::string(step.name).find("naive") != std::string::npos && n > 1024) {
      table.skipped(step.name, "skipped above 1024: minutes");
      continue;
    }
    std::fill(c.begin(), c.end(), std::nanf(""));
    Cell cell = timed(step.run, flops, step.peak ? *step.peak : fma, step.threads);
    // bf16 steps against the bf16 reference; relative to its largest element
    cell.error = max_error(c, step.peak == nullptr ? want : want_bf16);
    cell.ok = cell.error.rel < 1e-5;
    table.row(step.name, step.threads, {cell});
  }
  set_num_threads(threads);
  return table.all_ok() ? 0 : 1;
}
