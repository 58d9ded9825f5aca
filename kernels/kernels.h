// The kernel contract: ONE signature per kernel, shared by every device.
//
// A kernel is plain arithmetic on raw pointers to memory of its device (host memory for
// the CPU table, device memory for the CUDA table). Kernels know nothing of Tensor or
// autograd and never synchronise with the host. They allocate no outputs; the fast ones
// keep scratch (GEMM packing panels, attention tiles, reduction partials) that is taken
// on first use and reused, so a training loop in steady state allocates nothing. Shapes arrive
// already checked by the op that calls them (ops/), so kernels do not validate.
//
// Each device fills a KernelTable<T> (T = float or double; CUDA fills float only).
// kernels/ref fills every entry with plain scalar loops: the oracle every other kernel
// is tested against. kernels/cpu overrides entries with SIMD/blocked/threaded versions
// chosen at run time by CPU detection. kernels/cuda fills the CUDA table.
// The one dispatch point for ops is kernel_table<T>(device) at the bottom of this file.
#pragma once

#include <cstdint>

namespace wedge::kernels {

using i64 = std::int64_t;

// ---------------------------------------------------------------------------------
// Matrix multiply (row-major, batched): for b in [0, batch)
//   C_b = alpha * op(A_b) * op(B_b) + beta * C_b
// op(A_b) is m x k, op(B_b) is k x n, C_b is m x n with leading dimension ldc.
// A_b = a + b * stride_a (stride 0 broadcasts one matrix over the batch), same for B, C.
// When beta == 0, C is written without being read (it may hold NaNs).
//
// The epilogue (a linear layer's bias and activation, fused so that C is written once):
// per element, after the whole sum above,
//   h = alpha * op(A) op(B) + beta * C  (+ bias[j] when bias != null: n values, shared by
//                                         every row and every matrix of the batch)
//   act == None: C = h
//   act == Gelu: aux = h (aux is laid out like C: ldc, stride_c), C = gelu(h), the exact
//                erf form (so the backward, bias_act_backward, can use h)
enum class Trans : std::uint8_t { N, T };
enum class Activation : std::uint8_t { None, Gelu };
template <typename T>
struct GemmArgs {
  Trans trans_a = Trans::N, trans_b = Trans::N;
  i64 m = 0, n = 0, k = 0;
  T alpha = 1, beta = 0;
  const T* a = nullptr; i64 lda = 0; i64 stride_a = 0;
  const T* b = nullptr; i64 ldb = 0; i64 stride_b = 0;
  T* c = nullptr;       i64 ldc = 0; i64 stride_c = 0;
  i64 batch = 1;
  const T* bias = nullptr;
  Activation act = Activation::None;
  T* aux = nullptr;
  bool has_epilogue() const { return bias != nullptr || act != Activation::None; }
};

// ---------------------------------------------------------------------------------
// Element-wise maps y = f(x; param), contiguous, n elements. In-place (x == y) allowed.
enum class UnaryOp : std::uint8_t {
  Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu,
  Gelu,       // exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  AddScalar,  // x + param
  MulScalar,  // x * param
  PowScalar,  // x ^ param
  Abs,
};
// gx = gy * f'(x) (given x and y = f(x); each op uses whichever is cheaper).
// When accumulate is true, gx += gy * f'(x).

// ---------------------------------------------------------------------------------
// Broadcasting binary maps out = a (op) b over an N-d index space (ndim <= kMaxDims).
// out is contiguous with `shape`; a and b are read through their own strides in
// elements (stride 0 on a broadcast dimension).
constexpr int kMaxDims = 8;
enum class BinaryOp : std::uint8_t { Add, Sub, Mul, Div, Max, Min, Pow };
struct BroadcastLayout {
  int ndim = 0;
  i64 shape[kMaxDims] = {};
  i64 stride_a[kMaxDims] = {};
  i64 stride_b[kMaxDims] = {};
};

// Strided copy: dst[i] = src[i] over an N-d index space, both read/written through
// their strides (elements). elem_size is 1, 2, 4 or 8 bytes; the copy is type-blind.
struct CopyLayout {
  int ndim = 0;
  i64 shape[kMaxDims] = {};
  i64 stride_src[kMaxDims] = {};
  i64 stride_dst[kMaxDims] = {};
};

// ---------------------------------------------------------------------------------
// Reductions over the middle axis of a contiguous (outer, n, inner) block -> (outer, inner).
// Sum: fixed summation order (deterministic). Max: also writes the index of the first
// maximum into idx (int32) when idx != nullptr.
enum class ReduceOp : std::uint8_t { Sum, Max };

// ---------------------------------------------------------------------------------
// AdamW hyper-parameters for one update (bias corrections precomputed by the caller:
// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t).
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd * p )     (wd = 0 gives Adam)
// With adam_l2 (plain Adam with weight decay as L2): g += wd * p first, and no decoupled
// term.
// grad_scale multiplies every gradient before anything else (gradient-norm clipping
// folded into the update, so the gradients are read once and never rewritten).
struct AdamParams {
  float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
  bool decoupled = true;
  float grad_scale = 1.0f;
};
// One parameter tensor of an update: n contiguous elements of param, grad, m and v.
template <typename T>
struct AdamSegment {
  T* param = nullptr;
  const T* grad = nullptr;
  T* m = nullptr;
  T* v = nullptr;
  i64 n = 0;
};

// ---------------------------------------------------------------------------------
// The table: one function pointer per kernel. A null entry means "this device has no
// kernel for this" and the op reports it.
template <typename T>
struct KernelTable {
  // y = alpha * op(A) op(B) + beta * C, then the epilogue (bias, activation)
  void (*gemm)(const GemmArgs<T>& args) = nullptr;
  // The backward of the GEMM epilogue over (rows, n), contiguous:
  //   act == Gelu: gh = gy * gelu'(aux) (aux = the h the forward kept); gh may alias gy.
  //   act == None: gh = gy, and gh is not written (it may be null).
  //   gbias[j] = sum over i of gh[i, j], added in increasing i (when gbias != null).
  void (*bias_act_backward)(Activation act, const T* aux, const T* gy, i64 rows, i64 n,
                            T* gh, T* gbias) = nullptr;

  // y[i] = value
  void (*fill)(T* y, T value, i64 n) = nullptr;
  void (*unary)(UnaryOp op, T param, const T* x, T* y, i64 n) = nullptr;
  void (*unary_backward)(UnaryOp op, T param, const T* x, const T* y, const T* gy, T* gx,
                         i64 n, bool accumulate) = nullptr;
  void (*binary)(BinaryOp op, const BroadcastLayout& layout, const T* a, const T* b,
                 T* out) = nullptr;
  void (*reduce)(ReduceOp op, const T* x, T* y, std::int32_t* idx, i64 outer, i64 n,
                 i64 inner) = nullptr;

  // Softmax over the last axis of (rows, n), contiguous. log=true gives log_softmax.
  void (*softmax_forward)(const T* x, T* y, i64 rows, i64 n, bool log) = nullptr;
  // gx from y (the forward output) and gy.
  //   softmax:     gx = y * (gy - sum(gy * y))
  //   log_softmax: gx = gy - exp(y) * sum(gy)
  void (*softmax_backward)(const T* y, const T* gy, T* gx, i64 rows, i64 n,
                           bool log) = nullptr;

  // Cross-entropy over logits (rows, V) with int32 targets. Rows whose target equals
  // ignore_index contribute nothing. Writes lse[rows] (log-sum-exp of each row, kept for
  // backward instead of a probability tensor), *loss = mean NLL over counted rows and
  // *count = number of counted rows (both scalars in device memory). If count is 0 the
  // loss is 0.
  void (*cross_entropy_forward)(const T* logits, const std::int32_t* targets, i64 rows,
                                i64 V, std::int32_t ignore_index, T* lse, T* loss,
                                T* count) = nullptr;
  // glogits = (softmax(logits) - onehot(target)) * (*gloss / *count), 0 on ignored rows.
  void (*cross_entropy_backward)(const T* logits, const std::int32_t* targets,
                                 const T* lse, const T* count, const T* gloss, i64 rows,
                                 i64 V, std::int32_t ignore_index, T* glogits) = nullptr;

  // LayerNorm over the last axis of (rows, D). gamma/beta may be null (no affine).
  // Writes y, and mean[rows], rstd[rows] for backward.
  void (*layer_norm_forward)(const T* x, const T* gamma, const T* beta, i64 rows, i64 D,
                             T eps, T* y, T* mean, T* rstd) = nullptr;
  // Writes gx; writes (not accumulates) ggamma, gbeta when non-null.
  void (*layer_norm_backward)(const T* x, const T* gamma, const T* mean, const T* rstd,
                              const T* gy, i64 rows, i64 D, T* gx, T* ggamma,
                              T* gbeta) = nullptr;

  // out[i, :] = table[ids[i], :], table (V, D). ids are in range (checked by the op).
  void (*embedding_forward)(const T* table, const std::int32_t* ids, i64 n, i64 V, i64 D,
                            T* out) = nullptr;
  // gtable (V, D) is overwritten: gtable[v] = sum over i with ids[i]==v of gout[i],
  // summed in increasing i (deterministic).
  void (*embedding_backward)(const std::int32_t* ids, const T* gout, i64 n, i64 V, i64 D,
                             T* gtable) = nullptr;

  // Inverted dropout: y = x * keep / (1 - p). keep is decided per element index i by
  // philox_uniform(seed, offset + i) >= p (engine/philox.h), so the mask is the same on
  // every device and is recomputed in backward instead of stored.
  void (*dropout_forward)(const T* x, T* y, i64 n, float p, std::uint64_t seed,
                          std::uint64_t offset) = nullptr;
  void (*dropout_backward)(const T* gy, T* gx, i64 n, float p, std::uint64_t seed,
                           std::uint64_t offset) = nullptr;

  // Scaled dot-product attention per head: q, k, v, out are (BH, L, dh) contiguous.
  //   out = softmax(q k^T * scale + mask) v,  mask = -inf above the diagonal when causal.
  // Writes lse[BH, L] (the row log-sum-exp of the scaled, masked scores) for backward.
  void (*attention_forward)(const T* q, const T* k, const T* v, i64 BH, i64 L, i64 dh,
                            T scale, bool causal, T* out, T* lse) = nullptr;
  // Writes (not accumulates) gq, gk, gv.
  void (*attention_backward)(const T* q, const T* k, const T* v, const T* out,
                             const T* lse, const T* gout, i64 BH, i64 L, i64 dh, T scale,
                             bool causal, T* gq, T* gk, T* gv) = nullptr;

  // Causal Plücker pairing (PAPERS.md §2). z is (B, L, r) contiguous, offsets[m] are
  // host values (1 <= offsets[j]). For every (b, t, j) with t - offsets[j] >= 0:
  //   u = z[b,t], v = z[b,t-Δ],  p_ij = u_i v_j - u_j v_i  (i < j, row-major pair order:
  //   (0,1),(0,2),...,(0,r-1),(1,2),...),  P = r(r-1)/2,
  //   norm = max(||p||, eps), out[b,t,j,:] = p / norm, norms[b,t,j] = norm.
  // Where t - Δ < 0: out = 0 and norms = 0.
  void (*plucker_forward)(const T* z, i64 B, i64 L, i64 r, const std::int32_t* offsets,
                          i64 m, T eps, T* out, T* norms) = nullptr;
  // gz (B, L, r) is overwritten with the gradient from gout (B, L, m, P).
  void (*plucker_backward)(const T* z, i64 B, i64 L, i64 r, const std::int32_t* offsets,
                           i64 m, T eps, const T* out, const T* norms, const T* gout,
                           T* gz) = nullptr;
  // Fused: mean over the VALID offsets of the normalised Plücker vectors, never writing
  // (B, L, m, P): out (B, L, P); rows with no valid offset are 0. norms (B, L, m) as above.
  void (*plucker_mean_forward)(const T* z, i64 B, i64 L, i64 r, const std::int32_t* offsets,
                               i64 m, T eps, T* out, T* norms) = nullptr;
  // gz (B, L, r) is overwritten from gout (B, L, P).
  void (*plucker_mean_backward)(const T* z, i64 B, i64 L, i64 r,
                                const std::int32_t* offsets, i64 m, T eps, const T* norms,
                                const T* gout, T* gz) = nullptr;

  // Gated fusion (GrassmannLM, PAPERS.md §2 step 5) over n contiguous elements:
  //   s = sigmoid(a),  out = s * x + (1 - s) * y
  void (*gate_mix_forward)(const T* a, const T* x, const T* y, T* out, i64 n) = nullptr;
  // Writes all three: ga = gout * (x - y) * s (1 - s),  gx = gout * s,  gy = gout * (1 - s).
  void (*gate_mix_backward)(const T* a, const T* x, const T* y, const T* gout, T* ga, T* gx,
                            T* gy, i64 n) = nullptr;

  // One AdamW/Adam update of every parameter of a model at once (see AdamParams):
  // `segments` (host memory, `count` entries) lists the tensors; the pointers in them are
  // device memory. One pass: the work is split over the total element count, not tensor by
  // tensor, so a model's many small biases cost no more than their size.
  void (*adam_update)(const AdamParams& hp, const AdamSegment<T>* segments,
                      i64 count) = nullptr;
  // *out = sum(x^2) (accumulates into *out when accumulate, else overwrites), fixed order.
  void (*sum_squares)(const T* x, i64 n, T* out, bool accumulate) = nullptr;
};

// Type-blind kernels (memory movement), one per device.
struct MemoryTable {
  void (*strided_copy)(const CopyLayout& layout, const void* src, void* dst,
                       int elem_size) = nullptr;
  // Element conversion between dtypes (codes of engine/dtype.h: 0 f32, 1 f64, 2 i32).
  void (*cast)(const void* src, int src_dtype, void* dst, int dst_dtype, i64 n) = nullptr;
};

// ---------------------------------------------------------------------------------
// Dispatch. Device kinds: 0 = CPU, 1 = CUDA (engine/device.h). Returns nullptr when the
// device has no kernels for T (e.g. CUDA not built in, or T = double on CUDA).
template <typename T>
const KernelTable<T>* kernel_table(int device_kind);
const MemoryTable* memory_table(int device_kind);

// A device's backend registers its tables at start-up (the CUDA room does this from a
// static registrar, so the CPU-only build never mentions CUDA).
void register_tables(int device_kind, const KernelTable<float>* f32,
                     const KernelTable<double>* f64, const MemoryTable* mem);

// The reference tables (kernels/ref): complete, scalar, slow.
const KernelTable<float>& ref_table_f32();
const KernelTable<double>& ref_table_f64();
const MemoryTable& ref_memory_table();

// The CPU tables actually used: the reference with optimized overrides (kernels/cpu).
// backend_name() describes what was picked, e.g. "avx512 gemm, openblas off".
const KernelTable<float>& cpu_table_f32();
const KernelTable<double>& cpu_table_f64();
const MemoryTable& cpu_memory_table();
const char* cpu_backend_name();

}  // namespace wedge::kernels
