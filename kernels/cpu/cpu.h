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

// The best instruction set this CPU supports among those wedge has kernels for:
// "avx512", "avx2" or "scalar".
const char* cpu_isa_name();

// Direct entry points, whatever the current backend (benchmarks and tests compare them).
// `threads` <= 0 means the global pool's size.
void sgemm_wedge(const GemmArgs<float>& args, int threads = 0);
void sgemm_openblas(const GemmArgs<float>& args);
void dgemm_openblas(const GemmArgs<double>& args);

}  // namespace wedge::kernels
