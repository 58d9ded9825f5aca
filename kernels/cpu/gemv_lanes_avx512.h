// The AVX-512 operations gemv_impl.h asks of its vector layer beyond simd_avx512.h (its
// header lists them): the fp32 column kernel's (gemv_avx512.cpp) and, with pairs added, the
// bf16 one's (gemv_avx512bf16.cpp). In an unnamed namespace, like gemv_impl.h: each file
// that includes it compiles its own copy with its own instruction set.
#pragma once

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu {
namespace {

using namespace avx512;

struct Avx512Lanes {
  using V = vf;
  static constexpr bool kPairs = false;
  static constexpr int kRegisters = 32;
  static V opaque(V v) {
    asm("" : "+v"(v));
    return v;
  }
  static V quads(const float* p, i64 s) {
    V v = _mm512_castps128_ps512(_mm_loadu_ps(p));
    v = _mm512_insertf32x4(v, _mm_loadu_ps(p + s), 1);
    v = _mm512_insertf32x4(v, _mm_loadu_ps(p + 2 * s), 2);
    return _mm512_insertf32x4(v, _mm_loadu_ps(p + 3 * s), 3);
  }
  static V quads_first(const float* p, i64 s, int n) {
    const __mmask8 m = static_cast<__mmask8>((1u << n) - 1u);
    V v = _mm512_castps128_ps512(_mm_maskz_loadu_ps(m, p));
    v = _mm512_insertf32x4(v, _mm_maskz_loadu_ps(m, p + s), 1);
    v = _mm512_insertf32x4(v, _mm_maskz_loadu_ps(m, p + 2 * s), 2);
    return _mm512_insertf32x4(v, _mm_maskz_loadu_ps(m, p + 3 * s), 3);
  }
  static V from_row_order(V v) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
  }
  static void transpose4(V (&v)[4]) {
    const V a0 = _mm512_unpacklo_ps(v[0], v[1]), a1 = _mm512_unpackhi_ps(v[0], v[1]);
    const V a2 = _mm512_unpacklo_ps(v[2], v[3]), a3 = _mm512_unpackhi_ps(v[2], v[3]);
    v[0] = _mm512_shuffle_ps(a0, a2, 0x44);
    v[1] = _mm512_shuffle_ps(a0, a2, 0xEE);
    v[2] = _mm512_shuffle_ps(a1, a3, 0x44);
    v[3] = _mm512_shuffle_ps(a1, a3, 0xEE);
  }
  static const SgemmMicroKernel& micro_kernel() { return sgemm_avx512_microkernel(); }
};

}  // namespace
}  // namespace wedge::kernels::cpu
