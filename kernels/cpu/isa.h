// Internal to kernels/cpu: run-time CPU detection and the per-ISA kernel entry points
// that table.cpp installs over the reference table.
#pragma once

#include "kernels/cpu/cpu.h"

namespace wedge::kernels::cpu {

// True when the CPU (and OS) support the instruction sets the AVX-512 / AVX2 kernels are
// compiled for, and WEDGE_CPU_ISA=avx2|scalar does not rule them out (gemm_backend.cpp).
bool has_avx512();
bool has_avx2();
// AVX-512 (as above) with the BF16 extension.
bool has_avx512_bf16();
// The CPU reports AMX-TILE and AMX-BF16 (cpuid; whether Linux grants the tile state is
// amx_usable's question, gemm.h), and WEDGE_CPU_ISA does not cap it below AVX-512.
bool cpu_reports_amx_bf16();

// The float32 gemm entry of the CPU table: wedge's or OpenBLAS's, per gemm_backend().
void sgemm_selected(const GemmArgs<float>& args);
// "wedge gemm (avx512 14x32)" or "openblas gemm": what sgemm_selected calls for a backend.
const char* gemm_description(GemmBackend backend);

// ---- SIMD kernels: every entry of engine/kernels.def marked `simd`, with the signature
// written there for T = float, in two instruction sets: cpu::avx512 (16 lanes) and
// cpu::avx2 (8 lanes, for CPUs with AVX2 but not AVX-512). Each family's are defined by
// kernels/cpu/<family>_simd.cpp compiled for each width (the attention kernels:
// attention_avx512.cpp and attention_avx2.cpp).
#define WEDGE_CPU_DECLARE_ref(name, params)
#define WEDGE_CPU_DECLARE_own(name, params)
#define WEDGE_CPU_DECLARE_simd(name, params) void name params;
#define WEDGE_KERNEL(name, cpu, params) WEDGE_CPU_DECLARE_##cpu(name, params)
namespace avx512 {
using T = float;
#include "engine/kernels.def"
}  // namespace avx512
namespace avx2 {
using T = float;
#include "engine/kernels.def"
}  // namespace avx2
#undef WEDGE_KERNEL
#undef WEDGE_CPU_DECLARE_simd
#undef WEDGE_CPU_DECLARE_own
#undef WEDGE_CPU_DECLARE_ref

}  // namespace wedge::kernels::cpu
