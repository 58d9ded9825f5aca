// wedge's packed GEMM against OpenBLAS on the shapes the paper models run, side by side
// in one run, as GFLOP/s and % of this machine's measured fp32 FMA peak; and wedge's bf16
// GEMM (Precision::BF16: operands rounded to bf16, fp32 accumulation) on the same shapes,
// as % of the measured vdpbf16ps peak, where the CPU has AVX-512-BF16. One more row shows
// what packing all of B once per call saves: wedge's fp32 GEMM with B packed block by
// block instead (GemmBlocking::pack_b_once off), as every call did before.
//
// Run it with OpenBLAS forced onto its AVX-512 kernels:
//
//   OPENBLAS_CORETYPE=SkylakeX build/bench/bench_gemm
//
// Debian's OpenBLAS 0.3.21 does not recognise recent Xeons (e.g. family 6 model 207) and
// otherwise falls back to its SSE3 "Prescott" kernels, 4-5x slower: a comparison without
// the variable set is against the wrong OpenBLAS. The program prints the core OpenBLAS
// picked. Threads: WEDGE_NUM_THREADS (default: all cores) for both libraries.
//
// Shapes (M x N x K, row-major, "NT" = A as stored, B transposed):
//   4096 x  1024 x  256   feed-forward up-projection (tokens x d_ff x d), and NN/TN
//   4096 x   256 x 1024   feed-forward down-projection
//   4096 x 30522 x  256   the vocabulary projection (logits)
//    256 x   256 x 4096   a weight gradient over all tokens (TN)
//    128 x   128 x   64   attention scores per head, batched over 128 heads (and P V)
// After the benchmarks a table lists the GFLOP/s per shape and the ratios.
//
// And token-by-token generation (batch 1, one row of A; run first): y = x W^T for the LM head
// (W 30,522 x 256) and the layers' weights (768 x 256, 1024 x 256, 256 x 1024), on
// sgemm_wedge's small-m path (kernels/cpu/gemv.h: W read once, in place), on the packed
// GEMM it used before (W packed on every call), on OpenBLAS (cblas_sgemv), and, where the
// CPU has AVX-512-BF16, in Precision::BF16 on the bf16 small-m kernel (W rounded in
// registers as it is read); a second table gives microseconds per call and the GB/s of W
// read (fp32 bytes: W is stored in fp32 either way). Calls this short (microseconds,
// two threads joining after each) suffer badly from anything else on the cores, so each runs
// 7 repetitions and the table takes the fastest (the console's "min" row: its time, but the
// smallest of the rate counters). `--benchmark_filter=decode` runs only these.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"

using namespace wedge;
using namespace wedge::kernels;

namespace {

// The measured fp32 peak of the whole pool (kernels/cpu/peak.cpp).
double measure_peak_gflops() { return measured_fma_peak_gflops(0); }

double g_peak_gflops = 0;
double g_bf16_peak_gflops = 0;  // 0: no AVX-512-BF16

enum class Library { Wedge, WedgePerBlock, WedgeBf16, OpenBLAS, WedgePacked };
const char* library_name(Library l) {
  switch (l) {
    case Library::Wedge: return "wedge";
    case Library::WedgePacked: return "wedge-packed";
    case Library::WedgePerBlock: return "wedge-b-per-block";
    case Library::WedgeBf16: return "wedge-bf16";
    case Library::OpenBLAS: return "openblas";
  }
  return "?";
}

// wedge's fp32 GEMM as sgemm_wedge runs it, but packing B block by block (the call
// before B was packed once per call).
void sgemm_b_per_block(const GemmArgs<float>& g) {
  const cpu::SgemmMicroKernel& mk = *cpu::best_sgemm_microkernel();
  static const cpu::GemmBlocking blocking = [&] {
    cpu::GemmBlocking b = cpu::default_blocking(mk);
    b.pack_b_once = false;
    return b;
  }();
  cpu::sgemm_packed(mk, blocking, g);
}

// wedge's packed GEMM whatever the shape (sgemm_wedge gives a few rows to gemv.h instead).
void sgemm_always_packed(const GemmArgs<float>& g) {
  const cpu::SgemmMicroKernel& mk = *cpu::best_sgemm_microkernel();
  static const cpu::GemmBlocking blocking = cpu::default_blocking(mk);
  cpu::sgemm_packed(mk, blocking, g);
}

void call(Library library, const GemmArgs<float>& g) {
  if (library == Library::OpenBLAS)
    sgemm_openblas(g);
  else if (library == Library::WedgePerBlock)
    sgemm_b_per_block(g);
  else if (library == Library::WedgePacked)
    sgemm_always_packed(g);
  else
    sgemm_wedge(g);
}

// ---- the shapes ---------------------------------------------------------------------------

struct Shape {
  const char* label;
  i64 m, n, k;
  Trans ta, tb;
  i64 batch;
};

const Shape kShapes[] = {
    {"ffn_up NT", 4096, 1024, 256, Trans::N, Trans::T, 1},
    {"ffn_up NN", 4096, 1024, 256, Trans::N, Trans::N, 1},
    {"ffn_up TN", 4096, 1024, 256, Trans::T, Trans::N, 1},
    {"ffn_down NT", 4096, 256, 1024, Trans::N, Trans::T, 1},
    {"ffn_down NN", 4096, 256, 1024, Trans::N, Trans::N, 1},
    {"logits NT", 4096, 30522, 256, Trans::N, Trans::T, 1},
    {"logits NN", 4096, 30522, 256, Trans::N, Trans::N, 1},
    {"wgrad TN", 256, 256, 4096, Trans::T, Trans::N, 1},
    {"ffn_wgrad TN", 1024, 256, 4096, Trans::T, Trans::N, 1},
    {"head_wgrad TN", 30522, 256, 512, Trans::T, Trans::N, 1},
    {"wgrad NT", 256, 256, 4096, Trans::N, Trans::T, 1},
    {"attn QK^T x128", 128, 128, 64, Trans::N, Trans::T, 128},
    {"attn PV x128", 128, 64, 128, Trans::N, Trans::N, 128},
};

// Generation, one token: x (1, k) times W^T, W (n, k) as nn::Linear stores it; and one NN.
const Shape kDecodeShapes[] = {
    {"decode head NT", 1, 30522, 256, Trans::N, Trans::T, 1},
    {"decode qkv NT", 1, 768, 256, Trans::N, Trans::T, 1},
    {"decode ffn_up NT", 1, 1024, 256, Trans::N, Trans::T, 1},
    {"decode ffn_down NT", 1, 256, 1024, Trans::N, Trans::T, 1},
    {"decode ffn_up NN", 1, 1024, 256, Trans::N, Trans::N, 1},
    {"decode head x4 NT", 4, 30522, 256, Trans::N, Trans::T, 1},
};

// Operands live as long as the program: the logits shape alone needs 0.5 GB of C, which
// would otherwise be page-faulted in again for every benchmark.
struct Operands {
  std::vector<float> a, b, c;
};
Operands& operands_for(const Shape& s) {
  static std::map<std::string, Operands> cache;
  const std::string key = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                          std::to_string(s.k) + "b" + std::to_string(s.batch);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() > 1) cache.clear();  // keep memory bounded: shapes are run in order
  Operands& ops = cache[key];
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  ops.a.resize(static_cast<std::size_t>(s.batch * s.m * s.k));
  ops.b.resize(static_cast<std::size_t>(s.batch * s.k * s.n));
  ops.c.assign(static_cast<std::size_t>(s.batch * s.m * s.n), 0.0f);
  for (float& x : ops.a) x = dist(gen);
  for (float& x : ops.b) x = dist(gen);
  return ops;
}

GemmArgs<float> args_for(const Shape& s, Operands& ops) {
  GemmArgs<float> g;
  g.trans_a = s.ta;
  g.trans_b = s.tb;
  g.m = s.m;
  g.n = s.n;
  g.k = s.k;
  g.alpha = 1.0f;
  g.beta = 0.0f;
  g.a = ops.a.data();
  g.lda = s.ta == Trans::N ? s.k : s.m;
  g.stride_a = s.m * s.k;
  g.b = ops.b.data();
  g.ldb = s.tb == Trans::N ? s.n : s.k;
  g.stride_b = s.k * s.n;
  g.c = ops.c.data();
  g.ldc = s.n;
  g.stride_c = s.m * s.n;
  g.batch = s.batch;
  return g;
}

std::map<std::string, std::map<std::string, double>> g_results;  // shape -> library -> GFLOP/s
std::map<std::string, std::map<std::string, double>> g_decode;   // shape -> library -> seconds per call

void run_gemm(benchmark::State& state, const Shape& shape, Library library) {
  Operands& ops = operands_for(shape);
  GemmArgs<float> g = args_for(shape, ops);
  if (library == Library::WedgeBf16) g.precision = Precision::BF16;
  // OpenBLAS's threads keep spinning for a while after each call, and on a machine with
  // few cores they would steal time from whatever runs next: let them go idle first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  call(library, g);  // warm: buffers, threads, pages
  for (auto _ : state) {
    call(library, g);
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(shape.m * shape.n * shape.k * shape.batch);
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (shape.m <= 8) {  // a decode shape: the bytes of B read per call, per second
    const double bytes = 4.0 * static_cast<double>(shape.n * shape.k * shape.batch);
    state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  }
  state.SetLabel(std::string(library_name(library)) + " " + std::to_string(num_threads()) + "t");
}

// Remembers each rate for the closing side-by-side table, which gives the shares of the
// peaks (measured once more after the runs: see main).
class RateReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      const auto it = run.counters.find("GFLOPS");
      if (it == run.counters.end() || run.error_occurred) continue;
      const double rate = it->second.value;  // already divided by the time
      const std::string name = run.benchmark_name();
      const auto slash = name.find('/');
      const std::string shape = name.substr(slash + 1, name.find('/', slash + 1) - slash - 1);
      if (shape.rfind("decode", 0) != 0) {
        g_results[shape][name.substr(0, slash)] = rate;
      } else if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "min") {
        g_decode[shape][name.substr(0, slash)] = run.real_accumulated_time / static_cast<double>(run.iterations);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS core: %s (OPENBLAS_CORETYPE=%s)%s\n", openblas_get_corename(),
              coretype ? coretype : "unset",
              coretype ? "" : "  <-- set OPENBLAS_CORETYPE=SkylakeX for a fair comparison");
  std::printf("wedge: %s, %d threads\n", cpu_backend_name(), num_threads());
  g_peak_gflops = measure_peak_gflops();
  std::printf("measured fp32 FMA peak: %.1f GFLOP/s on %d threads\n", g_peak_gflops, num_threads());
  std::vector<Library> libraries = {Library::Wedge, Library::OpenBLAS};
  if (cpu::best_sgemm_microkernel()) libraries.insert(libraries.begin() + 1, Library::WedgePerBlock);
  if (bf16_path() == Bf16Path::Avx512Bf16) {
    g_bf16_peak_gflops = measured_bf16_peak_gflops(0);
    std::printf("measured bf16 vdpbf16ps peak: %.1f GFLOP/s on %d threads; bf16 GEMM: %s\n\n", g_bf16_peak_gflops,
                num_threads(), bf16_gemm_description());
    libraries.insert(libraries.begin() + 1, Library::WedgeBf16);
  } else {
    std::printf("bf16 GEMM: %s (no bf16 rows)\n\n", bf16_gemm_description());
  }

  // The decode shapes first, library by library: OpenBLAS's threads spin for a while after
  // each of its calls, and on 2 cores they slow the calls of a few microseconds that follow
  // (wedge's pool joins its threads after each one) by an order of magnitude.
  for (Library library : {Library::Wedge, Library::WedgePacked, Library::WedgeBf16, Library::OpenBLAS}) {
    if (library == Library::WedgePacked && !cpu::best_sgemm_microkernel()) continue;
    if (library == Library::WedgeBf16 && g_bf16_peak_gflops == 0) continue;
    for (const Shape& s : kDecodeShapes) {
      const std::string shape = std::string(s.label) + " " + std::to_string(s.m) + "x" +
                                std::to_string(s.n) + "x" + std::to_string(s.k);
      benchmark::RegisterBenchmark((std::string(library_name(library)) + "/" + shape).c_str(),
                                   [s, library](benchmark::State& st) { run_gemm(st, s, library); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime()
          ->MinTime(0.05)
          ->Repetitions(7)
          ->DisplayAggregatesOnly(true)
          ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
    }
  }
  for (const Shape& s : kShapes) {
    const std::string shape = std::string(s.label) + " " + std::to_string(s.m) + "x" +
                              std::to_string(s.n) + "x" + std::to_string(s.k);
    for (Library library : libraries) {
      benchmark::RegisterBenchmark((std::string(library_name(library)) + "/" + shape).c_str(),
                                   [s, library](benchmark::State& st) { run_gemm(st, s, library); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(0.3);
    }
  }
  RateReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  // The peaks once more: on a shared machine a slow spell during the first measurement would
  // understate a peak and overstate every share of it, so the larger of the two counts.
  const double fp32_after = measure_peak_gflops();
  std::printf("\nmeasured fp32 FMA peak again: %.1f GFLOP/s", fp32_after);
  g_peak_gflops = std::max(g_peak_gflops, fp32_after);
  if (g_bf16_peak_gflops > 0) {
    const double bf16_after = measured_bf16_peak_gflops(0);
    std::printf("; bf16 vdpbf16ps peak again: %.1f GFLOP/s", bf16_after);
    g_bf16_peak_gflops = std::max(g_bf16_peak_gflops, bf16_after);
  }
  std::printf(" (the table's shares use the larger of each pair)\n");

  std::printf("\n%-34s %11s %11s %8s %9s %12s", "shape (M x N x K)", "wedge GF/s", "openblas", "ratio", "% peak",
              "B once gain");
  if (g_bf16_peak_gflops > 0) std::printf(" %11s %9s %9s %10s", "bf16 GF/s", "/ fp32", "/ openblas", "% bf16 pk");
  std::printf("\n");
  for (const auto& [shape, libs] : g_results) {
    const auto w = libs.find("wedge"), o = libs.find("openblas"), h = libs.find("wedge-bf16");
    if (w == libs.end() || o == libs.end()) continue;
    std::printf("%-34s %11.1f %11.1f %7.2fx %8.1f%%", shape.c_str(), w->second, o->second, w->second / o->second,
                100.0 * w->second / g_peak_gflops);
    const auto per_block = libs.find("wedge-b-per-block");
    if (per_block != libs.end()) std::printf(" %11.3fx", w->second / per_block->second);
    if (h != libs.end())
      std::printf(" %11.1f %8.2fx %9.2fx %9.1f%%", h->second, h->second / w->second, h->second / o->second,
                  100.0 * h->second / g_bf16_peak_gflops);
    std::printf("\n");
  }
  if (!g_decode.empty()) {
    std::printf("\n%-34s %20s %20s %20s %20s %9s\n", "decode shape (M x N x K)", "wedge small-m us GB/s",
                "wedge packed us GB/s", "openblas us GB/s", "wedge bf16 us GB/s", "gain");
    for (const auto& [shape, libs] : g_decode) {
      const Shape* s = nullptr;
      for (const Shape& d : kDecodeShapes)
        if (shape.rfind(d.label, 0) == 0 && shape[std::string(d.label).size()] == ' ') s = &d;
      if (s == nullptr) continue;
      const double bytes = 4.0 * static_cast<double>(s->n * s->k);
      std::printf("%-34s", shape.c_str());
      for (const char* lib : {"wedge", "wedge-packed", "openblas", "wedge-bf16"}) {
        const auto it = libs.find(lib);
        if (it == libs.end())
          std::printf(" %20s", "-");
        else
          std::printf(" %11.1f %8.1f", it->second * 1e6, bytes / it->second / 1e9);
      }
      const auto w = libs.find("wedge"), p = libs.find("wedge-packed");
      if (w != libs.end() && p != libs.end()) std::printf(" %8.2fx", p->second / w->second);
      std::printf("\n");
    }
  }
  benchmark::Shutdown();
  return 0;
}
