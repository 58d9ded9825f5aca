// Internal to kernels/cpu: run-time CPU detection and the per-ISA kernel entry points
// that table.cpp installs over the reference table.
#pragma once

#include "kernels/cpu/cpu.h"

namespace wedge::kernels::cpu {

// True when the CPU (and OS) support the instruction sets the *_avx512.cpp / *_avx2.cpp
// files are compiled for.
bool has_avx512();
bool has_avx2();

// The float32 gemm entry of the CPU table: wedge's or OpenBLAS's, per gemm_backend().
void sgemm_selected(const GemmArgs<float>& args);
// "wedge gemm (avx512 14x32)" or "openblas gemm": what sgemm_selected calls for a backend.
const char* gemm_description(GemmBackend backend);

// ---- AVX-512 kernels (the *_avx512.cpp files), same signatures as KernelTable<float> ----
namespace avx512 {
void softmax_forward(const float* x, float* y, i64 rows, i64 n, bool log);
void softmax_backward(const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log);
void cross_entropy_forward(const float* logits, const std::int32_t* targets, i64 rows, i64 V,
                           std::int32_t ignore_index, float* lse, float* loss, float* count);
void cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* lse,
                            const float* count, const float* gloss, i64 rows, i64 V,
                            std::int32_t ignore_index, float* glogits);
void layer_norm_forward(const float* x, const float* gamma, const float* beta, i64 rows, i64 D,
                        float eps, float* y, float* mean, float* rstd);
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* gy, i64 rows, i64 D, float* gx, float* ggamma, float* gbeta);
void fill(float* y, float value, i64 n);
void unary(UnaryOp op, float param, const float* x, float* y, i64 n);
void unary_backward(UnaryOp op, float param, const float* x, const float* y, const float* gy,
                    float* gx, i64 n, bool accumulate);
void adam_update(const AdamParams& hp, const AdamSegment<float>* segments, i64 count);
void bias_act_backward(Activation act, const float* aux, const float* gy, i64 rows, i64 n, float* gh,
                       float* gbias);
void plucker_mean_forward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m,
                          float eps, float* out, float* norms);
void plucker_mean_backward(const float* z, i64 B, i64 L, i64 r, const std::int32_t* offsets, i64 m,
                           float eps, const float* norms, const float* gout, float* gz);
void attention_forward(const float* q, const float* k, const float* v, i64 BH, i64 L, i64 dh,
                       float scale, bool causal, float* out, float* lse);
void attention_backward(const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* gout, i64 BH, i64 L, i64 dh, float scale,
                        bool causal, float* gq, float* gk, float* gv);
void sum_squares(const float* x, i64 n, float* out, bool accumulate);
void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n);
void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga, float* gx,
                       float* gy, i64 n);
}  // namespace avx512

}  // namespace wedge::kernels::cpu
