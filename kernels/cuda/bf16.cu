// fp32 to bfloat16, for the mixed-precision GEMM (GemmArgs::precision == Precision::BF16):
// gemm.cu rounds op(A) and op(B) into bf16 copies with these kernels, then cuBLAS multiplies
// the copies with fp32 accumulation.
//
// The rounding is the one of kernels/ref/bf16.h float_to_bf16 (the AVX-512-BF16
// vcvtne2ps2bf16 rule), written with the same bit arithmetic so the GPU, the host
// emulation, the CPU kernels and the reference round every float alike:
//   - zero and subnormal inputs become a zero of the same sign (flushed);
//   - NaN stays NaN, quieted (bit 6 of the bf16 set), the payload's top bits kept;
//   - everything else rounds to nearest, ties to even; past the largest bf16, infinity.
// CUDA's __float2bfloat16_rn is not used: it keeps subnormals (bf16 has fp32's exponent
// range, so they round to bf16 subnormals), which the CPU kernels flush.
//
// The result is the bf16 bit pattern as a uint16 (on the GPU it is what cuBLAS reads as
// CUDA_R_16BF / __nv_bfloat16). Each element depends on its own input only: grid-stride
// loops over a coalesced strided layout, like memory.cu's strided copy.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace bf16_impl {

__device__ __forceinline__ std::uint32_t bits_of(float x) {
#if defined(WEDGE_CUDA_EMULATE)
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#else
  return __float_as_uint(x);
#endif
}

__device__ __forceinline__ std::uint16_t to_bf16(float x) {
  std::uint32_t u = bits_of(x);
  if ((u & 0x7f800000u) == 0) return static_cast<std::uint16_t>((u >> 16) & 0x8000u);        // zero, subnormal
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // ties to even: a tie rounds up only when bit 16 is set
  return static_cast<std::uint16_t>(u >> 16);
}

template <typename Index>
__global__ void round_to_bf16_kernel(Strided2<Index> layout, i64 n, const float* src, std::uint16_t* dst) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    Index from, to;
    offsets_of(layout, static_cast<Index>(i), &from, &to);
    dst[to] = to_bf16(src[from]);
  }
}

}  // namespace bf16_impl

using namespace bf16_impl;

void round_to_bf16(const CopyLayout& layout, const float* src, std::uint16_t* dst) {
  const CopyLayout l = coalesce(layout);
  const i64 n = launch::layout_size(l.ndim, l.shape);
  if (n <= 0) return;
  const dim3 grid = grid_1d(launch::elementwise_blocks(n));
  // 32-bit index arithmetic whenever every index and offset fits (most GEMM operands).
  if (launch::fits_int32(l.ndim, l.shape, l.stride_src, l.stride_dst)) {
    WEDGE_LAUNCH(grid, launch::kElementwiseThreads, 0, round_to_bf16_kernel<std::int32_t>)(
        narrow<std::int32_t>(l.ndim, l.shape, l.stride_src, l.stride_dst), n, src, dst);
  } else {
    WEDGE_LAUNCH(grid, launch::kElementwiseThreads, 0, round_to_bf16_kernel<i64>)(
        narrow<i64>(l.ndim, l.shape, l.stride_src, l.stride_dst), n, src, dst);
  }
  check_launch("round_to_bf16_kernel");
}

void round_to_bf16(const float* src, std::uint16_t* dst, i64 n) {
  if (n <= 0) return;
  CopyLayout l;
  l.ndim = 1;
  l.shape[0] = n;
  l.stride_src[0] = 1;
  l.stride_dst[0] = 1;
  round_to_bf16(l, src, dst);
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
