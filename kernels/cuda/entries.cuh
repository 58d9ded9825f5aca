// The CUDA implementations of the kernel contract (kernels/kernels.h), one function per
// table entry with exactly the table's signature. table.cu collects them; each is
// defined in the .cu file named in the comment.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/kernels.h"

namespace wedge::kernels::WEDGE_CUDA_NS {

using std::int32_t;

// gemm.cu
void gemm(const GemmArgs<float>& args);
// The same result without the fused epilogue: the plain cuBLAS GEMM, then a separate
// epilogue pass (bias, GELU, aux). gemm falls back to it where cuBLASLt offers no
// algorithm; the tests also call it directly.
void gemm_unfused(const GemmArgs<float>& args);

// elementwise.cu
void fill(float* y, float value, i64 n);
void unary(UnaryOp op, float param, const float* x, float* y, i64 n);
void unary_backward(UnaryOp op, float param, const float* x, const float* y, const float* gy,
                    float* gx, i64 n, bool accumulate);
void binary(BinaryOp op, const BroadcastLayout& layout, const float* a, const float* b, float* out);
void dropout_forward(const float* x, float* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset);
void dropout_backward(const float* gy, float* gx, i64 n, float p, std::uint64_t seed,
                      std::uint64_t offset);
void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n);
void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga,
                       float* gx, float* gy, i64 n);
void adam_update(const AdamParams& hp, const AdamSegment<float>* segments, i64 count);
void bias_act_backward(Activation act, const float* aux, const float* gy, i64 rows, i64 n, float* gh,
                       float* gbias);
void strided_copy(const CopyLayout& layout, const void* src, void* dst, int elem_size);
void cast(const void* src, int src_dtype, void* dst, int dst_dtype, i64 n);

// reduce.cu
void reduce(ReduceOp op, const float* x, float* y, int32_t* idx, i64 outer, i64 n, i64 inner);
void sum_squares(const float* x, i64 n, float* out, bool accumulate);
// Column sums used by other kernels' second stages: y[o, j] = sum_i x[o, i, j] (fixed order).
void sum_middle_axis(const float* x, float* y, i64 outer, i64 n, i64 inner);

// softmax.cu
void softmax_forward(const float* x, float* y, i64 rows, i64 n, bool log);
void softmax_backward(const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log);
void cross_entropy_forward(const float* logits, const int32_t* targets, i64 rows, i64 V,
                           int32_t ignore_index, float* lse, float* loss, float* count);
void cross_entropy_backward(const float* logits, const int32_t* targets, const float* lse,
                            const float* count, const float* gloss, i64 rows, i64 V,
                            int32_t ignore_index, float* glogits);

// layer_norm.cu
void layer_norm_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D,
                        float eps, float* y, float* mean, float* rstd);
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* gy, i64 rows, i64 D, float* gx, float* ggamma, float* gbeta);

// embedding.cu
void embedding_forward(const float* table, const int32_t* ids, i64 n, i64 V, i64 D, float* out);
void embedding_backward(const int32_t* ids, const float* gout, i64 n, i64 V, i64 D, float* gtable);

// attention.cu
void attention_forward(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh,
                       float scale, bool causal, float* out, float* lse);
void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* gout, i64 BH, i64 L, i64 dh, float scale,
                        bool causal, float* gq, float* gk, float* gv);

// plucker.cu
void plucker_forward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps,
                     float* out, float* norms);
void plucker_backward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m, float eps,
                      const float* out, const float* norms, const float* gout, float* gz);
void plucker_mean_forward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m,
                          float eps, float* out, float* norms);
void plucker_mean_backward(const float* z, i64 B, i64 L, i64 r, const int32_t* offsets, i64 m,
                           float eps, const float* norms, const float* gout, float* gz);

// table.cu: the complete tables (also used by the host-emulation tests)
KernelTable<float> make_table_f32();
MemoryTable make_memory_table();

}  // namespace wedge::kernels::WEDGE_CUDA_NS
