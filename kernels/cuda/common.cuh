// What every CUDA kernel file of this folder shares: the launch macro, scratch memory,
// error checks, the warp/block reductions, and the two-operand strided layouts.
//
// The same sources build two ways:
//   - with nvcc (the real backend, namespace wedge::kernels::cuda), and
//   - with a host compiler and WEDGE_CUDA_EMULATE defined (namespace
//     wedge::kernels::cuda_emulated), where host_emulation.h runs each launch on fibers so
//     tests exercise the kernels' logic on machines without a GPU.
// Hence kernels are launched with WEDGE_LAUNCH(grid, block, shared_bytes, kernel)(args...)
// instead of kernel<<<...>>>(args...), use WEDGE_DYNAMIC_SHARED for extern shared
// memory, and call only the math functions both worlds have (expf, logf, sqrtf, ...).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/tables.h"

#if defined(WEDGE_CUDA_EMULATE)

#include "kernels/cuda/host_emulation.h"

#define WEDGE_CUDA_NS cuda_emulated
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx (::wedge::emu::g_fiber->thread_idx)
#define blockIdx (::wedge::emu::g_block->block_idx)
#define blockDim (::wedge::emu::g_block->block_dim)
#define gridDim (::wedge::emu::g_block->grid_dim)
#define __syncthreads() ::wedge::emu::sync_threads()
#define __shfl_xor_sync(mask, value, lane_mask) ::wedge::emu::shfl_xor(mask, value, lane_mask)
#define __shfl_down_sync(mask, value, delta) ::wedge::emu::shfl_down(mask, value, delta)
#define __shfl_sync(mask, value, lane) ::wedge::emu::shfl(mask, value, lane)
#define WEDGE_LAUNCH(grid, block, shared, ...) ::wedge::emu::launcher((grid), (block), (shared), __VA_ARGS__)
#define WEDGE_DYNAMIC_SHARED(type, name) type* name = reinterpret_cast<type*>(::wedge::emu::dynamic_shared())
#define WEDGE_UNROLL

inline int atomicAdd(int* address, int value) {  // fibers never interleave inside it
  const int old = *address;
  *address = value + old;
  return old;
}

#else  // nvcc

#include <cuda_runtime.h>

#include "engine/cuda_allocator.h"
#include "engine/cuda_stream.h"

#define WEDGE_CUDA_NS cuda
#define WEDGE_LAUNCH(grid, block, shared, ...) \
  __VA_ARGS__<<<(grid), (block), (shared), ::wedge::cuda::stream()>>>
#define WEDGE_DYNAMIC_SHARED(type, name)                                  \
  extern __shared__ __align__(16) unsigned char wedge_dynamic_shared[]; \
  type* name = reinterpret_cast<type*>(wedge_dynamic_shared)
#define WEDGE_UNROLL _Pragma("unroll")

#endif

// Where the course's student tree (tools/course.sh) removed an exercise's solution from a
// kernel (the regions of this folder lie in device code): under the emulation an exception
// with the exercise's message, on a GPU a trap, as device code cannot throw.
#if defined(WEDGE_CUDA_EMULATE)
#define WEDGE_COURSE_UNSOLVED(message) throw std::logic_error(message)
#else
#define WEDGE_COURSE_UNSOLVED(message) __trap()
#endif

namespace wedge::kernels::WEDGE_CUDA_NS {

namespace launch = ::wedge::kernels::cuda_launch;
#if defined(WEDGE_CUDA_EMULATE)
using ::wedge::emu::dim3;
#endif

constexpr unsigned kFullMask = 0xffffffffu;

// ---- host side -------------------------------------------------------------------------

// Launch errors surface here, at the op that caused them, not at some later copy.
inline void check_launch(const char* kernel) {
#if defined(WEDGE_CUDA_EMULATE)
  (void)kernel;
#else
  ::wedge::cuda::check(cudaGetLastError(), kernel);
#endif
}

inline void zero_async(void* ptr, std::size_t bytes) {
  if (bytes == 0) return;
#if defined(WEDGE_CUDA_EMULATE)
  std::memset(ptr, 0, bytes);
#else
  ::wedge::cuda::check(cudaMemsetAsync(ptr, 0, bytes, ::wedge::cuda::stream()), "cudaMemsetAsync");
#endif
}

// Non-overlapping ranges (a copy onto itself is skipped).
inline void copy_device_async(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
#if defined(WEDGE_CUDA_EMULATE)
  std::memmove(dst, src, bytes);
#else
  ::wedge::cuda::check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ::wedge::cuda::stream()),
                       "cudaMemcpyAsync device to device");
#endif
}

inline dim3 grid_1d(i64 blocks) {
  if (blocks < 1 || blocks > 2147483647LL) {
    throw std::runtime_error("cuda: grid of " + std::to_string(blocks) + " blocks is out of range");
  }
  return dim3(static_cast<unsigned>(blocks));
}

// Temporary device memory for one kernel call (reduction partials, sort buckets),
// borrowed from the caching allocator and returned when the call's kernels are queued.
// Returning it early is safe: the next user of the block is queued on the same stream,
// after these kernels. (Kernels allocate no tensors; this never reaches cudaMalloc after
// the first training step.) In emulation it is host memory filled with 0xFF bytes (NaN as
// float, -1 as int), so a kernel that reads scratch it never wrote fails its test.
template <typename T>
class Scratch {
 public:
  explicit Scratch(i64 count) : bytes_(static_cast<std::size_t>(count > 0 ? count : 1) * sizeof(T)) {
#if defined(WEDGE_CUDA_EMULATE)
    host_.assign(bytes_, 0xFF);
    ptr_ = reinterpret_cast<T*>(host_.data());
#else
    Allocator* a = ::wedge::cuda::device_allocator();
    if (a == nullptr) throw std::runtime_error("cuda: kernel scratch requested but no CUDA device");
    ptr_ = static_cast<T*>(a->allocate(bytes_));
#endif
  }
  ~Scratch() {
#if !defined(WEDGE_CUDA_EMULATE)
    ::wedge::cuda::device_allocator()->deallocate(ptr_, bytes_);
#endif
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }

 private:
  std::size_t bytes_;
  T* ptr_ = nullptr;
#if defined(WEDGE_CUDA_EMULATE)
  std::vector<unsigned char> host_;
#endif
};

// ---- device side -----------------------------------------------------------------------

__device__ __forceinline__ bool is_nan(float x) { return x != x; }
// This thread's index in the grid and the grid's thread count, for grid-stride loops.
__device__ __forceinline__ i64 global_thread() { return i64(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 grid_threads() { return i64(blockDim.x) * gridDim.x; }
__device__ __forceinline__ i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

// The exact GELU, x * Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2 (not the tanh
// approximation), and its derivative Phi(x) + x phi(x). One definition for the unary GELU
// kernels and the GEMM epilogue (forward and backward), so they agree bit for bit.
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
__device__ __forceinline__ float normal_cdf(float x) { return 0.5f * (1.0f + erff(x * kInvSqrt2)); }
__device__ __forceinline__ float normal_pdf(float x) { return kInvSqrt2Pi * expf(-0.5f * x * x); }
__device__ __forceinline__ float gelu(float x) { return x * normal_cdf(x); }
__device__ __forceinline__ float gelu_derivative(float x) { return normal_cdf(x) + x * normal_pdf(x); }

// Butterfly sum over the 32 lanes of a warp; every lane ends with the same bits (each
// step adds the same two numbers on both partner lanes, and addition commutes).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Sum over a 1-d block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. Fixed order: butterfly within each warp, then the warp totals in warp order,
// so the result depends only on the block size, never on timing. The leading barrier
// lets a kernel call this repeatedly: nobody overwrites warp_totals while another warp is
// still reading the previous call's values.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T warp_totals[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? warp_totals[lane] : T(0));
}

// Running (max, sum of exp(x - max)) of a sequence: the online softmax (Milakov &
// Gimelshein 2018). Merging two is exact up to rounding and commutative bit for bit, so
// butterflies over it are deterministic. A part that saw only -inf has max -inf, sum 0.
struct MaxSum {
  float max;
  float sum;
};
__device__ __forceinline__ MaxSum max_sum_identity() { return {-INFINITY, 0.0f}; }
__device__ __forceinline__ MaxSum max_sum_push(MaxSum a, float x) {
  if (x > a.max) return {x, a.sum * expf(a.max - x) + 1.0f};  // expf(-inf) = 0 on the first
  if (x == -INFINITY) return a;                                // exp(-inf) adds nothing
  return {a.max, a.sum + expf(x - a.max)};
}
__device__ __forceinline__ MaxSum max_sum_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}
// The merge's a*x + b*y may be contracted to fma(a, x, b*y) by the compiler, which is not
// symmetric in its operands, so partner lanes could differ in the last bit; lane 0's
// result is broadcast so every thread of the row normalises with the same numbers.
__device__ __forceinline__ MaxSum warp_max_sum(MaxSum v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other{__shfl_xor_sync(kFullMask, v.max, offset), __shfl_xor_sync(kFullMask, v.sum, offset)};
    v = max_sum_merge(v, other);
  }
  return {__shfl_sync(kFullMask, v.max, 0), __shfl_sync(kFullMask, v.sum, 0)};
}
__device__ __forceinline__ MaxSum block_max_sum(MaxSum v) {
  __shared__ float warp_max_values[32];
  __shared__ float warp_sum_values[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max_sum(v);
  __syncthreads();
  if (lane == 0) {
    warp_max_values[warp] = v.max;
    warp_sum_values[warp] = v.sum;
  }
  __syncthreads();
  MaxSum w = lane < warps ? MaxSum{warp_max_values[lane], warp_sum_values[lane]} : max_sum_identity();
  return warp_max_sum(w);
}

// ---- two-operand strided layouts (broadcasting binary maps, strided copy) -------------

// The layout after coalesce(), in the index type the kernel divides with.
template <typename Index>
struct Strided2 {
  int ndim;
  Index shape[kMaxDims];
  Index stride0[kMaxDims];
  Index stride1[kMaxDims];
};

template <typename Index>
Strided2<Index> narrow(int ndim, const i64* shape, const i64* stride0, const i64* stride1) {
  Strided2<Index> s{};
  s.ndim = ndim;
  for (int d = 0; d < ndim; ++d) {
    s.shape[d] = static_cast<Index>(shape[d]);
    s.stride0[d] = static_cast<Index>(stride0[d]);
    s.stride1[d] = static_cast<Index>(stride1[d]);
  }
  return s;
}

// Row-major decomposition of the linear index i into the offsets of both operands.
template <typename Index>
__device__ __forceinline__ void offsets_of(const Strided2<Index>& s, Index i, Index* o0, Index* o1) {
  Index a = 0, b = 0;
  for (int d = s.ndim - 1; d >= 1; --d) {
    const Index coord = i % s.shape[d];
    i /= s.shape[d];
    a += coord * s.stride0[d];
    b += coord * s.stride1[d];
  }
  *o0 = a + i * s.stride0[0];
  *o1 = b + i * s.stride1[0];
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
