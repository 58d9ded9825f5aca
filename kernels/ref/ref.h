// The reference kernels, one function template per entry of KernelTable<T>
// (engine/kernels.def), instantiated for float and double. These are plain scalar loops
// written to read like the math; every optimized kernel (kernels/cpu, kernels/cuda) is
// tested against them. ref_table_f32()/ref_table_f64() (table.cpp) collect them.
//
// Where a sum is formed, it is formed in `acc_t` (double) even when T is float: on a
// scalar loop that costs nothing and makes the oracle more accurate than the kernels it
// judges, so a test's tolerance measures the kernel under test, not the reference.
#pragma once

#include <cstdint>

#include "kernels/tables.h"

namespace wedge::kernels::ref {

using acc_t = double;
using std::int32_t;

// One function template per kernel of engine/kernels.def, with exactly the signature
// written there (T = float or double), defined in the file of its family:
//   gemm.cpp        gemm, bias_act_backward          elementwise.cpp  fill, unary, unary_backward, binary
//   reduce.cpp      reduce, sum_squares              softmax.cpp      softmax_*, cross_entropy_*
//   layer_norm.cpp  layer_norm_*, residual_layer_norm_*
//   embedding.cpp   embedding_*
//   dropout.cpp     dropout_*                        attention.cpp    attention_*
//   plucker.cpp     plucker_*, plucker_mean_*        gate_mix.cpp     gate_mix_*
//   adam.cpp        adam_update                      memory.cpp       strided_copy, cast (type-blind)
//   tree_sum.cpp    tree_sum (adds in T: the order is the contract)
//   selective_scan.cpp  selective_scan_*
#define WEDGE_KERNEL(name, cpu, params) \
  template <typename T>                 \
  void name params;
#define WEDGE_MEMORY_KERNEL(name, params) void name params;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL

// The epilogue of args (bias, activation; GemmArgs) applied as a separate pass over a C
// that already holds alpha op(A) op(B) + beta C. Backends whose GEMM has no epilogue of
// its own (OpenBLAS) finish with this.
template <typename T>
void gemm_epilogue(const GemmArgs<T>& args);

}  // namespace wedge::kernels::ref
