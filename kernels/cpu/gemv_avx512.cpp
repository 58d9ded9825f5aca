// The small-m GEMM's column kernel on 16 lanes: gemv_impl.h instantiated with AVX-512
// operations (compiled with the AVX-512 flags; gemv.h says what it does).
#include "kernels/cpu/gemv_lanes_avx512.h"
// (the layer first: gemv_impl.h is written against it)
#include "kernels/cpu/gemv_impl.h"

namespace wedge::kernels::cpu {

const SgemvKernel& sgemv_avx512_kernel() {
  static const SgemvKernel kernel{"avx512", &Gemv<Avx512Lanes>::columns};
  return kernel;
}

}  // namespace wedge::kernels::cpu
