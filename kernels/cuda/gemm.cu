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
// Precision::F32 (the default) is FP32 throughout (the cuBLAS handle's default math mode;
// CUBLAS_COMPUTE_32F for cuBLASLt, never the TF32 compute types), so results match the CPU
// within float rounding. Precision::BF16 is mixed precision: bf16.cu first rounds every
// element of op(A) and op(B) to bf16 (the reference's rule, bit for bit) into scratch
// copies, and cuBLAS / cuBLASLt multiply the copies as CUDA_R_16BF on the tensor cores with
// CUBLAS_COMPUTE_32F: products of bf16 values are exact in fp32 and are summed in fp32 into
// the fp32 C; alpha, beta, C, the bias and the GELU stay fp32, and the epilogue is the same
// in both precisions (plain GEMM: cublasGemmEx / cublasGemmStridedBatchedEx). cuBLAS and
// cuBLASLt give the same bits on every run for the same shapes (and operand alignments) on
// the same GPU and toolkit, so GEMM is deterministic too. The hand-written GEMM ladder that
// explains what cuBLAS does lives in bench/cuda/gemm_ladder.cu.
#include <climits>
#include <cstdint>
#include <optional>

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

// The operands the column-major product reads. F32: A and B themselves. BF16: copies of
// them rounded to bf16 by bf16.cu, in scratch borrowed for the duration of the call (the
// product is queued before the object goes, and the stream keeps the order).
//
// Each operand is copied as the mapped GEMM stores it (rows x cols, column-major, leading
// dimension ld, the transpose flag unchanged), so the mapping and the cuBLAS calls are the
// same as in fp32; only the leading dimensions and batch strides become the copies'. A copy
// is dense except that its leading dimension is rounded up to kBf16LdAlign elements: every
// column, and every matrix of a batch, then starts on a 16-byte boundary, which the bf16
// tensor-core kernels want. The padding is neither written nor read. A batch that broadcasts
// an operand (stride 0) copies that one matrix once and keeps stride 0; otherwise every
// matrix is copied through its own stride, so any stride (even overlapping matrices) reads
// exactly what the fp32 GEMM would.
//
// In the host emulation the rounded copies are widened back to floats (bf16 is the top
// half of a float, so this is exact) for column_major_gemm_host, and g's operand pointers
// are redirected to them: the emulated product multiplies exactly the bf16 values the
// conversion kernel wrote, laid out as cuBLAS would read them.
constexpr i64 kBf16LdAlign = 8;

class GemmOperands {
 public:
  // Under BF16, rewrites g's leading dimensions and batch strides of A and B (and, in the
  // emulation, the pointers) to those of the copies.
  GemmOperands(launch::ColumnMajorGemm& g, Precision precision)
      : bf16_(precision == Precision::BF16), a_(g.a), b_(g.b) {
    if (!bf16_) return;
    a_ = round_operand(g.a, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.batch, g.lda, g.stride_a, a_copy_);
    b_ = round_operand(g.b, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.batch, g.ldb, g.stride_b, b_copy_);
#if defined(WEDGE_CUDA_EMULATE)
    g.a = widen(*a_copy_, g.lda, g.stride_a, g.trans_a ? g.m : g.k, g.batch, a_wide_);
    g.b = widen(*b_copy_, g.ldb, g.stride_b, g.trans_b ? g.k : g.n, g.batch, b_wide_);
#endif
  }
  GemmOperands(const GemmOperands&) = delete;
  GemmOperands& operator=(const GemmOperands&) = delete;

  bool bf16() const { return bf16_; }
  const void* a() const { return a_; }  // float (F32) or bf16 bits (BF16)
  const void* b() const { return b_; }
  std::size_t elem_size() const { return bf16_ ? sizeof(std::uint16_t) : sizeof(float); }

 private:
  // Copies one stored operand into `copy`, rounded; updates ld and stride to the copy's.
  static const void* round_operand(const float* src, i64 rows, i64 cols, i64 batch, i64& ld, i64& stride,
                                   std::optional<Scratch<std::uint16_t>>& copy) {
    const i64 copies = batch > 1 && stride != 0 ? batch : 1;
    const i64 copy_ld = launch::round_up(rows, kBf16LdAlign), copy_stride = copy_ld * cols;
    copy.emplace(copies * copy_stride);
    CopyLayout l;
    l.ndim = 3;
    l.shape[0] = copies, l.shape[1] = cols, l.shape[2] = rows;
    l.stride_src[0] = stride, l.stride_src[1] = ld, l.stride_src[2] = 1;
    l.stride_dst[0] = copy_stride, l.stride_dst[1] = copy_ld, l.stride_dst[2] = 1;
    round_to_bf16(l, src, copy->get());
    ld = copy_ld;
    stride = copies > 1 ? copy_stride : 0;
    return copy->get();
  }
#if defined(WEDGE_CUDA_EMULATE)
  static const float* widen(const Scratch<std::uint16_t>& copy, i64 ld, i64 stride, i64 cols, i64 batch,
                            std::vector<float>& wide) {
    const i64 count = (stride != 0 ? batch : 1) * ld * cols;
    wide.resize(static_cast<std::size_t>(count));
    for (i64 i = 0; i < count; ++i) {
      const std::uint32_t bits = std::uint32_t{copy.get()[i]} << 16;
      std::memcpy(&wide[static_cast<std::size_t>(i)], &bits, sizeof(float));
    }
    return wide.data();
  }
#endif

  bool bf16_;
  const void* a_;
  const void* b_;
  std::optional<Scratch<std::uint16_t>> a_copy_, b_copy_;
#if defined(WEDGE_CUDA_EMULATE)
  std::vector<float> a_wide_, b_wide_;
#endif
};

#if !defined(WEDGE_CUDA_EMULATE)

int to_int(i64 value, const char* what) {
  if (value < 0 || value > INT_MAX) {
    throw std::runtime_error(std::string("cuda gemm: ") + what + " = " + std::to_string(value) +
                             " does not fit cuBLAS's 32-bit arguments");
  }
  return static_cast<int>(value);
}

// The plain GEMM: C = alpha op(A) op(B) + beta C, no epilogue. The operands are ops's
// (bf16 copies under BF16: cublasGemmEx with CUDA_R_16BF operands, an fp32 C and fp32
// accumulation; the default math mode lets it use the tensor cores).
void cublas_gemm(const launch::ColumnMajorGemm& g, const GemmOperands& ops) {
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = to_int(g.m, "m"), n = to_int(g.n, "n"), k = to_int(g.k, "k");
  const int lda = to_int(g.lda, "lda"), ldb = to_int(g.ldb, "ldb"), ldc = to_int(g.ldc, "ldc");
  if (ops.bf16()) {
    if (g.batch == 1) {
      ::wedge::cuda::check_cublas(cublasGemmEx(::wedge::cuda::cublas(), op_a, op_b, m, n, k, &g.alpha, ops.a(),
                                               CUDA_R_16BF, lda, ops.b(), CUDA_R_16BF, ldb, &g.beta, g.c,
                                               CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                  "cublasGemmEx (bf16)");
    } else {
      ::wedge::cuda::check_cublas(
          cublasGemmStridedBatchedEx(::wedge::cuda::cublas(), op_a, op_b, m, n, k, &g.alpha, ops.a(), CUDA_R_16BF,
                                     lda, g.stride_a, ops.b(), CUDA_R_16BF, ldb, g.stride_b, &g.beta, g.c,
                                     CUDA_R_32F, ldc, g.stride_c, to_int(g.batch, "batch"), CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx (bf16)");
    }
    return;
  }
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

void make_layout(LtLayout& l, cudaDataType_t type, i64 rows, i64 cols, i64 ld, i64 batch, i64 stride,
                 const char* what) {
  ::wedge::cuda::check_cublas(
      cublasLtMatrixLayoutCreate(&l.layout, type, static_cast<std::uint64_t>(rows),
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
// transposes, epilogue, beta == 0, in place or not, the operands' precision) and the
// promised alignments, never on anything else; it is looked up once per distinct problem
// and kept, so the same shape always runs the same kernel and repeated calls skip the
// heuristic.
using LtKey = std::tuple<bool, bool, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, bool, bool, bool, unsigned,
                         unsigned, unsigned, unsigned, unsigned, bool>;
struct LtChoice {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

// D = alpha op(A) op(B) + beta C + bias (g.bias may be null; g.d may differ from g.c, laid
// out alike), A and B read from ops (CUDA_R_16BF copies under BF16; C, D, the bias, alpha,
// beta and the accumulation stay fp32). Returns false (having queued nothing) when
// cuBLASLt offers no algorithm.
bool lt_gemm(const launch::ColumnMajorGemm& g, const GemmOperands& ops) {
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // beta == 0: C is not read, so D is handed over as C too (an in-place product).
  const float* c = g.beta == 0.0f ? g.d : g.c;
  const unsigned align_a = launch::gemm_alignment_bytes(ops.a(), g.batch > 1 ? g.stride_a : 0, ops.elem_size());
  const unsigned align_b = launch::gemm_alignment_bytes(ops.b(), g.batch > 1 ? g.stride_b : 0, ops.elem_size());
  const cudaDataType_t operand_type = ops.bf16() ? CUDA_R_16BF : CUDA_R_32F;
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
  make_layout(la, operand_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a,
              "cublasLtMatrixLayoutCreate(A)");
  make_layout(lb, operand_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b,
              "cublasLtMatrixLayoutCreate(B)");
  make_layout(lc, CUDA_R_32F, g.m, g.n, g.ldc, g.batch, g.stride_c, "cublasLtMatrixLayoutCreate(C, D)");

  static std::mutex mutex;
  static std::map<LtKey, LtChoice> choices;
  const LtKey key{g.trans_a, g.trans_b, g.m,          g.n,       g.k,           g.lda,     g.ldb,
                  g.ldc,     g.stride_a, g.stride_b,  g.stride_c, g.batch,      g.bias != nullptr,
                  g.beta == 0.0f, c == g.d, align_a,  align_b,   align_c,       align_d,   align_bias,
                  ops.bf16()};
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
      cublasLtMatmul(::wedge::cuda::cublas_lt(), op.desc, &g.alpha, ops.a(), la.layout, ops.b(), lb.layout, &g.beta, c,
                     lc.layout, g.d, lc.layout, &choice.algo, ::wedge::cuda::cublas_lt_workspace(),
                     ::wedge::cuda::kCublasLtWorkspaceBytes, ::wedge::cuda::stream()),
      "cublasLtMatmul");
  return true;
}

#endif  // !WEDGE_CUDA_EMULATE

// The plain product into C (g.bias and g.d ignored), then, when the GEMM has one, the
// epilogue as a second pass: the unfused path, and the fused path's fallback.
void product_then_epilogue(const GemmArgs<float>& args, launch::ColumnMajorGemm g, const GemmOperands& ops) {
  g.bias = nullptr;
  g.d = g.c;
#if defined(WEDGE_CUDA_EMULATE)
  (void)ops;  // g's operand pointers already are the widened bf16 copies under BF16
  launch::column_major_gemm_host(g);
#else
  cublas_gemm(g, ops);
#endif
  if (args.has_epilogue()) launch_epilogue(args, EpilogueSource::C, args.bias);
}

}  // namespace gemm_impl

using namespace gemm_impl;

void gemm_unfused(const GemmArgs<float>& args) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return;
  if (args.k <= 0) {
    launch_epilogue(args, EpilogueSource::ScaledC, args.bias);
    return;
  }
  launch::ColumnMajorGemm g = launch::row_major_as_column_major(args);
  const GemmOperands ops(g, args.precision);
  product_then_epilogue(args, g, ops);
}

void gemm(const GemmArgs<float>& args) {
  if (args.m <= 0 || args.n <= 0 || args.batch <= 0) return;
  if (args.k <= 0 || !args.has_epilogue()) return gemm_unfused(args);
  // The product and the bias in one pass, into C, or into aux when a GELU follows.
  launch::ColumnMajorGemm g = launch::row_major_as_column_major(args);
  const GemmOperands ops(g, args.precision);  // rounded once, also for the fallback
  const bool gelu_follows = args.act == Activation::Gelu;
  g.d = gelu_follows ? args.aux : args.c;
#if defined(WEDGE_CUDA_EMULATE)
  launch::column_major_gemm_host(g);
#else
  if (!lt_gemm(g, ops)) return product_then_epilogue(args, g, ops);
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
