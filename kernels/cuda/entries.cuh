// The CUDA implementations of the kernel contract (engine/kernel_table.h), one function
// per entry of engine/kernels.def with exactly its signature. table.cu collects them.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/tables.h"

namespace wedge::kernels::WEDGE_CUDA_NS {

using std::int32_t;

// Every kernel of engine/kernels.def with the signature written there, T = float, defined
// in the .cu file of its family (gemm.cu, elementwise.cu, reduce.cu, softmax.cu, ...;
// `ls kernels/*/FAMILY*` finds a family's reference, CPU and CUDA versions).
using T = float;
#define WEDGE_KERNEL(name, cpu, params) void name params;
#define WEDGE_MEMORY_KERNEL(name, params) void name params;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL

// gemm.cu: the same result as gemm without the fused epilogue: the plain cuBLAS GEMM, then
// a separate epilogue pass (bias, GELU, aux). gemm falls back to it where cuBLASLt offers
// no algorithm; the tests also call it directly.
void gemm_unfused(const GemmArgs<float>& args);
// bf16.cu: fp32 rounded to bfloat16 bit patterns (kernels/ref/bf16.h float_to_bf16, bit for
// bit): dst[to] = bf16(src[from]) over a strided layout (strides in elements, either side),
// or over n contiguous elements. The Precision::BF16 GEMM rounds its operands with it.
void round_to_bf16(const CopyLayout& layout, const float* src, std::uint16_t* dst);
void round_to_bf16(const float* src, std::uint16_t* dst, i64 n);
// reduce.cu: column sums used by other kernels' second stages: y[o, j] = sum_i x[o, i, j]
// (fixed order).
void sum_middle_axis(const float* x, float* y, i64 outer, i64 n, i64 inner);

// table.cu: the complete tables (also used by the host-emulation tests)
KernelTable<float> make_table_f32();
MemoryTable make_memory_table();

}  // namespace wedge::kernels::WEDGE_CUDA_NS
