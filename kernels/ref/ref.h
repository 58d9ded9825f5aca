// The reference kernels, one function template per entry of KernelTable<T>
// (kernels/kernels.h), instantiated for float and double. These are plain scalar loops
// written to read like the math; every optimized kernel (kernels/cpu, kernels/cuda) is
// tested against them. ref_table_f32()/ref_table_f64() (table.cpp) collect them.
//
// Where a sum is formed, it is formed in `acc_t` (double) even when T is float: on a
// scalar loop that costs nothing and makes the oracle more accurate than the kernels it
// judges, so a test's tolerance measures the kernel under test, not the reference.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace wedge::kernels::ref {

using acc_t = double;
using std::int32_t;

// gemm.cpp
template <typename T>
void gemm(const GemmArgs<T>& args);
// The epilogue of args (bias, activation; kernels.h) applied as a separate pass over a C
// that already holds alpha op(A) op(B) + beta C. Backends whose GEMM has no epilogue of
// its own (OpenBLAS) finish with this.
template <typename T>
void gemm_epilogue(const GemmArgs<T>& args);
template <typename T>
void bias_act_backward(Activation act, const T* aux, const T* gy, i64 rows, i64 n, T* gh, T* gbias);

// elementwise.cpp
template <typename T>
void fill(T* y, T value, i64 n);
template <typename T>
void unary(UnaryOp op, T param, const T* x, T* y, i64 n);
template <typename T>
void unary_backward(UnaryOp op, T param, const T* x, const T* y, const T* gy, T* gx, i64 n,
                    bool accumulate);
template <typename T>
void binary(BinaryOp op, const BroadcastLayout& layout, const T* a, const T* b, T* out);
template <typename T>
void reduce(ReduceOp op, const T* x, T* y, int32_t* idx, i64 outer, i64 n, i64 inner);
template <typename T>
void sum_squares(const T* x, i64 n, T* out, bool accumulate);
template <typename T>
void gate_mix_forward(const T* a, const T* x, const T* y, T* out, i64 n);
template <typename T>
void gate_mix_backward(const T* a, const T* x, const T* y, const T* gout, T* ga, T* gx, T* gy, i64 n);

// softmax.cpp
template <typename T>
void softmax_forward(const T* x, T* y, i64 rows, i64 n, bool log);
template <typename T>
void softmax_backward(const T* y, const T* gy, T* gx, i64 rows, i64 n, bool log);
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, i64 rows, i64 V,
                           int32_t ignore_index, T* lse, T* loss, T* count);
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* count,
                            const T* gloss, i64 rows, i64 V, int32_t ignore_index, T* glogits);

// layer_norm.cpp
template <typename T>
void layer_norm_forward(const T* x, const T* gamma, const T* beta, i64 rows, i64 D, T eps, T* y,
                        T* mean, T* rstd);
template <typename T>
void layer_norm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* gy,
                         i64 rows, i64 D, T* gx, T* ggamma, T* gbeta);

// embedding.cpp
template <typename T>
void embedding_forward(const T* table, const int32_t* ids, i64 n, i64 V, i64 D, T* out);
template <typename T>
void embedding_backward(const int32_t* ids, const T* gout, i64 n, i64 V, i64 D, T* gtable);

// dropout.cpp
template <typename T>
void dropout_forward(const T* x, T* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset);
template <typename T>
void dropout_backward(const T* gy, T* gx, i64 n, float p, std::uint64_t seed, std::uint64_t offset);

// attention.cpp
template <typename T>
void attention_forward(const T* q, const T* k, const T* v, i64 BH, i64 L, i64 dh, T scale,
                       bool causal, T* out, T* lse);
template <typename T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* lse,
                        const T* gout, i64 BH, i64 L, i64 dh, T scale, bool causal, T* gq, T* gk,
                        T* gv);

// plucker.cpp
template <typename T>
void plucker_forward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps, T* out,
                     T* norms);
template <typename T>
void plucker_backward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps,
                      const T* out, const T* norms, const T* gout, T* gz);
template <typename T>
void plucker_mean_forward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps,
                          T* out, T* norms);
template <typename T>
void plucker_mean_backward(const T* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, T eps,
                           const T* norms, const T* gout, T* gz);

// adam.cpp
template <typename T>
void adam_update(const AdamParams& hp, const AdamSegment<T>* segments, i64 count);

// memory.cpp (type-blind)
void strided_copy(const CopyLayout& layout, const void* src, void* dst, int elem_size);
void cast(const void* src, int src_dtype, void* dst, int dst_dtype, i64 n);

}  // namespace wedge::kernels::ref
