// The CUDA causal attention teaching ladder (forward): naive thread per query row ->
// a row of scores in shared memory with tree reductions -> a warp per row with shuffles ->
// flash-style tiles with an online softmax and the causal tiles skipped (the kernels and
// what each rung changes are in attention_ladder.cuh), each checked against a float64
// reference and timed on the shapes of the paper models.
//
//   build/bench/cuda_attention_ladder
//
// Compute-bound at these lengths: prints GFLOP/s counting only the causal half (4 dh flops
// per query-key pair with key <= query) and % of cuBLAS: the rate cuBLAS SGEMM reaches on
// this GPU for the score product Q K^T of the same heads (strided batched, FP32, all T x T
// scores), measured here as bench/cuda/gemm_ladder.cu measures its peak. Exits non-zero if
// a rung is wrong. Without a GPU the same kernels run on the host emulation in
// tests/kernels/test_cuda_ladders_emulated.cpp.
#include <cublas_v2.h>

#include <cstdio>
#include <random>
#include <vector>

#include "attention_ladder.cuh"

using namespace wedge::ladders;
using namespace wedge::ladders::attention;

namespace {

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "attention_ladder: %s: cuBLAS status %d\n", what, static_cast<int>(status));
    std::exit(2);
  }
}

// GFLOP/s of cuBLAS FP32 SGEMM on S = Q K^T for every head: (T x dh) times (dh x T), row
// major, which is column-major S^T = K Q^T (the mapping of kernels/cuda/gemm.cu).
double cublas_score_gflops(cublasHandle_t handle, const float* q, const float* k, float* scores, int BH, int T,
                           int dh) {
  const float one = 1.0f, zero = 0.0f;
  const long long head = (long long)T * dh, square = (long long)T * T;
  const float ms = time_ms([&] {
    check_cublas(cublasSgemmStridedBatched(handle, CUBLAS_OP_T, CUBLAS_OP_N, T, T, dh, &one, k, dh, head, q, dh, head,
                                           &zero, scores, T, square, BH),
                 "cublasSgemmStridedBatched");
  });
  return 2.0 * BH * double(T) * T * dh / (ms * 1e-3) / 1e9;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("attention_ladder: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("causal attention ladder on %s (sm_%d%d), FP32 forward\n", prop.name, prop.major, prop.minor);
  cublasHandle_t handle;
  check_cublas(cublasCreate(&handle), "cublasCreate");
  check_cublas(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // FP32, no TF32

  struct Shape {
    int BH, T, dh;
    const char* what;
  };
  const Shape shapes[] = {{32, 1024, 64, "batch x heads 32, T 1024, dh 64"},
                          {8, 4096, 64, "batch x heads 8, T 4096, dh 64"}};
  bool all_ok = true;
  for (const Shape& s : shapes) {
    const std::size_t n = std::size_t(s.BH) * s.T * s.dh;
    std::vector<float> q(n), k(n), v(n);
    std::mt19937 gen(1234);
    std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
    for (float& x : q) x = dist(gen);
    for (float& x : k) x = dist(gen);
    for (float& x : v) x = dist(gen);
    std::vector<double> out_ref;
    reference(q, k, v, s.BH, s.T, s.dh, out_ref);

    DeviceBuffer d_q(n * sizeof(float)), d_k(n * sizeof(float)), d_v(n * sizeof(float)), d_out(n * sizeof(float)),
        d_scores(std::size_t(s.BH) * s.T * s.T * sizeof(float));
    d_q.upload(q);
    d_k.upload(k);
    d_v.upload(v);
    const double peak =
        cublas_score_gflops(handle, d_q.as<float>(), d_k.as<float>(), d_scores.as<float>(), s.BH, s.T, s.dh);
    const double flop = causal_flops(s.BH, s.T, s.dh);

    std::printf("\n%s\n", s.what);
    std::printf("  %-24s %9s %10s %9s %11s\n", "kernel", "ms", "GFLOP/s", "% cuBLAS", "rel. error");
    std::printf("  %-24s %9s %10.0f %8.1f%% %11s\n", "cuBLAS SGEMM (Q K^T)", "-", peak, 100.0, "-");
    for (const Rung rung : kRungs) {
      if (!supported(rung, s.T, s.dh)) {
        std::printf("  %-24s   not for this shape\n", rung_name(rung));
        continue;
      }
      auto launch = [&] {
        run(rung, d_q.as<float>(), d_k.as<float>(), d_v.as<float>(), s.BH, s.T, s.dh, d_out.as<float>());
      };
      d_out.poison();
      launch();
      check(cudaGetLastError(), rung_name(rung));
      check(cudaDeviceSynchronize(), rung_name(rung));
      const double err = relative_error(d_out.download<float>(n), out_ref);
      const bool ok = err <= kTolerance;
      all_ok = all_ok && ok;
      const float ms = time_ms(launch);
      const double gflops = flop / (ms * 1e-3) / 1e9;
      std::printf("  %-24s %9.3f %10.0f %8.1f%% %11.2e %s\n", rung_name(rung), ms, gflops, 100.0 * gflops / peak, err,
                  ok ? "" : "WRONG");
    }
  }
  cublasDestroy(handle);
  std::printf("\n%s\n", all_ok ? "all rungs agree with the float64 reference" : "SOME RUNGS ARE WRONG");
  return all_ok ? 0 : 1;
}
