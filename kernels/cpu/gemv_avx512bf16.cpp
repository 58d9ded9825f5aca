// The small-m GEMM's column kernel for Precision::BF16 on AVX-512-BF16: gemv_impl.h with
// bf16 pairs (gemv.h says what it does), so that a GEMM of a few rows -- a decode step of a
// model trained in bf16 -- reads each weight once, in place, instead of packing all of them
// per call, and still gives bf16_avx512_microkernel()'s bits: the same rounding
// (vcvtne2ps2bf16 through pack_bf16_avx512.h's pair_up), the same pairs along k, the same
// vdpbf16ps per pair in the same order, the same slices of kc and the same fold into C.
// Compiled with -mavx512bf16 on top of the AVX-512 flags; called only after a run-time
// CPU check.
#include "kernels/cpu/gemv_lanes_avx512.h"
#include "kernels/cpu/pack_bf16_avx512.h"
// (the layers first: gemv_impl.h is written against them)
#include "kernels/cpu/gemv_impl.h"

namespace wedge::kernels::cpu {
namespace {

// The fp32 kernel's layer, with pairs.
struct PairLanes : Avx512Lanes {
  static constexpr bool kPairs = true;
  // Lane j: (bf16(even[j]), bf16(odd[j])), as the packers pair k = 2s and 2s + 1.
  static V pair_up(V even, V odd) { return bf16::pair_up(even, odd); }
  // One slot of paired A in every lane: a bit-exact float broadcast, as the micro-kernel's.
  static V broadcast_pair(const float* slot) { return _mm512_set1_ps(*slot); }
  // acc + a.hi b.hi + a.lo b.lo per lane, operands in the micro-kernel's order.
  static V dot(V acc, V a, V b) { return _mm512_dpbf16_ps(acc, bf16::as_pairs(a), bf16::as_pairs(b)); }
  static const SgemmMicroKernel& micro_kernel() { return bf16_avx512_microkernel(); }
};

}  // namespace

const SgemvKernel& sgemv_avx512bf16_kernel() {
  static const SgemvKernel kernel{"avx512-bf16", &Gemv<PairLanes>::columns, true};
  return kernel;
}

}  // namespace wedge::kernels::cpu
