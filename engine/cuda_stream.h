// The one CUDA stream wedge queues all GPU work on, and the cuBLAS and cuBLASLt handles
// bound to it.
//
// Everything (kernels, cuBLAS calls, host<->device copies, allocator reuse) goes through
// this single stream, so work runs in the order it was issued and no host
// synchronisation is needed inside a training step: a block freed by one op and handed
// to the next is safe because the next op's kernels are queued after the last use.
// The host waits only where it needs a value (copy_to_host) or is asked to
// (Allocator::synchronize).
//
// CUDA translation units only (.cu): this header includes the CUDA runtime.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "engine/cuda_allocator.h"  // device_count, use_device

namespace wedge::cuda {


// The wedge stream of device 0 (created on first use, never destroyed: the CUDA
// runtime may already be torn down when static destructors run).
cudaStream_t stream();

// For its scope, kernels that this thread launches go to `other` instead of stream():
// how the GPU collectives (engine/nccl.h) run wedge's adding kernel on their own stream,
// beside the backward pass. Nothing else may run in the scope: not the allocator (it
// counts on one stream), nor cuBLAS (bound to stream() when made).
class StreamOverride {
 public:
  explicit StreamOverride(cudaStream_t other);
  ~StreamOverride();
  StreamOverride(const StreamOverride&) = delete;
  StreamOverride& operator=(const StreamOverride&) = delete;

 private:
  cudaStream_t previous_;
};

// The cuBLAS handle, with its stream set to stream() (created on first use).
cublasHandle_t cublas();

// The cuBLASLt handle (created on first use). cuBLASLt takes the stream per call: every
// cublasLtMatmul is given stream(), so it is ordered with everything else.
cublasLtHandle_t cublas_lt();
// The workspace cublasLtMatmul may use (split-K partials and the like): device memory of
// kCublasLtWorkspaceBytes, allocated once on first use and never freed. One stream means
// one matmul uses it at a time.
constexpr std::size_t kCublasLtWorkspaceBytes = std::size_t(32) << 20;
void* cublas_lt_workspace();

// Throw std::runtime_error("cuda: <what>: <reason>") unless the call succeeded (cuBLAS
// and cuBLASLt share the status type).
void check(cudaError_t status, const char* what);
void check_cublas(cublasStatus_t status, const char* what);

}  // namespace wedge::cuda
