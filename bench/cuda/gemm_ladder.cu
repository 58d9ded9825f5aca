// The CUDA GEMM teaching ladder: four hand-written versions of C = A B (row-major FP32,
// A M x K, B K x N), each a step up from the last, each checked against cuBLAS and timed
// on the shapes of the paper models:
//
//   1. naive          one thread per element of C, every operand read from global memory
//                     (K loads of A and B per output: bandwidth-bound)
//   2. tiled          32 x 32 tiles of A and B staged in shared memory, so each value
//                     fetched from DRAM is used 32 times
//   3. register       a 128 x 128 block tile, each thread computing an 8 x 8 patch from
//                     registers: 8 + 8 shared loads feed 64 multiply-adds (the structure of
//                     every fast SGEMM)
//   4. tensor cores   WMMA on TF32 (sm_80+): each warp issues 16 x 16 x 8 matrix
//                     instructions; inputs rounded to TF32 (10-bit mantissa), so it is
//                     checked with a looser tolerance and compared with cuBLAS in TF32 too
//
// Only cuBLAS is wired into the engine (kernels/cuda/gemm.cu); this program explains what
// it does and how far each idea gets. Prints GFLOP/s and % of cuBLAS FP32 (the measured
// peak for FP32 GEMM on this GPU) per shape and rung; exits non-zero if a rung is wrong.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ladder.cuh"

namespace {

using wedge::ladders::check;
using wedge::ladders::time_ms;

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "gemm_ladder: %s: cuBLAS status %d\n", what, static_cast<int>(status));
    std::exit(2);
  }
}

// ---- 1. naive ---------------------------------------------------------------------------
// threadIdx.x runs along a row of C, so a warp reads 32 consecutive B values (coalesced)
// and one A value (broadcast).
__global__ void gemm_naive(int M, int N, int K, const float* A, const float* B, float* C) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[static_cast<size_t>(row) * K + k] * B[static_cast<size_t>(k) * N + col];
  C[static_cast<size_t>(row) * N + col] = acc;
}

// ---- 2. shared-memory tiles --------------------------------------------------------------
constexpr int kTile = 32;
__global__ void gemm_tiled(int M, int N, int K, const float* A, const float* B, float* C) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    // Each thread loads one element of each tile; zeros pad the edges of the matrices.
    As[ty][tx] = (row < M && k0 + tx < K) ? A[static_cast<size_t>(row) * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[static_cast<size_t>(k0 + ty) * N + col] : 0.0f;
    __syncthreads();  // tiles complete
    // As[ty][kk]: one address per warp (broadcast); Bs[kk][tx]: 32 consecutive banks.
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    __syncthreads();  // everyone done before the tiles are overwritten
  }
  if (row < M && col < N) C[static_cast<size_t>(row) * N + col] = acc;
}

// ---- 3. register blocking ------------------------------------------------------------------
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kRegisterThreads = (kBM / kTM) * (kBN / kTN);  // 256
__global__ void __launch_bounds__(kRegisterThreads)
    gemm_register(int M, int N, int K, const float* A, const float* B, float* C) {
  // A is stored transposed (As[k][m]) so a thread's 8 rows are 8 consecutive floats.
  __shared__ float As[kBK][kBM];
  __shared__ float Bs[kBK][kBN];
  const int tid = threadIdx.x;
  const int thread_row = tid / (kBN / kTN), thread_col = tid % (kBN / kTN);
  const int block_row = blockIdx.y * kBM, block_col = blockIdx.x * kBN;
  float acc[kTM][kTN] = {};
  float a_reg[kTM], b_reg[kTN];
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int i = tid; i < kBM * kBK; i += kRegisterThreads) {
      const int r = i / kBK, c = i % kBK;
      const int gr = block_row + r, gc = k0 + c;
      As[c][r] = (gr < M && gc < K) ? A[static_cast<size_t>(gr) * K + gc] : 0.0f;
    }
    for (int i = tid; i < kBK * kBN; i += kRegisterThreads) {
      const int r = i / kBN, c = i % kBN;
      const int gr = k0 + r, gc = block_col + c;
      Bs[r][c] = (gr < K && gc < N) ? B[static_cast<size_t>(gr) * N + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
#pragma unroll
      for (int i = 0; i < kTM; ++i) a_reg[i] = As[kk][thread_row * kTM + i];
#pragma unroll
      for (int j = 0; j < kTN; ++j) b_reg[j] = Bs[kk][thread_col * kTN + j];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] += a_reg[i] * b_reg[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int gr = block_row + thread_row * kTM + i;
    if (gr >= M) continue;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int gc = block_col + thread_col * kTN + j;
      if (gc < N) C[static_cast<size_t>(gr) * N + gc] = acc[i][j];
    }
  }
}

// ---- 4. tensor cores (WMMA, TF32) ------------------------------------------------------------
// A 64 x 64 block tile computed by 4 warps, each owning a 32 x 32 quarter as 2 x 2
// accumulator fragments of 16 x 16. K advances 32 at a time through shared memory, in
// 4 steps of the 16 x 16 x 8 TF32 instruction. WMMA loads need 32-byte aligned rows, hence
// row strides of 40 and 72 floats (multiples of 8; the padding also spreads banks).
constexpr int kWBM = 64, kWBN = 64, kWBK = 32;
constexpr int kWarpsM = 2, kWarpsN = 2, kWmmaThreads = 32 * kWarpsM * kWarpsN;
constexpr int kAStride = kWBK + 8, kBStride = kWBN + 8;
__global__ void __launch_bounds__(kWmmaThreads)
    gemm_wmma_tf32(int M, int N, int K, const float* A, const float* B, float* C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  __shared__ __align__(32) float As[kWBM * kAStride];
  __shared__ __align__(32) float Bs[kWBK * kBStride];
  __shared__ __align__(32) float Cs[kWarpsM * kWarpsN][16 * 16];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_row = warp / kWarpsN, warp_col = warp % kWarpsN;
  const int block_row = blockIdx.y * kWBM, block_col = blockIdx.x * kWBN;

  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int k0 = 0; k0 < K; k0 += kWBK) {
    for (int i = tid; i < kWBM * kWBK; i += kWmmaThreads) {
      const int r = i / kWBK, c = i % kWBK;
      const int gr = block_row + r, gc = k0 + c;
      As[r * kAStride + c] = (gr < M && gc < K) ? A[static_cast<size_t>(gr) * K + gc] : 0.0f;
    }
    for (int i = tid; i < kWBK * kWBN; i += kWmmaThreads) {
      const int r = i / kWBN, c = i % kWBN;
      const int gr = k0 + r, gc = block_col + c;
      Bs[r * kBStride + c] = (gr < K && gc < N) ? B[static_cast<size_t>(gr) * N + gc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kWBK; kk += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a_frag[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b_frag[2];
      for (int i = 0; i < 2; ++i) {
        wmma::load_matrix_sync(a_frag[i], As + (warp_row * 32 + i * 16) * kAStride + kk, kAStride);
        for (int t = 0; t < a_frag[i].num_elements; ++t) a_frag[i].x[t] = wmma::__float_to_tf32(a_frag[i].x[t]);
      }
      for (int j = 0; j < 2; ++j) {
        wmma::load_matrix_sync(b_frag[j], Bs + kk * kBStride + warp_col * 32 + j * 16, kBStride);
        for (int t = 0; t < b_frag[j].num_elements; ++t) b_frag[j].x[t] = wmma::__float_to_tf32(b_frag[j].x[t]);
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();
  }
  // Fragments go through a per-warp 16 x 16 staging tile so the edges of C (N = 30,522 is
  // not a multiple of 16) can be written with bounds checks.
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(Cs[warp], acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int gr = block_row + warp_row * 32 + i * 16 + e / 16;
        const int gc = block_col + warp_col * 32 + j * 16 + e % 16;
        if (gr < M && gc < N) C[static_cast<size_t>(gr) * N + gc] = Cs[warp][e];
      }
      __syncwarp();  // the staging tile is reused for the next fragment
    }
  }
#endif
}

// ---- harness -------------------------------------------------------------------------------

struct Shape {
  int M, N, K;
  const char* what;
};


// Largest |got - ref| relative to the largest |ref|: one number per result.
double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("gemm_ladder: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const bool tensor_cores = prop.major >= 8;
  std::printf("GEMM ladder on %s (sm_%d%d), FP32 row-major C = A B\n", prop.name, prop.major, prop.minor);

  const Shape shapes[] = {{4096, 1024, 256, "FFN up (tokens x d_ff x d)"},
                          {4096, 256, 1024, "FFN down (tokens x d x d_ff)"},
                          {4096, 30522, 256, "tied output head (tokens x vocab x d)"},
                          {256, 256, 4096, "weight gradient (d x d x tokens)"}};
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  bool all_ok = true;

  for (const Shape& s : shapes) {
    const size_t a_size = size_t(s.M) * s.K, b_size = size_t(s.K) * s.N, c_size = size_t(s.M) * s.N;
    std::vector<float> hA(a_size), hB(b_size);
    std::mt19937 gen(1234);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : hA) x = dist(gen);
    for (float& x : hB) x = dist(gen);
    float *A, *B, *C, *C_ref;
    check(cudaMalloc(&A, a_size * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&B, b_size * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&C, c_size * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&C_ref, c_size * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(A, hA.data(), a_size * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(B, hB.data(), b_size * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");

    // cuBLAS, column-major: row-major C = A B is column-major C^T = B^T A^T, i.e. the
    // operands swapped (the mapping kernels/cuda/gemm.cu uses).
    const float one = 1.0f, zero = 0.0f;
    auto cublas_run = [&](float* out) {
      check(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, s.N, s.M, s.K, &one, B, s.N, A, s.K, &zero, out, s.N),
            "cublasSgemm");
    };
    check(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    const float cublas_ms = time_ms([&] { cublas_run(C_ref); });
    check(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH), "cublasSetMathMode");
    const float cublas_tf32_ms = time_ms([&] { cublas_run(C); });
    check(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    std::vector<float> ref(c_size), got(c_size);
    // the reference result: FP32 cuBLAS, computed last into C_ref
    cublas_run(C_ref);
    check(cudaMemcpy(ref.data(), C_ref, c_size * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");

    const double flop = 2.0 * s.M * s.N * s.K;
    auto gflops = [&](float ms) { return flop / (ms * 1e-3) / 1e9; };
    std::printf("\n%d x %d x %d  %s\n", s.M, s.N, s.K, s.what);
    std::printf("  %-22s %9s %10s %9s %11s\n", "kernel", "ms", "GFLOP/s", "% cuBLAS", "rel. error");
    std::printf("  %-22s %9.3f %10.0f %8.1f%% %11s\n", "cuBLAS FP32", cublas_ms, gflops(cublas_ms), 100.0, "-");
    std::printf("  %-22s %9.3f %10.0f %8.1f%% %11s\n", "cuBLAS TF32", cublas_tf32_ms, gflops(cublas_tf32_ms),
                100.0 * cublas_ms / cublas_tf32_ms, "-");

    struct Rung {
      const char* name;
      std::function<void()> run;
      double tolerance;  // relative to the largest |C|
      bool available;
    };
    const Rung rungs[] = {
        {"1 naive",
         [&] {
           dim3 block(32, 8), grid((s.N + 31) / 32, (s.M + 7) / 8);
           gemm_naive<<<grid, block>>>(s.M, s.N, s.K, A, B, C);
         },
         1e-5, true},
        {"2 shared-memory tiles",
         [&] {
           dim3 block(kTile, kTile), grid((s.N + kTile - 1) / kTile, (s.M + kTile - 1) / kTile);
           gemm_tiled<<<grid, block>>>(s.M, s.N, s.K, A, B, C);
         },
         1e-5, true},
        {"3 register blocking",
         [&] {
           dim3 grid((s.N + kBN - 1) / kBN, (s.M + kBM - 1) / kBM);
           gemm_register<<<grid, kRegisterThreads>>>(s.M, s.N, s.K, A, B, C);
         },
         1e-5, true},
        // TF32 keeps 10 mantissa bits: products carry ~5e-4 relative error each
        {"4 tensor cores (TF32)",
         [&] {
           dim3 grid((s.N + kWBN - 1) / kWBN, (s.M + kWBM - 1) / kWBM);
           gemm_wmma_tf32<<<grid, kWmmaThreads>>>(s.M, s.N, s.K, A, B, C);
         },
         2e-3, tensor_cores},
    };
    for (const Rung& r : rungs) {
      if (!r.available) {
        std::printf("  %-22s needs sm_80 or newer\n", r.name);
        continue;
      }
      check(cudaMemset(C, 0xFF, c_size * sizeof(float)), "cudaMemset");  // NaN: unwritten shows
      r.run();
      check(cudaGetLastError(), r.name);
      check(cudaDeviceSynchronize(), r.name);
      check(cudaMemcpy(got.data(), C, c_size * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
      const double err = relative_error(got, ref);
      const bool ok = err <= r.tolerance;
      all_ok = all_ok && ok;
      const float ms = time_ms(r.run);
      std::printf("  %-22s %9.3f %10.0f %8.1f%% %11.2e %s\n", r.name, ms, gflops(ms), 100.0 * cublas_ms / ms, err,
                  ok ? "" : "WRONG");
    }
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(C_ref);
  }
  cublasDestroy(handle);
  std::printf("\n%s\n", all_ok ? "all rungs agree with cuBLAS" : "SOME RUNGS ARE WRONG");
  return all_ok ? 0 : 1;
}
