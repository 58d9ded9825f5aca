// GEMM backend selection: wedge's packed GEMM (per instruction set) or OpenBLAS.
#include <cblas.h>
#include <cpuid.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/ref.h"

namespace wedge::kernels {

// ---- CPU detection ------------------------------------------------------------------------

namespace cpu {

namespace {
// The environment variable WEDGE_CPU_ISA=avx512|avx2|scalar caps the instruction set the
// kernels use (read once; unset or "native": all the CPU has), so a machine with AVX-512
// runs, and times, the tables an AVX2-only or an older CPU would run. 2: AVX-512 (and the
// bf16 and AMX paths), 1: AVX2, 0: none.
int isa_cap() {
  static const int cap = [] {
    const char* v = std::getenv("WEDGE_CPU_ISA");
    if (v == nullptr || *v == '\0' || strcasecmp(v, "native") == 0 || strcasecmp(v, "avx512") == 0) return 2;
    if (strcasecmp(v, "avx2") == 0) return 1;
    if (strcasecmp(v, "scalar") == 0) return 0;
    std::fprintf(stderr, "wedge: WEDGE_CPU_ISA=%s ignored (expected avx512, avx2, scalar or native)\n", v);
    return 2;
  }();
  return cap;
}
}  // namespace

bool has_avx512() {
  // The *_avx512.cpp files are compiled with F, BW, DQ and VL: require all four.
  static const bool yes = isa_cap() >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma");
  return yes;
}

bool has_avx2() {
  static const bool yes = isa_cap() >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

// From cpuid directly: not every compiler's __builtin_cpu_supports knows these features.
namespace {
bool cpuid_leaf7_bit(unsigned subleaf, int reg, unsigned bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (__get_cpuid_count(7, subleaf, &r[0], &r[1], &r[2], &r[3]) == 0) return false;
  return ((r[reg] >> bit) & 1u) != 0;
}
}  // namespace

bool has_avx512_bf16() {
  static const bool yes = has_avx512() && cpuid_leaf7_bit(1, 0, 5);  // leaf 7.1 EAX bit 5
  return yes;
}

bool cpu_reports_amx_bf16() {
  // leaf 7.0 EDX: AMX-BF16, AMX-TILE
  static const bool yes = isa_cap() >= 2 && cpuid_leaf7_bit(0, 3, 22) && cpuid_leaf7_bit(0, 3, 24);
  return yes;
}

// The micro-kernel wedge's GEMM uses on this CPU, or nullptr without AVX2.
const SgemmMicroKernel* best_sgemm_microkernel() {
  if (has_avx512()) return &sgemm_avx512_microkernel();
  if (has_avx2()) return &sgemm_avx2_microkernel();
  return nullptr;
}

}  // namespace cpu

const char* cpu_isa_name() {
  if (cpu::has_avx512()) return "avx512";
  if (cpu::has_avx2()) return "avx2";
  return "scalar";
}

// ---- OpenBLAS ------------------------------------------------------------------------------

namespace {

// OpenBLAS keeps its own thread pool; keep its size equal to wedge's.
void sync_openblas_threads() {
  static std::atomic<int> applied{0};
  const int want = in_parallel_region() ? 1 : num_threads();
  if (applied.load(std::memory_order_relaxed) != want) {
    openblas_set_num_threads(want);
    applied.store(want, std::memory_order_relaxed);
  }
}

template <typename T>
void scale_matrix(T* c, i64 ldc, i64 m, i64 n, T beta) {
  for (i64 i = 0; i < m; ++i) {
    for (i64 j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  }
}

// cblas rejects (with a message and no work) leading dimensions smaller than the row
// length even when there is a single row and the leading dimension is never used.
i64 usable_ld(i64 ld, i64 row_length, i64 rows) {
  return rows <= 1 ? std::max({ld, row_length, i64{1}}) : ld;
}

template <typename T, typename Call>
void blas_gemm(const GemmArgs<T>& g, Call call) {
  if (g.m <= 0 || g.n <= 0) return;
  if (g.k <= 0) {  // C = beta C; cblas would want lda >= 1 on an empty operand
    for (i64 b = 0; b < g.batch; ++b) scale_matrix(g.c + b * g.stride_c, g.ldc, g.m, g.n, g.beta);
    ref::gemm_epilogue(g);
    return;
  }
  sync_openblas_threads();
  const bool ta = g.trans_a == Trans::T, tb = g.trans_b == Trans::T;
  const i64 lda = ta ? usable_ld(g.lda, g.m, g.k) : usable_ld(g.lda, g.k, g.m);
  const i64 ldb = tb ? usable_ld(g.ldb, g.k, g.n) : usable_ld(g.ldb, g.n, g.k);
  const i64 ldc = usable_ld(g.ldc, g.n, g.m);
  for (i64 b = 0; b < g.batch; ++b) {
    call(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(g.m),
         static_cast<int>(g.n), static_cast<int>(g.k), g.alpha, g.a + b * g.stride_a,
         static_cast<int>(lda), g.b + b * g.stride_b, static_cast<int>(ldb), g.beta,
         g.c + b * g.stride_c, static_cast<int>(ldc));
  }
  ref::gemm_epilogue(g);  // OpenBLAS has no epilogue: one more pass over C
}

}  // namespace

namespace {

// The float epilogue after OpenBLAS: the micro-kernel's vector epilogue, tile by tile,
// threaded over rows (the reference pass would dominate a GELU layer's time).
void sgemm_epilogue_pass(const GemmArgs<float>& g) {
  const cpu::SgemmMicroKernel* mk = cpu::best_sgemm_microkernel();
  if (mk == nullptr) {
    ref::gemm_epilogue(g);
    return;
  }
  for (i64 b = 0; b < g.batch; ++b) {
    float* c = g.c + b * g.stride_c;
    float* aux = g.aux == nullptr ? nullptr : g.aux + b * g.stride_c;
    parallel_for(0, g.m, 64, [&](i64 r0, i64 r1) {
      for (i64 i = r0; i < r1; i += mk->mr) {
        const int rows = static_cast<int>(std::min<i64>(mk->mr, r1 - i));
        for (i64 j = 0; j < g.n; j += mk->nr) {
          mk->epilogue(c + i * g.ldc + j, g.ldc, rows, static_cast<int>(std::min<i64>(mk->nr, g.n - j)),
                       g.bias == nullptr ? nullptr : g.bias + j, g.act,
                       aux == nullptr ? nullptr : aux + i * g.ldc + j);
        }
      }
    });
  }
}

// One row of C (m == 1) through cblas_sgemv, whose BLAS reads op(B) in place where its
// sgemm would pack it: C row = alpha op(B)^T x + beta C row, x the one row of op(A).
void sgemv_openblas(const GemmArgs<float>& g) {
  sync_openblas_threads();
  const bool tb = g.trans_b == Trans::T;
  // trans_b T: B is the (n x k) matrix of the product; N: B (k x n), transposed.
  const i64 rows = tb ? g.n : g.k, cols = tb ? g.k : g.n;
  const int ldb = static_cast<int>(usable_ld(g.ldb, cols, rows));
  const int incx = static_cast<int>(g.trans_a == Trans::N ? 1 : std::max<i64>(g.lda, 1));
  for (i64 b = 0; b < g.batch; ++b) {
    float* c = g.c + b * g.stride_c;
    // beta == 0 must not read C (it may hold NaNs); not every BLAS's gemv promises that.
    if (g.beta == 0.0f) std::memset(c, 0, static_cast<std::size_t>(g.n) * sizeof(float));
    cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, static_cast<int>(rows), static_cast<int>(cols),
                g.alpha, g.b + b * g.stride_b, ldb, g.a + b * g.stride_a, incx, g.beta, c, 1);
  }
}

}  // namespace

void sgemm_openblas(const GemmArgs<float>& args) {
  GemmArgs<float> g = args;
  g.bias = nullptr;
  g.act = Activation::None;
  if (g.m == 1 && g.n > 0 && g.k > 0 && g.batch > 0) {
    sgemv_openblas(g);
    if (args.has_epilogue()) sgemm_epilogue_pass(args);
    return;
  }
  blas_gemm(g, [](CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  });
  if (args.has_epilogue()) sgemm_epilogue_pass(args);
}

void dgemm_openblas(const GemmArgs<double>& g) {
  blas_gemm(
      g, [](CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
            const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      });
}

// ---- wedge -----------------------------------------------------------------------------------

void sgemm_wedge(const GemmArgs<float>& args, int threads) {
  // A few rows (token-by-token generation): the matrix-vector kernels, which read B once, in
  // place, and give the packed GEMM's bits (gemv.h): fp32, or bf16 where the AVX-512-BF16
  // micro-kernel would run. A BF16 GEMM on AMX tiles stays on the packed path.
  if (cpu::gemv_suits(args)) {
    const Bf16Path path = args.precision == Precision::BF16 ? bf16_path() : Bf16Path::Fp32;
    const cpu::SgemvKernel* gemv = path == Bf16Path::Fp32         ? cpu::best_sgemv_kernel()
                                   : path == Bf16Path::Avx512Bf16 ? &cpu::sgemv_avx512bf16_kernel()
                                                                  : nullptr;
    if (gemv != nullptr) {
      cpu::sgemv(*gemv, args, threads);
      return;
    }
  }
  if (args.precision == Precision::BF16) {
    const Bf16Path path = bf16_path();
    if (path != Bf16Path::Fp32) {
      const cpu::SgemmMicroKernel& mk =
          path == Bf16Path::Amx ? cpu::bf16_amx_microkernel() : cpu::bf16_avx512_microkernel();
      cpu::sgemm_packed(mk, cpu::default_blocking(mk), args, threads);
      return;
    }
    GemmArgs<float> fp32 = args;
    fp32.precision = Precision::F32;
    sgemm_wedge(fp32, threads);
    return;
  }
  if (const cpu::SgemmMicroKernel* mk = cpu::best_sgemm_microkernel()) {
    static const cpu::GemmBlocking blocking = cpu::default_blocking(*mk);
    cpu::sgemm_packed(*mk, blocking, args, threads);
  } else {
    ref_table_f32().gemm(args);
  }
}

// ---- the switch ------------------------------------------------------------------------------

GemmBackend parse_gemm_backend(const char* name) {
  if (name && strcasecmp(name, "wedge") == 0) return GemmBackend::Wedge;
  if (name && strcasecmp(name, "openblas") == 0) return GemmBackend::OpenBLAS;
  throw std::invalid_argument(std::string("unknown GEMM backend '") + (name ? name : "") +
                              "' (expected wedge or openblas)");
}

namespace {

GemmBackend initial_backend() {
  if (const char* env = std::getenv("WEDGE_GEMM"); env && *env) {
    try {
      return parse_gemm_backend(env);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "wedge: WEDGE_GEMM: %s; using the default\n", e.what());
    }
  }
  return cpu::best_sgemm_microkernel() ? GemmBackend::Wedge : GemmBackend::OpenBLAS;
}

std::atomic<GemmBackend>& backend_state() {
  static std::atomic<GemmBackend> state{initial_backend()};
  return state;
}

}  // namespace

void set_gemm_backend(GemmBackend backend) { backend_state().store(backend); }
GemmBackend gemm_backend() { return backend_state().load(std::memory_order_relaxed); }

// ---- the bf16 path ----------------------------------------------------------------------------

Bf16Path parse_bf16_path(const char* name) {
  if (name && strcasecmp(name, "amx") == 0) return Bf16Path::Amx;
  if (name && strcasecmp(name, "avx512-bf16") == 0) return Bf16Path::Avx512Bf16;
  if (name && strcasecmp(name, "fp32") == 0) return Bf16Path::Fp32;
  throw std::invalid_argument(std::string("unknown bf16 GEMM path '") + (name ? name : "") +
                              "' (expected amx, avx512-bf16 or fp32)");
}

const char* bf16_path_name(Bf16Path path) {
  return path == Bf16Path::Amx ? "amx" : path == Bf16Path::Avx512Bf16 ? "avx512-bf16" : "fp32";
}

namespace {

// The best path at or below `wanted` that this CPU can run.
Bf16Path runnable(Bf16Path wanted) {
  if (wanted == Bf16Path::Amx && cpu::amx_usable()) return Bf16Path::Amx;
  if (wanted != Bf16Path::Fp32 && cpu::has_avx512_bf16()) return Bf16Path::Avx512Bf16;
  return Bf16Path::Fp32;
}

Bf16Path initial_bf16_path() {
  if (const char* env = std::getenv("WEDGE_BF16_GEMM"); env && *env) {
    try {
      return runnable(parse_bf16_path(env));
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "wedge: WEDGE_BF16_GEMM: %s; using the default\n", e.what());
    }
  }
  return runnable(Bf16Path::Amx);
}

std::atomic<Bf16Path>& bf16_state() {
  static std::atomic<Bf16Path> state{initial_bf16_path()};
  return state;
}

}  // namespace

void set_bf16_path(Bf16Path path) { bf16_state().store(runnable(path)); }
Bf16Path bf16_path() { return bf16_state().load(std::memory_order_relaxed); }

const char* bf16_gemm_description() {
  if (bf16_path() == Bf16Path::Amx) return "amx-bf16 32x32 (tdpbf16ps)";
  if (bf16_path() == Bf16Path::Avx512Bf16) {
    return cpu::cpu_reports_amx_bf16()
               ? "avx512-bf16 14x32 (vdpbf16ps; AMX present but not used)"
               : "avx512-bf16 14x32 (vdpbf16ps)";
  }
  return cpu::has_avx512_bf16() ? "fp32 (bf16 instructions turned off)" : "fp32 (this CPU has no bf16 instructions)";
}

namespace cpu {

void sgemm_selected(const GemmArgs<float>& args) {
  if (gemm_backend() == GemmBackend::OpenBLAS && args.precision == Precision::F32)
    sgemm_openblas(args);
  else
    sgemm_wedge(args);
}

const char* gemm_description(GemmBackend backend) {
  static const std::string wedge_name = [] {
    const SgemmMicroKernel* mk = best_sgemm_microkernel();
    return std::string("wedge gemm (") + (mk ? mk->name : "reference loops") + ")";
  }();
  return backend == GemmBackend::OpenBLAS ? "openblas gemm" : wedge_name.c_str();
}

}  // namespace cpu
}  // namespace wedge::kernels
