// The small-m GEMM's column kernel on 8 lanes: gemv_impl.h instantiated with AVX2
// operations (compiled with -mavx2 -mfma; gemv.h says what it does).
#include "kernels/cpu/simd_avx2.h"
// (the layer first: gemv_impl.h is written against it)
#include "kernels/cpu/gemv_impl.h"

namespace wedge::kernels::cpu {
namespace {

struct Lanes {
  using V = vf;
  static constexpr bool kPairs = false;
  static constexpr int kRegisters = 16;
  static V opaque(V v) {
    asm("" : "+x"(v));
    return v;
  }
  static V quads(const float* p, i64 s) { return _mm256_loadu2_m128(p + s, p); }
  static V quads_first(const float* p, i64 s, int n) {
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_maskload_ps(p, m)), _mm_maskload_ps(p + s, m), 1);
  }
  static V from_row_order(V v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); }
  static void transpose4(V (&v)[4]) {
    const V a0 = _mm256_unpacklo_ps(v[0], v[1]), a1 = _mm256_unpackhi_ps(v[0], v[1]);
    const V a2 = _mm256_unpacklo_ps(v[2], v[3]), a3 = _mm256_unpackhi_ps(v[2], v[3]);
    v[0] = _mm256_shuffle_ps(a0, a2, 0x44);
    v[1] = _mm256_shuffle_ps(a0, a2, 0xEE);
    v[2] = _mm256_shuffle_ps(a1, a3, 0x44);
    v[3] = _mm256_shuffle_ps(a1, a3, 0xEE);
  }
  static const SgemmMicroKernel& micro_kernel() { return sgemm_avx2_microkernel(); }
};

}  // namespace

const SgemvKernel& sgemv_avx2_kernel() {
  static const SgemvKernel kernel{"avx2", &Gemv<Lanes>::columns};
  return kernel;
}

}  // namespace wedge::kernels::cpu
