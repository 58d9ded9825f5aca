// The machine's measured peaks: independent chains of the GEMM kernels' multiply-add
// instruction (fp32 FMA, vdpbf16ps, AMX tdpbf16ps) on every thread at once, the
// denominators of every "% of peak" wedge prints (benchmarks, the training line's MFU).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels {
namespace {

__attribute__((target("avx512f,fma"))) float fma_loop_avx512(long iterations) {
  // 16 independent accumulators cover FMA latency x 2 ports with room to spare.
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  float out[16];
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  _mm512_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_storeu_ps(out, s);
  return out[0];
}

// The bf16 peak: vdpbf16ps does 16 lanes x 2 multiply-adds (64 flops) per instruction.
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_loop(long iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80));  // (1, 1)
  const __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x33d633d6));  // ~1e-7
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    asm volatile("" : "+v"(x));  // one operand the compiler cannot see through
  }
  float out[16];
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  _mm512_storeu_ps(out, s);
  return out[0];
}

// The AMX peak: tdpbf16ps on four independent 16 x 16 accumulator tiles (tiles 0-7 all 16
// rows of 64 bytes: gemm_amx.cpp's configuration) (16 x 16 x 32
// multiply-adds, 16,384 flops each). Call only after kernels::cpu::amx_usable().
struct alignas(64) AmxPeakConfig {
  unsigned char palette = 1, start_row = 0, reserved[14] = {};
  unsigned short bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  unsigned char rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
__attribute__((target("amx-tile,amx-bf16"))) float amx_loop(long iterations) {
  static const AmxPeakConfig cfg;
  alignas(64) static const unsigned short zeros[16 * 32] = {};
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  for (long it = 0; it < iterations / 16; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float out[16 * 16];
  _tile_stored(0, out, 64);
  // No tilerelease: the GEMM kernel loads its configuration once per thread (the same as
  // this one) and must find it still in place when it runs on this thread later.
  return out[0];
}

// GFLOP/s of `loop` (flops_per_iteration each, `iterations` of them) on `threads` pool
// threads at once (0: the whole pool), best of 3.
template <typename Loop>
double measure_loop_gflops(Loop loop, double flops_per_iteration, int threads, long iterations) {
  const int team = threads > 0 ? threads : num_threads();
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<float> sink(static_cast<std::size_t>(team));
    const auto start = std::chrono::steady_clock::now();
    parallel_team(team, [&](int tid, int) { sink[static_cast<std::size_t>(tid)] = loop(iterations); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    asm volatile("" : : "r"(sink.data()) : "memory");  // keep the loops
    best = std::max(best, team * iterations * flops_per_iteration / s / 1e9);
  }
  return best;
}

}  // namespace

double measured_fma_peak_gflops(int threads, long iterations) {
  if (cpu::has_avx512()) return measure_loop_gflops(fma_loop_avx512, 16.0 * 16 * 2, threads, iterations);
  if (cpu::has_avx2()) return measure_loop_gflops(fma_loop_avx2, 12.0 * 8 * 2, threads, iterations);
  return 0;
}

double measured_bf16_peak_gflops(int threads, long iterations) {
  return cpu::has_avx512_bf16() ? measure_loop_gflops(dpbf16_loop, 16.0 * 32 * 2, threads, iterations) : 0;
}

double measured_amx_peak_gflops(int threads, long iterations) {
  // each counted iteration is a sixteenth of a round of four tile products
  return cpu::amx_usable() ? measure_loop_gflops(amx_loop, 4.0 * 16384 / 16, threads, iterations) : 0;
}

double measured_gemm_peak_gflops(Precision precision, int threads, long iterations) {
  if (precision == Precision::BF16) {
    if (bf16_path() == Bf16Path::Amx) return measured_amx_peak_gflops(threads, iterations);
    if (bf16_path() == Bf16Path::Avx512Bf16) return measured_bf16_peak_gflops(threads, iterations);
  }
  return measured_fma_peak_gflops(threads, iterations);
}

}  // namespace wedge::kernels
