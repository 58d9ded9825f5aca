// What the CUDA teaching ladders share (bench/cuda/*_ladder.cuh): the launch macro, the
// warp butterflies and shared-memory trees, the engine's rule for a row's block size, the
// error measure, and (for the GPU programs) timing with CUDA events and the measured copy
// bandwidth.
//
// Each ladder's kernels live in a header so that they build two ways:
//   - with nvcc, for the real programs (bench/cuda/<name>_ladder.cu, built as
//     build/bench/cuda_<name>_ladder), which validate every rung against a float64
//     reference and time it on a GPU;
//   - with a host compiler and WEDGE_CUDA_EMULATE defined, on the fiber emulation of
//     kernels/cuda/host_emulation.h: tests/kernels/test_cuda_ladders_emulated.cpp runs every
//     rung on awkward shapes against the same references. That is how machines without a
//     GPU (CI) check the ladders' index arithmetic, barriers and shuffles.
// So the kernels use only what the emulation provides: __syncthreads, __shfl_xor_sync /
// __shfl_down_sync / __shfl_sync with a full mask, static __shared__ arrays and
// WEDGE_DYNAMIC_SHARED, blocks of whole warps (at most 1024 threads, at most 48 KiB of
// dynamic shared memory), and the math functions both worlds have (expf, logf, sqrtf,
// fmaxf). No float atomics, as in the engine: every sum has an order fixed by the shape.
//
// Kernels are launched as in kernels/cuda: LADDER_LAUNCH(grid, block, shared_bytes,
// kernel)(args...), which is WEDGE_LAUNCH in the emulation and a plain <<<...>>> on the
// default stream under nvcc. (The engine's WEDGE_LAUNCH goes to the engine's stream: the
// ladders do not link the engine, so building them does not wait for the library.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#if defined(WEDGE_CUDA_EMULATE)

// The emulation's CUDA vocabulary (__global__, threadIdx, __syncthreads, the shuffles,
// WEDGE_LAUNCH, WEDGE_DYNAMIC_SHARED, WEDGE_UNROLL).
#include "kernels/cuda/common.cuh"
#define WEDGE_LADDER_NS ladders_emulated
#define LADDER_LAUNCH(grid, block, shared, ...) WEDGE_LAUNCH(grid, block, shared, __VA_ARGS__)

#else  // nvcc

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#define WEDGE_LADDER_NS ladders
#define LADDER_LAUNCH(grid, block, shared, ...) __VA_ARGS__<<<(grid), (block), (shared)>>>
#ifndef WEDGE_DYNAMIC_SHARED  // as kernels/cuda/common.cuh defines it
#define WEDGE_DYNAMIC_SHARED(type, name)                                \
  extern __shared__ __align__(16) unsigned char wedge_dynamic_shared[]; \
  type* name = reinterpret_cast<type*>(wedge_dynamic_shared)
#endif
#ifndef WEDGE_UNROLL
#define WEDGE_UNROLL _Pragma("unroll")
#endif

#endif

namespace wedge::WEDGE_LADDER_NS {

#if defined(WEDGE_CUDA_EMULATE)
using ::wedge::emu::dim3;
#endif

constexpr unsigned kFullMask = 0xffffffffu;

// The four rungs every ladder of this folder climbs, in order, and their names in the
// tables (the last one named by each ladder: what "fused" means differs).
enum class Rung { naive, shared, warp, fused };
constexpr Rung kRungs[] = {Rung::naive, Rung::shared, Rung::warp, Rung::fused};
inline const char* rung_label(Rung r, const char* fused) {
  switch (r) {
    case Rung::naive:
      return "1 naive (thread/row)";
    case Rung::shared:
      return "2 shared-memory tree";
    case Rung::warp:
      return "3 warp shuffles";
    case Rung::fused:
      return fused;
  }
  return "?";
}
constexpr int kMaxBlockThreads = 1024;

__host__ __device__ __forceinline__ int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }
// (std::min is host-only for nvcc without --expt-relaxed-constexpr)
__host__ __device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// The engine's block size for one block per row (kernels/cuda/launch.h row_threads): a
// power of two in [32, 1024] giving each thread about 8 elements of the row. A power of
// two, so a shared-memory tree halves it cleanly.
inline int row_threads(long long n) {
  long long t = 32;
  while (t < 1024 && t * 8 < n) t *= 2;
  return static_cast<int>(t);
}

// Butterflies over the 32 lanes of a warp: after five exchanges every lane holds the
// result, with no shared memory and no barrier.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Shared-memory trees over a 1-d block whose size is a power of two (row_threads), the
// classic block reduction: each halving step folds the upper half of `slots` (one per
// thread) onto the lower half, and the barrier after it makes that step's writes visible
// to the next. The trailing barrier lets the caller reuse `slots` for another reduction.
__device__ __forceinline__ float tree_max(float v, float* slots) {
  slots[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) slots[threadIdx.x] = fmaxf(slots[threadIdx.x], slots[threadIdx.x + half]);
    __syncthreads();
  }
  const float result = slots[0];
  __syncthreads();
  return result;
}
__device__ __forceinline__ float tree_sum(float v, float* slots) {
  slots[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) slots[threadIdx.x] += slots[threadIdx.x + half];
    __syncthreads();
  }
  const float result = slots[0];
  __syncthreads();
  return result;
}

// Largest |got - ref| relative to the largest |ref| (NaN counts as infinitely wrong): one
// number per output, the measure of bench/cuda/gemm_ladder.cu.
inline double relative_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(got[i]) - ref[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return worst / std::max(scale, 1e-30);
}

#if !defined(WEDGE_CUDA_EMULATE)
// ---- the real programs' side: errors, timing, the bandwidth ceiling ----------------------

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "ladder: %s: %s\n", what, cudaGetErrorString(status));
    std::exit(2);
  }
}

// Milliseconds per call (every CUDA ladder, the GEMM one included): one warm-up, then enough
// repetitions for ~0.2 s (at most 50), between two CUDA events on the default stream.
inline float time_ms(const std::function<void()>& run) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  run();
  check(cudaEventRecord(start), "cudaEventRecord");
  run();
  check(cudaEventRecord(stop), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float once = 0;
  check(cudaEventElapsedTime(&once, start, stop), "cudaEventElapsedTime");
  const int reps = std::clamp(static_cast<int>(200.0f / std::max(once, 1e-3f)), 1, 50);
  check(cudaEventRecord(start), "cudaEventRecord");
  for (int r = 0; r < reps; ++r) run();
  check(cudaEventRecord(stop), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float total = 0;
  check(cudaEventElapsedTime(&total, start, stop), "cudaEventElapsedTime");
  check(cudaGetLastError(), "kernel launch");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return total / static_cast<float>(reps);
}

// Grid-stride copy in 16-byte vectors: as close to streaming memory as a kernel gets.
__global__ void copy_kernel(const float4* src, float4* dst, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

// Device memory bandwidth (bytes read + bytes written per second, in GB/s) of a 1 GiB
// copy, far beyond any L2: the ceiling of a kernel that streams its operands once. The
// bandwidth-bound ladders report their GB/s as a percentage of it.
inline double measured_copy_gbs() {
  const std::size_t bytes = std::size_t(1) << 30, n = bytes / sizeof(float4);
  float4 *src, *dst;
  check(cudaMalloc(&src, bytes), "cudaMalloc");
  check(cudaMalloc(&dst, bytes), "cudaMalloc");
  check(cudaMemset(src, 0, bytes), "cudaMemset");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
  const float ms = time_ms([&] { copy_kernel<<<sms * 8, 256>>>(src, dst, n); });
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// A device buffer with its host copy: upload once, download after each rung.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t b) : bytes(b) {
    check(cudaMalloc(&ptr, std::max<std::size_t>(b, 1)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  template <typename T>
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  template <typename T>
  std::vector<T> download(std::size_t count) const {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }
  // NaN bytes: an output a rung forgets to write shows up as wrong.
  void poison() { check(cudaMemset(ptr, 0xFF, bytes), "cudaMemset"); }
};
#endif

}  // namespace wedge::WEDGE_LADDER_NS
