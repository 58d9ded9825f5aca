// AVX-512 kernels with the same signatures as the KernelTable entries they replace:
// binary (elementwise_avx512.cpp), reduce (reduce_avx512.cpp) and dropout (dropout_avx512.cpp).
#pragma once

#include <cstdint>

#include "kernels/tables.h"

namespace wedge::kernels::cpu::avx512 {

void binary(BinaryOp op, const BroadcastLayout& layout, const float* a, const float* b, float* out);
void reduce(ReduceOp op, const float* x, float* y, std::int32_t* idx, i64 outer, i64 n, i64 inner);
void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset);
void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed, std::uint64_t offset);

}  // namespace wedge::kernels::cpu::avx512
