// Controls of the optimized CPU backend (kernels/cpu): which GEMM the CPU kernel table
// uses, and what the CPU supports. The tables themselves are cpu_table_f32/f64 in
// kernels/kernels.h.
#pragma once

#include <cstdint>

#include "kernels/tables.h"

namespace wedge::kernels {

// Which implementation the float32 CPU table's gemm entry calls.
//   Wedge:    the packed AVX-512 / AVX2 GEMM of this folder (the default when the CPU has
//             AVX2 or AVX-512; on older CPUs it falls back to the reference loops).
//   OpenBLAS: cblas_sgemm from the linked OpenBLAS, for comparison. Debian's OpenBLAS
//             0.3.21 does not recognise recent Xeons and runs SSE3 kernels unless the
//             environment holds OPENBLAS_CORETYPE=SkylakeX when the process starts.
// The environment variable WEDGE_GEMM=wedge|openblas sets the initial choice.
enum class GemmBackend : std::uint8_t { Wedge, OpenBLAS };

void set_gemm_backend(GemmBackend backend);
GemmBackend gemm_backend();
// Parses "wedge" / "openblas" (case-insensitive); throws std::invalid_argument otherwise.
GemmBackend parse_gemm_backend(const char* name);

// The path of Precision::BF16 GEMMs (GemmArgs::precision) on the CPU, best first:
//   Amx         AMX tiles (gemm_amx.cpp): 32x32 register tile of four tdpbf16ps tiles; on
//               Xeons with AMX-BF16 when Linux grants the process the tile state.
//   Avx512Bf16  the vdpbf16ps micro-kernel (gemm_avx512bf16.cpp): operands rounded to bf16
//               while packing, fp32 accumulation; on CPUs with AVX-512-BF16.
//   Fp32        no bf16 instructions: the fp32 GEMM on the unrounded operands.
// The default is the best the CPU has; the environment variable
// WEDGE_BF16_GEMM=amx|avx512-bf16|fp32 (or set_bf16_path) picks one, and a path the CPU lacks
// falls back to the next one down. Whichever GEMM backend is selected, BF16 GEMMs take
// this path (OpenBLAS is fp32 only).
enum class Bf16Path : std::uint8_t { Fp32, Avx512Bf16, Amx };

void set_bf16_path(Bf16Path path);
Bf16Path bf16_path();
// Parses "amx" / "avx512-bf16" / "fp32" (case-insensitive); throws std::invalid_argument otherwise.
Bf16Path parse_bf16_path(const char* name);
const char* bf16_path_name(Bf16Path path);
// "amx-bf16 32x32 (tdpbf16ps)", "avx512-bf16 14x32 (vdpbf16ps)" or "fp32 (this CPU has no bf16 instructions)": what a
// BF16 GEMM runs now, for start-up lines.
const char* bf16_gemm_description();

// Measured peak GFLOP/s (kernels/cpu/peak.cpp): independent chains of one multiply-add
// instruction on `threads` pool threads at once (<= 0: the whole pool), best of 3 runs of
// `iterations` steps each (2e7 takes about 0.1 s a run; 2e6 is enough for a start-up
// line). fp32 FMA (AVX-512, else AVX2; 0 without either); AVX-512-BF16 vdpbf16ps and AMX
// tdpbf16ps (0 where the CPU lacks them); and the peak of the instruction a GEMM of the
// given precision runs on now (bf16_path()).
double measured_fma_peak_gflops(int threads, long iterations = 20'000'000);
double measured_bf16_peak_gflops(int threads, long iterations = 20'000'000);
double measured_amx_peak_gflops(int threads, long iterations = 20'000'000);
double measured_gemm_peak_gflops(Precision precision, int threads, long iterations = 20'000'000);

// The best instruction set this CPU supports among those wedge has kernels for:
// "avx512", "avx2" or "scalar".
const char* cpu_isa_name();

// Direct entry points, whatever the current backend (benchmarks and tests compare them).
// `threads` <= 0 means the global pool's size.
// sgemm_wedge honours args.precision (BF16 through bf16_path()).
void sgemm_wedge(const GemmArgs<float>& args, int threads = 0);
void sgemm_openblas(const GemmArgs<float>& args);
void dgemm_openblas(const GemmArgs<double>& args);

}  // namespace wedge::kernels
