// The kernel contract: ONE signature per kernel, shared by every device, and the one
// dispatch point through which ops and the engine reach a device's kernels.
//
// The list of kernels, with each one's formula, layout and edge cases, is
// engine/kernels.def; this header turns it into KernelTable<T> (one function pointer per
// kernel), MemoryTable (the type-blind memory kernels) and KernelId (a name per kernel).
// The contract lives with the engine because the engine itself calls kernels (copies,
// gradient accumulation, AdamW): kernels/ implements it and registers tables here, so
// every arrow points from kernels/ to engine/ and none back.
//
// Each device backend fills a KernelTable<T> (T = float or double; CUDA fills float only)
// and registers it with register_tables() at start-up: kernels/cpu registers the CPU
// tables (the reference loops of kernels/ref with optimized entries written over them),
// kernels/cuda the CUDA ones when a GPU is present.
#pragma once

#include <array>
#include <cstddef>
#include <iterator>
#include <cstdint>
#include <string_view>

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
//
// Precision (float tables only; double ignores it): F32 multiplies the operands as they
// are. BF16 is mixed precision: every element of op(A) and op(B) is first rounded to
// bfloat16 (round to nearest even; bf16_round in kernels/ref/bf16.h gives the exact
// rule), the products of the rounded values are summed in fp32, and alpha, beta, C, the
// bias and the activation stay fp32. A product of two bf16 values is exact in fp32, so
// a BF16 result differs from the fp32 sum of the rounded operands only by the order of
// the fp32 additions.
enum class Trans : std::uint8_t { N, T };
enum class Activation : std::uint8_t { None, Gelu };
enum class Precision : std::uint8_t { F32, BF16 };
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
  Precision precision = Precision::F32;
  bool has_epilogue() const { return bias != nullptr || act != Activation::None; }
};

// ---------------------------------------------------------------------------------
// Element-wise maps y = f(x; param), contiguous, n elements.
enum class UnaryOp : std::uint8_t {
  Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu,
  Gelu,       // exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
  AddScalar,  // x + param
  MulScalar,  // x * param
  PowScalar,  // x ^ param
  Abs,
  Silu,       // x * sigmoid(x)
  Softplus,   // log(1 + e^x), evaluated as max(x, 0) + log1p(e^-|x|): no overflow for any x
};
// Every UnaryOp, for code that must cover them all (tests, benchmarks).
inline constexpr UnaryOp kUnaryOps[] = {
    UnaryOp::Neg,       UnaryOp::Exp,       UnaryOp::Log,       UnaryOp::Sqrt,
    UnaryOp::Tanh,      UnaryOp::Sigmoid,   UnaryOp::Relu,      UnaryOp::Gelu,
    UnaryOp::AddScalar, UnaryOp::MulScalar, UnaryOp::PowScalar, UnaryOp::Abs,
    UnaryOp::Silu,      UnaryOp::Softplus};
static_assert(std::size(kUnaryOps) == static_cast<std::size_t>(UnaryOp::Softplus) + 1,
              "kUnaryOps lists every UnaryOp");

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
// their strides (elements). The copy is type-blind.
struct CopyLayout {
  int ndim = 0;
  i64 shape[kMaxDims] = {};
  i64 stride_src[kMaxDims] = {};
  i64 stride_dst[kMaxDims] = {};
};

// The same index space in as few axes as it takes: size-1 axes dropped, and each axis
// merged into the one before it when every operand steps through the pair as through one
// axis (the outer stride is the inner stride times the inner size; broadcast axes, stride
// 0 on both, merge too). A kernel then walks fewer and longer rows: the (B, E, N) slice
// of a (B, P, E, N) tensor copies as B rows of E·N elements, not B·E rows of N. The ops
// coalesce every layout before dispatch; kernels must still take any layout.
namespace detail {
template <std::size_t K>
int coalesce_axes(int ndim, i64* shape, const std::array<i64*, K>& strides) {
  for (int d = 0; d < ndim; ++d)
    if (shape[d] == 0) return ndim;  // nothing to walk: leave the empty space as it is
  int out = 0;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    bool merges = out > 0;
    for (i64* s : strides) merges = merges && s[out - 1] == s[d] * shape[d];
    if (merges) {
      shape[out - 1] *= shape[d];
      for (i64* s : strides) s[out - 1] = s[d];
    } else {
      shape[out] = shape[d];
      for (i64* s : strides) s[out] = s[d];
      ++out;
    }
  }
  if (out == 0) {  // a single element
    shape[0] = 1;
    for (i64* s : strides) s[0] = 1;
    out = 1;
  }
  for (int d = out; d < ndim; ++d) {
    shape[d] = 0;
    for (i64* s : strides) s[d] = 0;
  }
  return out;
}
}  // namespace detail

inline BroadcastLayout coalesce(BroadcastLayout l) {
  l.ndim = detail::coalesce_axes<2>(l.ndim, l.shape, {l.stride_a, l.stride_b});
  return l;
}
inline CopyLayout coalesce(CopyLayout l) {
  l.ndim = detail::coalesce_axes<2>(l.ndim, l.shape, {l.stride_src, l.stride_dst});
  return l;
}

// Reductions over the middle axis of a contiguous (outer, n, inner) block.
enum class ReduceOp : std::uint8_t { Sum, Max };

// ---------------------------------------------------------------------------------
// AdamW hyper-parameters for one update (bias corrections precomputed by the caller:
// bc1 = 1 - beta1^t, bc2 = 1 - beta2^t).
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m/bc1) / (sqrt(v/bc2) + eps) + wd * p )     (wd = 0 gives Adam)
// With decoupled = false (plain Adam with weight decay as L2): g += wd * p first, and no
// decoupled term.
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
// Selective scan (Mamba's S6) over segments of P tokens, each starting from its own state.
// For every batch b, channel d < D and state n < N, within each segment s (tokens
// [sP, min(L, sP + P))), starting from h = h0[b, s, d, n] (0 when h0 is null):
//   dt  = softplus(delta[b,t,d] + delta_bias[d])       (delta_bias null: 0)
//   h   = exp(dt * A[d,n]) * h + dt * B[b,t,n] * u[b,t,d],   A = -exp(A_log[d,n])
//   y[b,t,d] = (sum_n C[b,t,n] * h  +  Dskip[d] * u[b,t,d]) * silu(z[b,t,d])
//   (Dskip null: 0; z null: no gate, the factor is 1)
// and h_last[b, s, d, n] = the state after the segment's last token (when not null). The
// gate is Mamba's output gate y * silu(z), taken inside the scan so that the ungated
// output is never written (the backward recomputes it from the states it rebuilds).
// Layouts: u, delta, z, y (batch, L, D); B, C (batch, L, N) (the inputs among them possibly
// strided, see below); A_log (D, N); delta_bias, Dskip (D); h0, h_last (batch, segments,
// D, N) with segments = ceil(L / P), contiguous.
template <typename T>
struct ScanArgs {
  i64 batch = 0, L = 0, D = 0, N = 0, P = 0;
  const T* u = nullptr;
  const T* delta = nullptr;
  const T* delta_bias = nullptr;
  const T* A_log = nullptr;
  const T* B = nullptr;
  const T* C = nullptr;
  const T* Dskip = nullptr;
  const T* h0 = nullptr;
  const T* z = nullptr;
  // Where the inputs' tokens lie, in elements, 0 meaning contiguous: token t of batch b of
  // u, delta and z starts at b * x_batch_stride + t * x_token_stride (0: L * D and D), of B
  // and C at b * bc_batch_stride + t * bc_token_stride (0: L * N and N); a token's channels
  // (or states) are contiguous. So a piece of a longer sequence, or B and C sliced from a
  // wider projection, are read in place; an input broadcast over the batch or the tokens
  // (stride 0) cannot be expressed and is copied first. The backward's gy and every output
  // (y, h_last, step_sums, each gradient) are contiguous.
  i64 x_batch_stride = 0, x_token_stride = 0, bc_batch_stride = 0, bc_token_stride = 0;
  i64 segments() const { return P > 0 ? (L + P - 1) / P : 0; }
  // These args with every 0 stride replaced by the contiguous one (L * D and D, L * N and
  // N): what the kernels index with, so that they read every input alike.
  ScanArgs resolved() const {
    ScanArgs r = *this;
    if (r.x_batch_stride == 0) r.x_batch_stride = L * D;
    if (r.x_token_stride == 0) r.x_token_stride = D;
    if (r.bc_batch_stride == 0) r.bc_batch_stride = L * N;
    if (r.bc_token_stride == 0) r.bc_token_stride = N;
    return r;
  }
};
// The gradients of every input of ScanArgs; each is written (not accumulated), and a null
// pointer skips that gradient.
template <typename T>
struct ScanGrads {
  T* u = nullptr;
  T* delta = nullptr;
  T* delta_bias = nullptr;
  T* A_log = nullptr;
  T* B = nullptr;
  T* C = nullptr;
  T* Dskip = nullptr;
  T* h0 = nullptr;
  T* z = nullptr;
};

// ---------------------------------------------------------------------------------
// The tables, generated from engine/kernels.def. A null entry means "this device has no
// kernel for this" and the op reports it.
template <typename T>
struct KernelTable {
#define WEDGE_KERNEL(name, cpu, params) void(*name) params = nullptr;
#include "engine/kernels.def"
#undef WEDGE_KERNEL
};

struct MemoryTable {
#define WEDGE_KERNEL(name, cpu, params)
#define WEDGE_MEMORY_KERNEL(name, params) void(*name) params = nullptr;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
};

// Every kernel by name: the typed ones, then the memory ones.
enum class KernelId : int {
#define WEDGE_KERNEL(name, cpu, params) name,
#define WEDGE_MEMORY_KERNEL(name, params) name,
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
};
inline constexpr std::array kernel_names = {
#define WEDGE_KERNEL(name, cpu, params) std::string_view(#name),
#define WEDGE_MEMORY_KERNEL(name, params) std::string_view(#name),
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
};
inline constexpr int kernel_count = static_cast<int>(kernel_names.size());
inline constexpr int typed_kernel_count = static_cast<int>(sizeof(KernelTable<float>) / sizeof(void (*)()));
// The tables hold nothing but one pointer per entry of the list (as ggml checks its op
// count against its name tables): a member added by hand, or a list that the
// tables and the names read differently, fails here.
static_assert(sizeof(KernelTable<float>) % sizeof(void (*)()) == 0);
static_assert(sizeof(KernelTable<double>) == sizeof(KernelTable<float>));
static_assert(typed_kernel_count + sizeof(MemoryTable) / sizeof(void (*)()) == kernel_names.size());

constexpr std::string_view kernel_name(KernelId id) { return kernel_names[static_cast<int>(id)]; }
constexpr bool is_memory_kernel(KernelId id) { return static_cast<int>(id) >= typed_kernel_count; }

// Does the table have the entry `id`? (Memory kernels are asked of a MemoryTable.)
template <typename T>
bool has_kernel(const KernelTable<T>& t, KernelId id) {
  switch (id) {
#define WEDGE_KERNEL(name, cpu, params) \
  case KernelId::name:                  \
    return t.name != nullptr;
#include "engine/kernels.def"
#undef WEDGE_KERNEL
    default:
      return false;
  }
}
inline bool has_kernel(const MemoryTable& t, KernelId id) {
  switch (id) {
#define WEDGE_KERNEL(name, cpu, params)
#define WEDGE_MEMORY_KERNEL(name, params) \
  case KernelId::name:                    \
    return t.name != nullptr;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------------
// Dispatch. Device kinds: 0 = CPU, 1 = CUDA (engine/device.h). Returns nullptr when no
// usable table is registered for the device and T (CUDA not built in or no GPU present,
// T = double on CUDA, or a program that did not link wedge::kernels).
template <typename T>
const KernelTable<T>* kernel_table(int device_kind);
// The two that exist, declared before any use (kernel_table.cpp defines them).
template <> const KernelTable<float>* kernel_table<float>(int device_kind);
template <> const KernelTable<double>* kernel_table<double>(int device_kind);
const MemoryTable* memory_table(int device_kind);

// A device's backend registers its tables at start-up, from a static registrar in its own
// room. `usable` is false when the kernels are compiled in but the device is absent (CUDA
// built, no GPU): kernel_table() then answers nullptr, and compiled_kernel_table() still
// says what the build holds (`wedge ops` lists it). Registering again replaces the
// tables (tests use this). Throws for an unknown kind.
void register_tables(int device_kind, const KernelTable<float>* f32,
                     const KernelTable<double>* f64, const MemoryTable* mem, bool usable = true);
// The float32 table compiled in for a device kind, usable or not (nullptr when none).
const KernelTable<float>* compiled_kernel_table(int device_kind);
const MemoryTable* compiled_memory_table(int device_kind);
bool device_usable(int device_kind);

}  // namespace wedge::kernels
