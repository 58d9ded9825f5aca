// Matrix multiply through cuBLAS and cuBLASLt. cuBLAS is column-major and wedge is
// row-major: the mapping (launch.h row_major_as_column_major) swaps the operands and the
// sizes instead of moving data, and is unit tested on the host. One call covers a whole
// batch (strided batches; stride 0 broadcasts one matrix over the batch).
//
// The epilogue (kernels.h GemmArgs: bias, activation, aux):
//   - A plain GEMM (no bias, no activation) is cublasSgemm / cublasSgemmStridedBatched.
//   - With an epilogue, cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS adds the bias inside
//     the GEMM, so C is written once. The row-major bias (one value per column j) is one
//     value per row of the column-major product, which is what that epilogue broadcasts.
//   - GELU is NOT cuBLASLt's: its GELU epilogues use the tanh approximation, while the
//     engine's GELU is the exact x * Phi(x). So cuBLASLt writes h = alpha AB + beta C + bias
//     into aux (D = aux), and epilogue_kernel then writes C = gelu(h), with the same erf
//     formula as the unary GELU kernel (common.cuh gelu).
//   - Where cuBLASLt has no algorithm for a configuration, the plain cuBLAS GEMM runs and
//     epilogue_kernel adds the bias (and applies the GELU, keeping h in aux) in a second
//     pass. k == 0 (the product is empty) is epilogue_kernel alone.
//   - The epilogue's backward (bias_act_backward): under GELU an element-wise kernel forms
//     gh = gy * gelu'(h) from the h kept in aux; the bias gradient is the column sum over
//     rows, handed to reduce.cu's deterministic column sums (never atomics).
//
// FP32 throughout (the cuBLAS handle's default math mode; CUBLAS_COMPUTE_32F for cuBLASLt,
// never the TF32 compute types), so results match the CPU within float rounding. cuBLAS
// and cuBLASLt give the same bits on every run for the same shapes (and operand
// alignments) on the same GPU and toolkit, so GEMM is deterministic too. The hand-written
// GEMM ladder that explains what cuBLAS does lives in bench/cuda/gemm_ladder.cu.
#include <climits>

#include "kernels/cuda/entries.cuh"

#if !defined(WEDGE_CUDA_EMULATE)
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#endif

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace gemm_impl {

// Where the epilogue finds h before the bias (all laid out like C: ldc, stride_c):
enum class EpilogueSource : int {
  ScaledC,  // the product is empty (k == 0): h = beta * C, or 0 when beta == 0 (C not read)
  C,        // the product (alpha AB + beta C) is already in C
  Aux,      // h, bias included, is already in aux (cuBLASLt wrote it): only the GELU is left
};

// Per element of the (batch, m, n) result:
//   h = source (+ bias[j]);  act None: C = h;  act Gelu: aux = h (unless already there),
//   C = gelu(h).
// `dense`: C has no padding (ldc == n, matrices back to back), so element e sits at e and
// only the bias needs its column.
__global__ void epilogue_kernel(EpilogueSource source, float beta, const float* bias, Activation act, float* c,
                                float* aux, i64 m, i64 n, i64 ldc, i64 stride_c, i64 batch, bool dense) {
  const i64 total = batch * m * n;
  for (i64 e = global_thread(); e < total; e += grid_threads()) {
    i64 col = 0, at = e;
    if (!dense) {
      const i64 rest = e / n, row = rest % m, b = rest / m;
      col = e - rest * n;
      at = b * stride_c + row * ldc + col;
    } else if (bias != nullptr) {
      col = e % n;
    }
    float h;
    if (source == EpilogueSource::ScaledC) {
      h = beta == 0.0f ? 0.0f : beta * c[at];
    } else if (source == EpilogueSource::C) {
      h = c[at];
    } else {
      h = aux[at];
    }
    if (bias != nullptr) h += bias[col];
    if (act == Activation::Gelu) {
      if (source != EpilogueSource::Aux) aux[at] = h;
      c[at] = gelu(h);
    } else {
      c[at] = h;
    }
  }
}

void launch_epilogue(const GemmArgs<float>& args, EpilogueSource source, const float* bias) {
  const i64 total = args.batch * args.m * args.n;
  const bool dense = args.ldc == args.n && (args.batch == 1 || args.stride_c == args.m * args.n);
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(total)), launch::kElementwiseThreads, 0, epilogue_kernel)(
      source, args.beta, bias, args.act, args.c, args.aux, args.m, args.n, args.ldc, args.stride_c, args.batch,
      dense);
  check_launch("epilogue_kernel");
}

// gh = gy * gelu'(h), h being what the forward GEMM kept in aux. Element by element, so gh
// may be gy itself. The same derivative as the unary GELU backward (common.cuh).
__global__ void gelu_backward_kernel(const float* aux, const float* gy, float* gh, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) gh[i] = gy[i] * gelu_derivative(aux[i]);
}

#if !defined(WEDGE_CUDA_EMULATE)

int to_int(i64 value, const char* what) {
  if (value < 0 || value > INT_MAX) {
    throw std::runtime_error(std::string("cuda gemm: ") + what + " = " + std::to_string(value) +
                             " does not fit cuBLAS's 32-bit arguments");
  }
  return static_cast<int>(value);
}

// The plain GEMM: C = alpha op(A) op(B) + beta C, no epilogue.
void cublas_gemm(const launch::ColumnMajorGemm& g) {
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
}

// cuBLASLt descriptors, destroyed with the call that made them (host objects, cheap).
struct LtMatmulDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~LtMatmulDesc() {
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};
struct LtLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  ~LtLayout() {
    if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
  }
};
struct LtPreference {
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtPreference() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
  }
};

void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value, std::size_t size,
              const char* what) {
  ::wedge::cuda::check_cublas(cublasLtMatmulDescSetAttribute(desc, attr, value, size), what);
}

void make_layout(LtLayout& l, i64 rows, i64 cols, i64 ld, i64 batch, i64 stride, const char* what) {
  ::wedge::cuda::check_cublas(
      cublasLtMatrixLayoutCreate(&l.layout, CUDA_R_32F, static_cast<std::uint64_t>(rows),
                                 static_cast<std::uint64_t>(cols), static_cast<std::int64_t>(ld)),
      what);
  if (batch > 1) {
    const std::int32_t count = to_int(batch, "batch");
    const std::int64_t offset = stride;
    ::wedge::cuda::check_cublas(cublasLtMatrixLayoutSetAttribute(l.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                                 sizeof(count)),
                                "cublasLtMatrixLayoutSetAttribute(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT)");
    ::wedge::cuda::check_cublas(cublasLtMatrixLayoutSetAttribute(l.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                 &offset, sizeof(offset)),
                                "cublasLtMatrixLayoutSetAttribute(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET)");
  }
}

// The algorithm cuBLASLt's heuristic picks depends on the problem (shapes, strides,
// transposes, epilogue, beta == 0, in place or not) and the promised alignments, never on
// anything else; it is looked up once per distinct problem and kept, so the same shape
// always runs the same kernel and repeated calls skip the heuristic.
using LtKey = std::tuple<bool, bool, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, bool, bool, bool, unsigned,
                         unsigned, unsigned, unsigned, unsigned>;
struct LtChoice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

// D = alpha op(A) op(B) + beta C + bias (g.bias may be null; g.d may differ from g.c, laid
// out alike). Returns false (having queued nothing) when cuBLASLt offers no algorithm.
bool lt_gemm(const launch::ColumnMajorGemm& g) {
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // beta == 0: C is not read, so D is handed over as C too (an in-place product).
  const float* c = g.beta == 0.0f ? g.d : g.c;
  const unsigned align_a = launch::gemm_alignment_bytes(g.a, g.batch > 1 ? g.stride_a : 0, sizeof(float));
  const unsigned align_b = launch::gemm_alignment_bytes(g.b, g.batch > 1 ? g.stride_b : 0, sizeof(float));
  const unsigned align_c = launch::gemm_alignment_bytes(c, g.batch > 1 ? g.stride_c : 0, sizeof(float));
  const unsigned align_d = launch::gemm_alignment_bytes(g.d, g.batch > 1 ? g.stride_c : 0, sizeof(float));
  const unsigned align_bias = g.bias != nullptr ? launch::gemm_alignment_bytes(g.bias, 0, sizeof(float)) : 0u;

  LtMatmulDesc op;
  ::wedge::cuda::check_cublas(cublasLtMatmulDescCreate(&op.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                              "cublasLtMatmulDescCreate");
  set_desc(op.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a), "cublasLtMatmulDescSetAttribute(TRANSA)");
  set_desc(op.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b), "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (g.bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    set_desc(op.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue),
             "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    // Set before the heuristic, which looks at the pointer's alignment. The batch stride
    // of the bias stays 0: one bias for every matrix of the batch.
    set_desc(op.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }

  LtLayout la, lb, lc;
  make_layout(la, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a,
              "cublasLtMatrixLayoutCreate(A)");
  make_layout(lb, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b,
              "cublasLtMatrixLayoutCreate(B)");
  make_layout(lc, g.m, g.n, g.ldc, g.batch, g.stride_c, "cublasLtMatrixLayoutCreate(C, D)");

  static std::mutex mutex;
  static std::map<LtKey, LtChoice> choices;
  const LtKey key{g.trans_a, g.trans_b, g.m,          g.n,       g.k,           g.lda,     g.ldb,
                  g.ldc,     g.stride_a, g.stride_b,  g.stride_c, g.batch,      g.bias != nullptr,
                  g.beta == 0.0f, c == g.d, align_a,  align_b,   align_c,       align_d,   align_bias};
  LtChoice choice;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = choices.find(key);
    if (it != choices.end()) {
      choice = it->second;
    } else {
      LtPreference pref;
      ::wedge::cuda::check_cublas(cublasLtMatmulPreferenceCreate(&pref.pref), "cublasLtMatmulPreferenceCreate");
      const std::uint64_t workspace = ::wedge::cuda::kCublasLtWorkspaceBytes;
      ::wedge::cuda::check_cublas(
          cublasLtMatmulPreferenceSetAttribute(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof(workspace)),
          "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
      const std::pair<cublasLtMatmulPreferenceAttributes_t, unsigned> alignments[] = {
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
          {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
      for (const auto& [attr, bytes] : alignments) {
        const std::uint32_t value = bytes;
        ::wedge::cuda::check_cublas(cublasLtMatmulPreferenceSetAttribute(pref.pref, attr, &value, sizeof(value)),
                                    "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
      }
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(::wedge::cuda::cublas_lt(), op.desc, la.layout,
                                                                   lb.layout, lc.layout, lc.layout, pref.pref, 1,
                                                                   &result, &returned);
      // NOT_SUPPORTED: no algorithm for this configuration (the caller falls back).
      if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
        ::wedge::cuda::check_cublas(status, "cublasLtMatmulAlgoGetHeuristic");
      }
      choice.found = status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS &&
                     result.workspaceSize <= ::wedge::cuda::kCublasLtWorkspaceBytes;
      if (choice.found) choice.algo = result.algo;
      choices.emplace(key, choice);
    }
  }
  if (!choice.found) return false;
  ::wedge::cuda::check_cublas(
      cublasLtMatmul(::wedge::cuda::cublas_lt(), op.desc, &g.alpha, g.a, la.layout, g.b, lb.layout, &g.beta, c,
                     lc.layout, g.d, lc.layout, &choice.algo, ::wedge::cuda::cublas_lt_workspace(),
                     ::wedge::cuda::kCublasLtWorkspaceBytes, ::wedge::cuda::stream()),
      "cublasLtMatmul");
  return true;
}

#endif  // !WEDGE_CUDA_EMULATE

}  // namespace gemm_impl

using namespace gemm_impl;

void gemm_unfused(const GemmArgs<float>& args) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return;
  if (args.k <= 0) {
    launch_epilogue(args, EpilogueSource::ScaledC, args.bias);
    return;
  }
  launch::ColumnMajorGemm g = launch::row_major_as_column_major(args);
  g.bias = nullptr;
#if defined(WEDGE_CUDA_EMULATE)
  launch::column_major_gemm_host(g);
#else
  cublas_gemm(g);
#endif
  if (args.has_epilogue()) launch_epilogue(args, EpilogueSource::C, args.bias);
}

void gemm(const GemmArgs<float>& args) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return;
  if (args.k <= 0 || !args.has_epilogue()) return gemm_unfused(args);
  // The product and the bias in one pass, into C, or into aux when a GELU follows.
  launch::ColumnMajorGemm g = launch::row_major_as_column_major(args);
  const bool gelu_follows = args.act == Activation::Gelu;
  g.d = gelu_follows ? args.aux : args.c;
#if defined(WEDGE_CUDA_EMULATE)
  launch::column_major_gemm_host(g);
#else
  if (!lt_gemm(g)) return gemm_unfused(args);
#endif
  if (gelu_follows) launch_epilogue(args, EpilogueSource::Aux, nullptr);
}

// The bias gradient is a column sum over rows: the deterministic two-stage reduction of
// reduce.cu (sum_middle_axis over (1, rows, n)), never atomics.
void bias_act_backward(Activation act, const float* aux, const float* gy, i64 rows, i64 n, float* gh,
                       float* gbias) {
  if (n <= 0) return;
  const float* g = gy;
  if (act == Activation::Gelu) {
    const i64 total = rows * n;
    if (total > 0) {
      WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(total)), launch::kElementwiseThreads, 0,
                   gelu_backward_kernel)(aux, gy, gh, total);
      check_launch("gelu_backward_kernel");
    }
    g = gh;
  }
  if (gbias != nullptr) sum_middle_axis(g, gbias, 1, rows, n);
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
