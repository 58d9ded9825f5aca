// The wedge CUDA stream and the cuBLAS / cuBLASLt handles (see cuda_stream.h).
#include "engine/cuda_stream.h"

#include <stdexcept>
#include <string>

namespace wedge::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver, or a driver without devices: clear the sticky error and report none.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void use_device(int ordinal) {
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count)
    throw std::invalid_argument("cuda: there is no GPU " + std::to_string(ordinal) + " (this process sees " +
                                std::to_string(count) + ")");
  check(cudaSetDevice(ordinal), "choosing the GPU");
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorName(status) + " (" +
                           cudaGetErrorString(status) + ")");
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string("cuda: ") + what + ": cuBLAS status " +
                           std::to_string(static_cast<int>(status)) + " (" + cublasGetStatusName(status) + ")");
}

namespace {
thread_local cudaStream_t t_override = nullptr;
}

StreamOverride::StreamOverride(cudaStream_t other) : previous_(t_override) { t_override = other; }
StreamOverride::~StreamOverride() { t_override = previous_; }

cudaStream_t stream() {
  if (t_override != nullptr) return t_override;
  // A non-blocking stream does not serialise with the legacy default stream, which
  // wedge never uses; every copy is issued on this stream explicitly.
  static const cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    check(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking), "creating the wedge stream");
    return created;
  }();
  return s;
}

cublasHandle_t cublas() {
  static const cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check_cublas(cublasCreate(&created), "cublasCreate");
    check_cublas(cublasSetStream(created, stream()), "cublasSetStream");
    // Plain FP32 arithmetic (no TF32 tensor cores), so results match the CPU within
    // float rounding; alpha and beta are passed as host values.
    check_cublas(cublasSetMathMode(created, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check_cublas(cublasSetPointerMode(created, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
    return created;
  }();
  return h;
}

cublasLtHandle_t cublas_lt() {
  static const cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    check_cublas(cublasLtCreate(&created), "cublasLtCreate");
    return created;
  }();
  return h;
}

void* cublas_lt_workspace() {
  static void* const workspace = [] {
    void* ptr = nullptr;
    check(cudaMalloc(&ptr, kCublasLtWorkspaceBytes), "cudaMalloc of the cuBLASLt workspace");
    return ptr;
  }();
  return workspace;
}

}  // namespace wedge::cuda
