// Matrix multiply through cuBLAS. cuBLAS is column-major and wedge is row-major: the
// mapping (launch.h row_major_as_column_major) swaps the operands and the sizes instead
// of moving data, and is unit tested on the host. One call covers a whole batch
// (cublasSgemmStridedBatched; stride 0 broadcasts one matrix over the batch).
//
// FP32 throughout (the handle's default math mode, no TF32), so results match the CPU
// within float rounding. cuBLAS gives the same bits on every run for the same shapes on
// the same GPU and toolkit, so GEMM is deterministic too. The hand-written GEMM ladder
// that explains what cuBLAS does lives in bench/cuda/gemm_ladder.cu.
#include <climits>

#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace gemm_impl {

// C = beta * C (beta == 0: C = 0 without reading it) for the k == 0 product, which
// cuBLAS may treat as a no-op.
__global__ void scale_matrix_kernel(float* c, i64 m, i64 n, i64 ldc, i64 stride_c, i64 batch, float beta) {
  const i64 total = batch * m * n;
  for (i64 e = global_thread(); e < total; e += grid_threads()) {
    const i64 col = e % n, rest = e / n, row = rest % m, b = rest / m;
    float* at = c + b * stride_c + row * ldc + col;
    *at = beta == 0.0f ? 0.0f : beta * *at;
  }
}

int to_int(i64 value, const char* what) {
  if (value < 0 || value > INT_MAX) {
    throw std::runtime_error(std::string("cuda gemm: ") + what + " = " + std::to_string(value) +
                             " does not fit cuBLAS's 32-bit arguments");
  }
  return static_cast<int>(value);
}

}  // namespace gemm_impl

using namespace gemm_impl;

void gemm(const GemmArgs<float>& args) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return;
  if (args.k <= 0) {
    const i64 total = args.batch * args.m * args.n;
    WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(total)), launch::kElementwiseThreads, 0, scale_matrix_kernel)(
        args.c, args.m, args.n, args.ldc, args.stride_c, args.batch, args.beta);
    check_launch("scale_matrix_kernel");
    return;
  }
  const launch::ColumnMajorGemm g = launch::row_major_as_column_major(args);
#if defined(WEDGE_CUDA_EMULATE)
  launch::column_major_gemm_host(g);
#else
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = to_int(g.m, "m"), n = to_int(g.n, "n"), k = to_int(g.k, "k");
  const int lda = to_int(g.lda, "lda"), ldb = to_int(g.ldb, "ldb"), ldc = to_int(g.ldc, "ldc");
  if (g.batch == 1) {
    ::wedge::cuda::check_cublas(cublasSgemm(::wedge::cuda::cublas(), op_a, op_b, m, n, k, &g.alpha, g.a, lda, g.b,
                                            ldb, &g.beta, g.c, ldc),
                                "cublasSgemm");
  } else {
    ::wedge::cuda::check_cublas(
        cublasSgemmStridedBatched(::wedge::cuda::cublas(), op_a, op_b, m, n, k, &g.alpha, g.a, lda, g.stride_a,
                                  g.b, ldb, g.stride_b, &g.beta, g.c, ldc, g.stride_c, to_int(g.batch, "batch")),
        "cublasSgemmStridedBatched");
  }
#endif
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
