// The backend harness: every kernel of the contract (engine/kernels.def), on every backend
// present, against the reference kernels (kernels/ref) on awkward shapes: size 1, odd sizes
// (7, 33), tails past every tile and vector width, rows of 1000+ and vocabulary rows of
// 30,522. Also: deterministic kernels give the same bits when run twice, outputs are
// written (never read) where the contract says so — they start as NaN — and dropout masks
// equal the reference's bit for bit.
//
// The backends (backend_cases.h): the reference in double (the oracle's two
// instantiations agree), the CPU table (AVX-512 / AVX2 kernels, host memory), the CPU's
// float64 GEMM (OpenBLAS), the host emulation of the CUDA kernels (test_cuda_emulated.cpp,
// twice) and the CUDA table on a GPU when one is present. Each comes as a table, a memory
// table and the Allocator its kernels' memory lives in; the checks are written once,
// generic over them. The list of cases, one per kernel, is backend_cases.h's; a kernel
// without a case, a check or a tolerance fails the coverage test below.
//
// The tolerance of every output of every kernel is written once, in kTolerances, with its
// reason.
#include "backend_harness.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/device.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::harness {

// ---- tolerances ----------------------------------------------------------------------------

// For every element, |got - ref| <= atol + per_term * terms + rtol |ref|, where `terms` is
// what the check says the output is a sum over (k of a GEMM, n of a row, ...). `bits`: the
// reference's bits exactly (NaN where NaN).
struct Bound {
  double atol = 0, rtol = 0, per_term = 0;
  bool bits = false;
};
constexpr Bound kSameBits{0, 0, 0, true};
constexpr Bound kSameValues{0, 0, 0, false};

struct Tolerance {
  KernelId kernel;
  const char* output;  // nullptr: every output of the kernel
  Bound bound;
  const char* why;
  // Where a kind of backend needs another bound (the reason is in `why`): f64, a backend
  // computing in double, its outputs rounded to float once on the way back (the float
  // reference rounds what it does not); cpu, the CPU's kernels.
  std::optional<Bound> f64 = std::nullopt;
  std::optional<Bound> cpu = std::nullopt;
};

// Every tolerance of the harness. "Exact" outputs are one correctly rounded float operation
// on both sides, a copy, or a sum in the reference's own order; the CUDA math library's
// expf, erff, powf, ... are within 2 ulp where the reference rounds a double result once.
const Tolerance kTolerances[] = {
    {KernelId::gemm, "C", {1e-6, 1e-5, 1e-6}, "float accumulation over k terms of size <= 1"},
    {KernelId::gemm, "h", {2e-6, 1e-5, 1e-6},
     "the epilogue's h (C + bias, kept in aux): the GEMM's, plus the bias's rounding"},
    {KernelId::gemm, "gelu(h)", {3.4e-6, 2e-5, 1.2e-6}, "h's error times |gelu'| <= 1.13, plus erff's 2 ulp"},
    {KernelId::bias_act_backward, "gh", {1e-6, 1e-5},
     "gy * gelu'(aux): erff/expf within 2 ulp, as the unary GELU backward"},
    {KernelId::bias_act_backward, "gbias", {1e-6, 1e-5, 1e-6},
     "a float sum of `rows` terms of size <= 1.13, in another fixed order"},
    {KernelId::fill, nullptr, kSameBits, "a store"},
    {KernelId::unary, "y exact", kSameValues, "neg, relu, abs, +c, *c: one correctly rounded operation"},
    {KernelId::unary, "y", {1e-6, 1e-5}, "transcendental maps: the math library within 2 ulp"},
    {KernelId::unary_backward, "gx exact", {3e-7, 0},
     "gy * f'(x) (+ gx): up to two roundings where the reference has one, half an ulp of values below 2.5"},
    {KernelId::unary_backward, "gx", {1e-6, 1e-5},
     "derivatives of the transcendental maps: the math library within 2 ulp"},
    {KernelId::binary, "out", kSameValues, "add, sub, mul, div, max, min: one correctly rounded operation"},
    {KernelId::binary, "out pow", {0, 1e-5}, "powf within 2 ulp"},
    {KernelId::reduce, "sum", {1e-6, 1e-5, 1e-6}, "a float sum of n terms of size <= 1, in another fixed order"},
    {KernelId::reduce, "max", kSameValues, "a comparison"},
    {KernelId::reduce, "index", kSameValues, "the first maximum, NaN winning"},
    {KernelId::sum_squares, nullptr, {1e-6, 1e-5}, "a float sum of squares, in another fixed order"},
    {KernelId::softmax_forward, "softmax", {1e-7, 1e-5}, "exp of x - max, one division"},
    {KernelId::softmax_forward, "log_softmax", {1e-5, 1e-5}, "values reach ~ -20: a few ulp of that is ~1e-5"},
    {KernelId::softmax_backward, "softmax", {1e-6, 1e-4}, "y (gy - sum(gy y)): a difference of nearly equal terms"},
    {KernelId::softmax_backward, "log_softmax", {0, 1e-4, 1e-6},
     "gy - exp(y) sum(gy): the error grows with the row's sum of |gy| (n terms)"},
    {KernelId::cross_entropy_forward, "lse", {2e-6, 1e-6}, "max + log(sum of exp): float exp over the row"},
    {KernelId::cross_entropy_forward, "loss", {1e-6, 1e-5}, "a mean over rows of lse - x[target]"},
    {KernelId::cross_entropy_forward, "count", kSameValues, "a count"},
    {KernelId::cross_entropy_backward, nullptr, {0, 1e-5, 1e-7},
     "exp(x - lse) carries lse's rounding (~1e-6 relative), times gloss / count (the terms); f64: the float "
     "reference's lse is rounded at |lse| ~ 300 (the shifted rows), 1.8e-5 relative, where a double backend's is not",
     Bound{0, 3e-5, 1e-7}},
    {KernelId::layer_norm_forward, "y", {1e-5, 1e-5}, "(x - mean) rstd gamma + beta with float statistics"},
    {KernelId::layer_norm_forward, "mean", {1e-6, 1e-6}, "a float mean over D"},
    {KernelId::layer_norm_forward, "rstd", {0, 1e-5}, "1 / sqrt(var + eps) of a float variance"},
    {KernelId::layer_norm_backward, "gx", {1e-5, 1e-4}, "a difference of nearly equal row sums"},
    {KernelId::layer_norm_backward, "gamma beta", {1e-6, 1e-5, 1e-6},
     "float sums over `rows` terms, in another fixed order"},
    {KernelId::residual_layer_norm_forward, "sum", kSameBits,
     "x + dropout(y): the same mask, the same double scaling, one float addition; f64: a double backend rounds the "
     "sum once, the float reference the dropped value and the sum (terms |x| + |y| / (1 - p) <= 16)",
     Bound{2e-6, 0, 0}},
    {KernelId::residual_layer_norm_forward, "out", {1e-5, 1e-5}, "as layer_norm_forward's y, of the sum"},
    {KernelId::residual_layer_norm_forward, "mean", {1e-6, 1e-6}, "as layer_norm_forward's mean"},
    {KernelId::residual_layer_norm_forward, "rstd", {0, 1e-5}, "as layer_norm_forward's rstd"},
    {KernelId::residual_layer_norm_backward, "gx gy", {1e-5, 1e-4},
     "layer_norm_backward's gx, plus gs (one addition), and for gy dropped with the double scaling"},
    {KernelId::residual_layer_norm_backward, "gamma beta", {1e-6, 1e-5, 1e-6}, "as layer_norm_backward's"},
    {KernelId::embedding_forward, nullptr, kSameBits, "a copy"},
    {KernelId::embedding_backward, nullptr, kSameBits,
     "float sums in the reference's order (increasing position); f64: the float reference rounds each of the n "
     "additions, a double backend none",
     Bound{0, 1e-6, 1e-7}},
    {KernelId::dropout_forward, nullptr, kSameBits, "the same Philox mask and the same double scaling"},
    {KernelId::dropout_backward, nullptr, kSameBits, "the same Philox mask and the same double scaling"},
    {KernelId::attention_forward, "out", {1e-5, 1e-4}, "softmax-weighted sums of v over up to L keys"},
    {KernelId::attention_forward, "lse", {1e-5, 1e-5}, "the scaled, masked scores' log-sum-exp"},
    {KernelId::attention_backward, nullptr, {2e-5, 1e-3},
     "the reference too sums each gradient in float: up to L terms of size ~1/L on both sides"},
    {KernelId::attention_decode_forward, "out", {1e-5, 1e-4},
     "softmax-weighted sums of v over up to L keys, as attention_forward's out"},
    {KernelId::plucker_forward, "out", {1e-6, 1e-5}, "p / max(||p||, eps)"},
    {KernelId::plucker_forward, "norms", {1e-7, 1e-5}, "||p|| over P pairs"},
    {KernelId::plucker_mean_forward, "out", {1e-6, 1e-5}, "the mean of the valid offsets' p / max(||p||, eps)"},
    {KernelId::plucker_mean_forward, "norms", {1e-7, 1e-5}, "||p|| over P pairs"},
    {KernelId::plucker_backward, nullptr, {1e-5, 1e-4, 1e-7},
     "(g - phat (phat.g)) / ||p||, summed over r-1 coordinates and up to 2m pairs; a norm clamped to eps = 1e-6 "
     "magnifies rounding a millionfold, so the terms are the largest reference value"},
    {KernelId::plucker_mean_backward, nullptr, {1e-5, 1e-4, 1e-7}, "as plucker_backward"},
    {KernelId::gate_mix_forward, nullptr, {2e-6, 1e-6},
     "s = sigmoid(a) and 1 - s = e / (1 + e) each carry expf's 2 ulp and three roundings (<= 5.4e-7 relative); "
     "s x + (1 - s) y may cancel, so the error is relative to |s x| + |(1 - s) y| <= 2"},
    {KernelId::gate_mix_backward, "ga", {1e-15, 2e-6},
     "also x - y and two more products (<= 1.1e-6); atol: float's denormals (1 - s is sigmoid(-a) on every "
     "side, so it keeps its relative accuracy as s nears 1)"},
    {KernelId::gate_mix_backward, "gx gy", {1e-15, 1e-6}, "one more product than s or 1 - s (<= 6.6e-7); atol as for ga"},
    // The scan's outputs are sums whose terms can be as large as the largest output, so an
    // element near 0 carries the rounding of those terms: the check passes terms =
    // (1 + max |ref|) (1 + count / 1000), count the length of the sum (0 per element, D
    // channels for gB and gC, batch x L tokens for the parameter gradients). Both sides sum
    // in the same order; the decay exp(dt A) forgets old rounding, so the per-element error
    // (~1e-7 (1 + max |ref|)) does not grow with the patch length.
    {KernelId::selective_scan_forward, nullptr, {0, 1e-5, 2e-6}, "float states, expf and log1pf within 2 ulp"},
    {KernelId::selective_scan_backward, "per element", {0, 1e-5, 2e-6},
     "gu, gdelta, gh0: the recomputed states and the reverse walk in float"},
    {KernelId::selective_scan_backward, "sums", {0, 1e-5, 2e-6},
     "gB, gC over D channels; gA_log, gDskip, gdelta_bias over batch x L tokens, in another fixed order"},
    {KernelId::adam_update, "param", {1e-7, 1e-6}, "only sqrt and division may differ between the arithmetics"},
    {KernelId::adam_update, "m", {1e-8, 1e-6},
     "two steps: the second reads the moment the first stored in float (~1e-9 for |m| < 0.1); the CPU updates in "
     "float, the reference in double"},
    {KernelId::adam_update, "v", {1e-10, 1e-6}, "as m, for |v| < 0.01"},
    {KernelId::tree_sum, nullptr, kSameBits,
     "float additions in the one tree order; f64: a double backend rounds none of the count - 1 additions, the "
     "float reference each (terms: the largest sum of |values| of an element)",
     Bound{0, 0, 8e-7}},
    {KernelId::strided_copy, nullptr, kSameBits, "a copy"},
    {KernelId::cast, nullptr, kSameValues, "a conversion (a NaN is any NaN: the GPU writes the canonical NaN)"},
};

const Tolerance* find_tolerance(KernelId kernel, const char* output) {
  for (const Tolerance& t : kTolerances) {
    if (t.kernel == kernel && (t.output == nullptr || std::strcmp(t.output, output) == 0)) return &t;
  }
  return nullptr;
}

// ---- comparisons -----------------------------------------------------------------------------

template <typename T>
void expect_close(const std::vector<T>& actual, const std::vector<T>& expected, double atol, double rtol,
                  const std::string& what) {
  REQUIRE_MESSAGE(actual.size() == expected.size(), what);
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = double(actual[i]), e = double(expected[i]);
    bool ok;
    if (std::isnan(e)) ok = std::isnan(a);
    else if (std::isinf(e)) ok = a == e;
    else ok = std::fabs(a - e) <= atol + rtol * std::fabs(e);
    if (!ok) {
      ++bad;
      const double excess = std::isnan(a) ? std::numeric_limits<double>::infinity() : std::fabs(a - e);
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad > 0) {
    FAIL_CHECK(what << ": " << bad << " of " << actual.size() << " elements differ; worst at " << worst
                    << ": got " << double(actual[worst]) << ", expected " << double(expected[worst]));
  } else {
    CHECK(true);
  }
}
template void expect_close(const std::vector<float>&, const std::vector<float>&, double, double, const std::string&);
template void expect_close(const std::vector<double>&, const std::vector<double>&, double, double, const std::string&);
template void expect_close(const std::vector<int32_t>&, const std::vector<int32_t>&, double, double,
                           const std::string&);

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  CHECK_MESSAGE(bitwise_equal(a, b), what << ": two runs differ (the kernel is not deterministic)");
}

namespace {
OutputDigests* recording = nullptr;
}  // namespace

void OutputDigests::add(const std::string& kernel, const void* data, std::size_t bytes) {
  std::uint64_t h = by_kernel.emplace(kernel, 14695981039346656037ull).first->second;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  by_kernel[kernel] = h;
}

void record_outputs(OutputDigests* digests) { recording = digests; }

bool avx512_available() {
  if (!cpu::has_avx512()) MESSAGE("this CPU has no AVX-512: AVX-512 kernel tests skipped");
  return cpu::has_avx512();
}

Backend<float> cpu_backend(HostMemory& memory, Sizes sizes) {
  return {std::string("CPU (") + cpu_backend_name() + ")", Family::cpu, &cpu_table_f32(), &cpu_memory_table(), &memory,
          sizes};
}

namespace {

std::string shape_str(std::initializer_list<i64> dims) {
  std::ostringstream s;
  s << "(";
  bool first = true;
  for (i64 d : dims) {
    s << (first ? "" : ", ") << d;
    first = false;
  }
  s << ")";
  return s.str();
}

// The harness's view of one backend: its kernels, its memory, and the reference.
template <typename T>
struct Suite {
  const Backend<T>& backend;
  const KernelTable<T>& dev = *backend.table;
  Allocator& alloc = *backend.alloc;
  const KernelTable<float>& ref = ref_table_f32();
  const MemoryTable& ref_mem = ref_memory_table();

  bool large() const { return backend.sizes != Sizes::reduced; }
  bool full() const { return backend.sizes == Sizes::full; }
  DeviceBuffer<T, float> put(const std::vector<float>& host) { return DeviceBuffer<T, float>(alloc, host); }
  DeviceBuffer<int32_t> put_ints(const std::vector<int32_t>& host) { return DeviceBuffer<int32_t>(alloc, host); }

  // `got` against the reference's `expected`, within the tolerance of (kernel, output).
  void expect(KernelId kernel, const char* output, const std::vector<float>& got, const std::vector<float>& expected,
              const std::string& what, double terms = 0) const {
    const Tolerance* t = find_tolerance(kernel, output);
    REQUIRE_MESSAGE(t != nullptr, "no tolerance written for " << kernel_name(kernel) << " " << output);
    const bool f64 = std::is_same_v<T, double> && t->f64, cpu = backend.family == Family::cpu && t->cpu;
    const Bound& b = f64 ? *t->f64 : cpu ? *t->cpu : t->bound;
    if (recording != nullptr) recording->add(std::string(kernel_name(kernel)), got.data(), got.size() * sizeof(float));
    expect_close(got, expected, b.atol + b.per_term * terms, b.rtol, backend.name + ": " + what);
    if (b.bits) {
      CHECK_MESSAGE(bitwise_equal(got, expected), backend.name << ": " << what << ": not the reference's bits");
    }
  }
};

// Runs `device_outputs` twice and checks the two results are the same bits; returns the
// first. Every kernel of every backend is meant to be deterministic.
std::vector<std::vector<float>> run_twice(const std::function<std::vector<std::vector<float>>()>& device_outputs,
                                          const std::string& what) {
  auto first = device_outputs();
  auto second = device_outputs();
  REQUIRE(first.size() == second.size());
  for (std::size_t i = 0; i < first.size(); ++i) expect_same_bits(first[i], second[i], what);
  return first;
}

template <typename V>
void append(std::vector<V>& to, std::type_identity_t<std::initializer_list<V>> more) {
  to.insert(to.end(), more.begin(), more.end());
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// ---- gemm ----------------------------------------------------------------------------------

}  // namespace

GemmLayout gemm_layout(Trans ta, Trans tb, const GemmShape& sh, i64 batch, i64 pad) {
  GemmLayout l;
  GemmArgs<float>& g = l.args;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = sh.m;
  g.n = sh.n;
  g.k = sh.k;
  g.batch = batch;
  const i64 a_rows = ta == Trans::N ? sh.m : sh.k, a_cols = ta == Trans::N ? sh.k : sh.m;
  const i64 b_rows = tb == Trans::N ? sh.k : sh.n, b_cols = tb == Trans::N ? sh.n : sh.k;
  g.lda = a_cols + pad;
  g.ldb = b_cols + pad;
  g.ldc = sh.n + pad;
  l.a_size = a_rows * g.lda;
  l.b_size = b_rows * g.ldb;
  l.c_size = sh.m * g.ldc;
  g.stride_a = l.a_size;
  g.stride_b = l.b_size;
  g.stride_c = l.c_size;
  return l;
}

namespace {

// `g` in T with its operand pointers (host or device memory) filled in.
template <typename T>
GemmArgs<T> bound(const GemmArgs<float>& g, const T* a, const T* b, T* c, const T* bias = nullptr,
                  T* aux = nullptr) {
  GemmArgs<T> r;
  r.trans_a = g.trans_a;
  r.trans_b = g.trans_b;
  r.m = g.m;
  r.n = g.n;
  r.k = g.k;
  r.alpha = T(g.alpha);
  r.beta = T(g.beta);
  r.a = a, r.lda = g.lda, r.stride_a = g.stride_a;
  r.b = b, r.ldb = g.ldb, r.stride_b = g.stride_b;
  r.c = c, r.ldc = g.ldc, r.stride_c = g.stride_c;
  r.batch = g.batch;
  r.bias = bias;
  r.act = g.act;
  r.precision = g.precision;
  r.aux = aux;
  return r;
}

// One plain GEMM, run for every transpose pair.
struct GemmCase {
  GemmShape shape;
  i64 batch = 1, pad = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool broadcast_a = false, broadcast_b = false;
};

// Over 2^20 multiply-adds (on a backend that does not run full sizes), one matrix each.
std::vector<GemmCase> gemm_cases(const std::vector<GemmShape>& shapes, bool full) {
  std::vector<GemmCase> cases;
  for (const GemmShape& sh : shapes) {
    const bool small = full || sh.m * sh.n * sh.k <= (i64(1) << 20);
    cases.push_back({sh, 1, 3});                                  // beta 0, padded leading dimensions
    cases.push_back({sh, small ? 3 : 1, 0, 0.7f, 0.5f});          // a batch, alpha and beta
    if (small) cases.push_back({sh, 2, 0, 1.0f, 0.0f, true});     // A broadcast over the batch (stride 0)
  }
  return cases;
}

// The harness's own GEMMs: every awkward shape with the three cases above, then alpha and
// beta of every sign, k = 0 and alpha = 0 (C = beta C, zeros when beta == 0), batches with
// either operand broadcast, a small C over a long k (split over k when threaded).
std::vector<GemmCase> harness_gemm_cases(bool large, bool full) {
  std::vector<GemmShape> shapes = {{1, 1, 1},  {7, 33, 5},  {33, 7, 64}, {1, 70, 33},  {65, 1, 17},   {64, 1000, 33},
                                   {3, 4, 0},  {1, 7, 33},  {7, 1, 33},  {7, 7, 7},    {33, 33, 33},  {15, 31, 17},
                                   {14, 32, 1}, {29, 65, 100}};
  if (large) {
    append(shapes, {{100, 129, 385}, {1037, 45, 70}, {13, 1029, 66}, {47, 39, 1100}, {130, 97, 413}, {3100, 9, 5},
                    {2, 500, 769}, {45, 70, 3500}});
  }
  if (full) shapes.push_back({257, 300, 1029});
  std::vector<GemmCase> cases = gemm_cases(shapes, full);
  const std::pair<float, float> alpha_beta[] = {
      {1.0f, 0.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {-1.5f, 0.25f}, {2.0f, -1.0f}};
  for (auto [alpha, beta] : alpha_beta) cases.push_back({{37, 70, 129}, 1, 5, alpha, beta});
  for (float beta : {0.0f, 0.5f}) {
    cases.push_back({{9, 21, 0}, 1, 3, 1.0f, beta});
    cases.push_back({{9, 21, 40}, 1, 0, 0.0f, beta});
  }
  cases.push_back({{35, 40, 64}, 9, 0, 1.0f, 0.0f});
  cases.push_back({{35, 40, 64}, 9, 0, 1.0f, 0.0f, true});
  cases.push_back({{35, 40, 64}, 9, 0, 1.0f, 0.5f, false, true});
  if (large) cases.push_back({{700, 300, 90}, 3, 0, 1.0f, 0.0f, false, true});
  return cases;
}

template <typename T>
void check_gemm(Suite<T>& s, const std::vector<GemmCase>& cases, Precision precision = Precision::F32) {
  std::uint64_t seed = 100;
  for (const GemmCase& cs : cases) {
    const GemmShape& sh = cs.shape;
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        const GemmLayout layout = gemm_layout(ta, tb, sh, cs.batch, cs.pad);
        GemmArgs<float> g = layout.args;
        g.alpha = cs.alpha;
        g.beta = cs.beta;
        g.precision = precision;
        if (cs.broadcast_a) g.stride_a = 0;
        if (cs.broadcast_b) g.stride_b = 0;
        const i64 a_count = cs.broadcast_a ? layout.a_size : layout.a_size * g.batch;
        const i64 b_count = cs.broadcast_b ? layout.b_size : layout.b_size * g.batch;
        const std::size_t c_count = std::size_t(layout.c_size * g.batch);
        auto A = random_floats(std::size_t(std::max<i64>(a_count, 1)), seed++);
        auto B = random_floats(std::size_t(std::max<i64>(b_count, 1)), seed++);
        auto C = g.beta == 0.0f ? nans(c_count) : random_floats(c_count, seed++);
        const std::string what = "gemm m,n,k=" + shape_str({sh.m, sh.n, sh.k}) + " ta=" + std::to_string(int(ta)) +
                                 " tb=" + std::to_string(int(tb)) + " batch " + std::to_string(cs.batch) + " pad " +
                                 std::to_string(cs.pad) + " alpha " + std::to_string(cs.alpha) + " beta " +
                                 std::to_string(cs.beta) + (cs.broadcast_a ? " A broadcast" : "") +
                                 (cs.broadcast_b ? " B broadcast" : "");
        auto expected = C;
        // Padding columns of C are not part of the product: the reference leaves them
        // alone, and so must the backend.
        s.ref.gemm(bound(g, A.data(), B.data(), expected.data()));
        auto got = run_twice(
            [&] {
              auto dA = s.put(A), dB = s.put(B), dC = s.put(C);
              s.dev.gemm(bound<T>(g, dA.get(), dB.get(), dC.get()));
              return std::vector<std::vector<float>>{dC.download()};
            },
            what);
        s.expect(KernelId::gemm, "C", got[0], expected, what, double(sh.k));
      }
    }
  }
}

enum class Epi { Bias, BiasGelu, Gelu };

// One GEMM with the epilogue.
struct EpilogueCase {
  GemmShape shape;
  Trans ta, tb;
  i64 batch;
  float beta;
  Epi epi;
};

// The shapes of the epilogue's checks: `every` take every transpose pair, batch 1 and 3,
// beta 0 and 1, bias, bias + GELU and GELU alone; `linear` (larger ones) the linear layer's
// cases: op(B) = W^T, one matrix, beta 0, bias with and without GELU.
struct EpilogueShapes {
  std::vector<GemmShape> every, linear;
};

std::vector<EpilogueCase> epilogue_cases(const EpilogueShapes& shapes) {
  std::vector<EpilogueCase> cases;
  std::vector<std::pair<GemmShape, bool>> all;
  for (const GemmShape& sh : shapes.every) all.push_back({sh, true});
  for (const GemmShape& sh : shapes.linear) all.push_back({sh, false});
  for (const auto& [sh, every] : all) {
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        for (i64 batch : {i64(1), i64(3)}) {
          for (float beta : {0.0f, 1.0f}) {
            for (Epi epi : {Epi::Bias, Epi::BiasGelu, Epi::Gelu}) {
              const bool linear = ta == Trans::N && tb == Trans::T && batch == 1 && beta == 0.0f && epi != Epi::Gelu;
              if (every || linear) cases.push_back({sh, ta, tb, batch, beta, epi});
            }
          }
        }
      }
    }
  }
  return cases;
}

EpilogueShapes harness_epilogue_shapes(bool large, bool full) {
  EpilogueShapes shapes;
  shapes.every = {{1, 1, 1}, {7, 33, 5}, {33, 7, 64}, {1, 7, 33}, {33, 1, 7}, {7, 7, 0}, {65, 33, 1}};
  // the CPU driver's paths: a batch spread over the threads, rows split with all columns in
  // one B block, several B blocks, columns split, k split
  if (large) {
    append(shapes.every, {{9, 21, 0}, {50, 70, 30}, {35, 40, 64}});
    shapes.linear = {{900, 257, 70}, {1000, 1000, 40}, {30, 1029, 66}, {45, 70, 3500}};
  }
  if (full) shapes.every.push_back({257, 300, 1029});  // tiles past the GPU's
  return shapes;
}

// The GEMM epilogue: bias (one value per column, shared by every row and every matrix of
// the batch) and the exact GELU with h kept in aux. C and aux start as NaN (beta == 0) so
// an element not written, or C read where beta == 0 says it must not be, shows up; the
// padding columns of C and aux must stay as they were.
template <typename T>
void check_gemm_epilogue(Suite<T>& s, const std::vector<EpilogueCase>& cases, Precision precision = Precision::F32) {
  std::uint64_t seed = 150;
  for (const EpilogueCase& cs : cases) {
    const GemmShape& sh = cs.shape;
    // Padded leading dimensions on single matrices; a batch broadcasts B (stride 0), as a
    // linear layer's weight over a batch.
    const GemmLayout layout = gemm_layout(cs.ta, cs.tb, sh, cs.batch, cs.batch == 1 ? 3 : 0);
    GemmArgs<float> g = layout.args;
    g.alpha = cs.batch == 1 ? 1.0f : 0.7f;
    g.beta = cs.beta;
    g.act = cs.epi == Epi::Bias ? Activation::None : Activation::Gelu;
    g.precision = precision;
    if (cs.batch != 1) g.stride_b = 0;
    const std::size_t c_count = std::size_t(layout.c_size * cs.batch);
    auto A = random_floats(std::size_t(std::max<i64>(layout.a_size * cs.batch, 1)), seed++);
    auto B = random_floats(std::size_t(std::max<i64>(layout.b_size, 1)), seed++);
    auto C = cs.beta == 0.0f ? nans(c_count) : random_floats(c_count, seed++);
    auto bias = random_floats(std::size_t(sh.n), seed++, -2.0f, 2.0f);
    const bool has_bias = cs.epi != Epi::Gelu, gelu = cs.epi != Epi::Bias;
    const std::string what = "gemm epilogue m,n,k=" + shape_str({sh.m, sh.n, sh.k}) + " ta=" +
                             std::to_string(int(cs.ta)) + " tb=" + std::to_string(int(cs.tb)) + " batch " +
                             std::to_string(cs.batch) + " beta " + std::to_string(int(cs.beta)) +
                             (has_bias ? " bias" : "") + (gelu ? " gelu" : "");
    auto expected = C, aux_expected = nans(c_count);
    s.ref.gemm(bound(g, A.data(), B.data(), expected.data(), has_bias ? bias.data() : nullptr,
                     gelu ? aux_expected.data() : nullptr));
    auto got = run_twice(
        [&] {
          auto dA = s.put(A), dB = s.put(B), dC = s.put(C), dbias = s.put(bias);
          auto daux = s.put(nans(c_count));
          s.dev.gemm(bound<T>(g, dA.get(), dB.get(), dC.get(), has_bias ? dbias.get() : nullptr,
                              gelu ? daux.get() : nullptr));
          return std::vector<std::vector<float>>{dC.download(), daux.download()};
        },
        what);
    if (gelu) {
      s.expect(KernelId::gemm, "h", got[1], aux_expected, what + " aux", double(sh.k));
      s.expect(KernelId::gemm, "gelu(h)", got[0], expected, what + " C", double(sh.k));
    } else {
      s.expect(KernelId::gemm, "h", got[0], expected, what + " C", double(sh.k));
      expect_close(got[1], nans(c_count), 0, 0, what + " aux untouched");
    }
  }
}

// The backward of the epilogue: gh = gy * gelu'(aux) (act Gelu), gbias = column sums of
// gh (or of gy when act is None, where gh must not be written).
template <typename T>
void check_bias_act_backward(Suite<T>& s) {
  struct Shape { i64 rows, n; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {33, 7}, {300, 70}, {1000, 67}, {0, 5},
                               {2000, 1}, {130, 257}, {3, 129}, {0, 17}};
  if (s.large()) shapes.push_back({4096, 1024});  // the paper model's hidden layer
  if (s.full()) shapes.push_back({4096, 256});     // the split column sum
  std::uint64_t seed = 170;
  for (const Shape& sh : shapes) {
    const std::size_t size = std::size_t(sh.rows * sh.n), n = std::size_t(sh.n);
    auto aux = random_floats(size, seed++, -4.0f, 4.0f);
    auto gy = random_floats(size, seed++);
    for (Activation act : {Activation::None, Activation::Gelu}) {
      // 0: gh separate, gbias wanted; 1: gh aliases gy (Gelu) or gh null (None), gbias
      // wanted; 2: no gbias. The largest shapes take the first only.
      for (int variant = 0; variant < (size > (std::size_t(1) << 20) ? 1 : 3); ++variant) {
        const bool want_gbias = variant != 2, alias = variant == 1;
        const std::string what = "bias_act_backward " + shape_str({sh.rows, sh.n}) +
                                 (act == Activation::Gelu ? " gelu" : " none") +
                                 (alias ? (act == Activation::Gelu ? " gh=gy" : " gh=null") : "") +
                                 (want_gbias ? "" : " no gbias");
        std::vector<float> gh_ref = nans(size), gbias_ref = nans(n);
        std::vector<float> gy_ref = gy;
        float* ref_gh = alias ? (act == Activation::Gelu ? gy_ref.data() : nullptr) : gh_ref.data();
        s.ref.bias_act_backward(act, aux.data(), gy_ref.data(), sh.rows, sh.n, ref_gh,
                                want_gbias ? gbias_ref.data() : nullptr);
        if (alias && act == Activation::Gelu) gh_ref = gy_ref;
        auto got = run_twice(
            [&] {
              auto daux = s.put(aux), dgy = s.put(gy), dgh = s.put(nans(size)), dgbias = s.put(nans(n));
              T* dev_gh = alias ? (act == Activation::Gelu ? dgy.get() : nullptr) : dgh.get();
              s.dev.bias_act_backward(act, daux.get(), dgy.get(), sh.rows, sh.n, dev_gh,
                                      want_gbias ? dgbias.get() : nullptr);
              auto gh = alias && act == Activation::Gelu ? dgy.download() : dgh.download();
              return std::vector<std::vector<float>>{gh, dgbias.download(), dgy.download()};
            },
            what);
        if (act == Activation::Gelu) {
          s.expect(KernelId::bias_act_backward, "gh", got[0], gh_ref, what + " gh");
        } else {
          expect_close(got[0], nans(size), 0, 0, what + " gh not written");
          expect_close(got[2], gy, 0, 0, what + " gy untouched");
        }
        if (want_gbias) {
          s.expect(KernelId::bias_act_backward, "gbias", got[1], gbias_ref, what + " gbias", double(sh.rows));
        } else {
          expect_close(got[1], nans(n), 0, 0, what + " gbias not written");
        }
      }
    }
  }
}

// ---- element-wise ----------------------------------------------------------------------------

template <typename T>
void check_fill(Suite<T>& s) {
  for (i64 n : {0, 1, 7, 33, 1000, 70001}) {
    // three elements past the end must stay as they were
    auto expected = nans(std::size_t(n) + 3);
    std::fill(expected.begin(), expected.begin() + n, -2.5f);
    const std::string what = "fill n=" + std::to_string(n);
    auto got = run_twice(
        [&] {
          auto y = s.put(nans(std::size_t(n) + 3));
          s.dev.fill(y.get(), T(-2.5f), n);
          return std::vector<std::vector<float>>{y.download()};
        },
        what);
    s.expect(KernelId::fill, "y", got[0], expected, what);
  }
}

struct UnaryCase {
  UnaryOp op;
  float param;
  float lo, hi;
  bool exact;
  const char* name;
};

// x over the op's domain, its first elements the values where approximations break: 0,
// the tails of GELU and the sigmoid, large exp arguments (made positive for log, sqrt, pow).
std::vector<float> unary_inputs(const UnaryCase& c, i64 n, std::uint64_t seed) {
  auto x = random_floats(std::size_t(n), seed, c.lo, c.hi);
  const float specials[] = {0.0f,  -0.0f, 1e-6f,  -1e-6f, 0.5f,  -0.5f,  3.0f,  -3.0f,  6.0f,
                            -6.0f, 12.0f, -12.0f, -20.0f, 40.0f, -80.0f, 85.0f, -100.0f};
  const bool positive = c.lo >= 0.0f;
  for (std::size_t i = 0; i < x.size() && i < std::size(specials); ++i) {
    x[i] = positive ? std::fabs(specials[i]) + (c.lo > 0.0f ? c.lo : 0.0f) : specials[i];
  }
  return x;
}

// y = f(x), then (when `backward`) its backward, overwriting and accumulating;
// derivatives built on y use the reference y.
template <typename T>
void check_unary_case(Suite<T>& s, const UnaryCase& c, const std::vector<float>& x, bool backward,
                      std::uint64_t& seed, const std::string& what) {
  const i64 n = i64(x.size());
  std::vector<float> y_ref(x.size());
  s.ref.unary(c.op, c.param, x.data(), y_ref.data(), n);
  auto got = run_twice(
      [&] {
        auto dx = s.put(x), dy = s.put(nans(x.size()));
        s.dev.unary(c.op, T(c.param), dx.get(), dy.get(), n);
        return std::vector<std::vector<float>>{dy.download()};
      },
      what);
  s.expect(KernelId::unary, c.exact ? "y exact" : "y", got[0], y_ref, what);
  if (!backward) return;
  auto gy = random_floats(x.size(), seed++);
  auto gx0 = random_floats(x.size(), seed++);
  for (bool accumulate : {false, true}) {
    auto expected = accumulate ? gx0 : std::vector<float>(x.size(), 0.0f);
    s.ref.unary_backward(c.op, c.param, x.data(), y_ref.data(), gy.data(), expected.data(), n, accumulate);
    auto gx = run_twice(
        [&] {
          auto dx = s.put(x), dy = s.put(y_ref), dgy = s.put(gy);
          auto dgx = s.put(accumulate ? gx0 : nans(x.size()));
          s.dev.unary_backward(c.op, T(c.param), dx.get(), dy.get(), dgy.get(), dgx.get(), n, accumulate);
          return std::vector<std::vector<float>>{dgx.download()};
        },
        what + " backward");
    s.expect(KernelId::unary_backward, c.exact ? "gx exact" : "gx", gx[0], expected,
             what + (accumulate ? " backward accumulate" : " backward"));
  }
}

template <typename T>
void check_fill_unary(Suite<T>& s) {
  check_fill(s);
  const UnaryCase cases[] = {
      {UnaryOp::Neg, 0, -3, 3, true, "neg"},          {UnaryOp::Exp, 0, -10, 10, false, "exp"},
      {UnaryOp::Log, 0, 0.01f, 50, false, "log"},     {UnaryOp::Sqrt, 0, 0.01f, 50, false, "sqrt"},
      {UnaryOp::Tanh, 0, -6, 6, false, "tanh"},       {UnaryOp::Sigmoid, 0, -20, 20, false, "sigmoid"},
      {UnaryOp::Relu, 0, -3, 3, true, "relu"},        {UnaryOp::Gelu, 0, -9, 9, false, "gelu"},
      {UnaryOp::AddScalar, 0.375f, -3, 3, true, "add_scalar"},
      {UnaryOp::MulScalar, -1.5f, -3, 3, true, "mul_scalar"},
      {UnaryOp::PowScalar, 2.5f, 0.01f, 4, false, "pow_scalar"},
      {UnaryOp::PowScalar, 1.5f, 0.01f, 4, false, "pow_scalar_1.5"},
      {UnaryOp::PowScalar, 0.0f, 0.0f, 4, false, "pow_scalar_0"},
      {UnaryOp::Abs, 0, -3, 3, true, "abs"},
      {UnaryOp::Silu, 0, -20, 20, false, "silu"},     {UnaryOp::Softplus, 0, -30, 30, false, "softplus"},
  };
  static_assert(std::size(kUnaryOps) == 14, "a new UnaryOp needs a case above");
  std::uint64_t seed = 200;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const UnaryCase& c : cases) {
    for (i64 n : {i64(1), i64(7), i64(33), i64(1000), i64(70001)}) {
      check_unary_case(s, c, unary_inputs(c, n, seed++), true, seed,
                       std::string("unary ") + c.name + " n=" + std::to_string(n));
    }
    // NaN and the infinities map as in the reference
    if (c.lo < 0.0f) {
      check_unary_case(s, c, {nan, inf, -inf, 0.0f}, false, seed, std::string("unary ") + c.name + " NaN, inf");
    }
  }
}

// A broadcast layout and the sizes of the operand buffers it reaches.
struct Layout {
  BroadcastLayout l;
  std::size_t a_size, b_size, out_size;
};

Layout make_layout(std::vector<i64> shape, std::vector<i64> sa, std::vector<i64> sb) {
  Layout r{};
  r.l.ndim = int(shape.size());
  r.out_size = 1;
  i64 reach_a = 0, reach_b = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    r.l.shape[d] = shape[d];
    r.l.stride_a[d] = sa[d];
    r.l.stride_b[d] = sb[d];
    r.out_size *= std::size_t(shape[d]);
    reach_a += (shape[d] - 1) * sa[d];
    reach_b += (shape[d] - 1) * sb[d];
  }
  r.a_size = std::size_t(reach_a + 1);
  r.b_size = std::size_t(reach_b + 1);
  return r;
}

template <typename T>
void check_binary(Suite<T>& s) {
  std::vector<Layout> layouts = {
      make_layout({1}, {1}, {1}),
      make_layout({7}, {1}, {1}),
      make_layout({33, 7}, {7, 1}, {7, 1}),                // same shape
      make_layout({33, 7}, {7, 1}, {0, 1}),                // b is a row, repeated down
      make_layout({33, 7}, {1, 0}, {7, 1}),                // a is a column, repeated across
      make_layout({5, 7, 3}, {1, 5, 35}, {21, 3, 1}),      // a read transposed
      make_layout({7, 1, 33}, {33, 33, 1}, {0, 0, 0}),     // b a scalar, a size-1 dimension
      make_layout({2, 3, 4, 5, 6}, {360, 120, 30, 6, 1}, {0, 5, 0, 1, 0}),
      make_layout({1000, 67}, {67, 1}, {0, 1}),            // 1000+ rows, bias-like
      make_layout({1000, 33}, {33, 1}, {0, 1}),            // a bias row over a vector width and one
      make_layout({7, 1029}, {0, 1}, {1029, 1}),           // a row on the left
      make_layout({65, 17}, {17, 1}, {0, 0}),              // b a scalar over tails
      make_layout({3, 50, 7}, {350, 7, 1}, {7, 0, 1}),     // broadcast in the middle
      make_layout({2, 3, 129}, {387, 129, 1}, {0, 0, 1}),  // b broadcast over the first two axes
      make_layout({100003}, {1}, {1}),                     // one long row (contiguous operands), split by the threads
      make_layout({70001}, {0}, {1}),                      // a a scalar over one long row
  };
  const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div,
                          BinaryOp::Max, BinaryOp::Min, BinaryOp::Pow};
  std::uint64_t seed = 300;
  for (BinaryOp op : ops) {
    for (std::size_t li = 0; li < layouts.size(); ++li) {
      const Layout& L = layouts[li];
      const bool pow = op == BinaryOp::Pow;
      auto a = random_floats(L.a_size, seed++, pow ? 0.1f : -2.0f, 2.0f);
      auto b = random_floats(L.b_size, seed++, pow ? -2.0f : 0.25f, 2.0f);
      if (op == BinaryOp::Max || op == BinaryOp::Min) a[0] = std::numeric_limits<float>::quiet_NaN();
      const std::string what = "binary op " + std::to_string(int(op)) + " layout " + std::to_string(li);
      std::vector<float> expected(L.out_size);
      s.ref.binary(op, L.l, a.data(), b.data(), expected.data());
      auto got = run_twice(
          [&] {
            auto da = s.put(a), db = s.put(b), dout = s.put(nans(L.out_size));
            s.dev.binary(op, L.l, da.get(), db.get(), dout.get());
            return std::vector<std::vector<float>>{dout.download()};
          },
          what);
      s.expect(KernelId::binary, pow ? "out pow" : "out", got[0], expected, what);
    }
  }
}

// Element i uses word i % 4 of Philox counter i / 4 (engine/philox.h): offsets of every
// residue mod 4 start a kernel's block part-way through a counter, and an offset near
// 4 * 2^32 carries the counter's low word into its high word.
template <typename T>
void check_dropout(Suite<T>& s) {
  struct Case { i64 n; float p; std::uint64_t offset; };
  std::vector<Case> cases = {{1, 0.5f, 0},  {37, 0.1f, 5}, {100003, 0.3f, 123456789}, {1000, 0.5f, 4 * 0xFFFFFFFFull - 502},
                             {64, 1.0f, 9}, {50, 0.0f, 0}, {65, 0.5f, 2},           {70001, 0.25f, 3},
                             {3, 0.5f, 7}};
  for (i64 n : {1, 33, 1000, 100003}) {
    for (float p : {0.0f, 0.1f, 0.5f, 1.0f}) cases.push_back({n, p, (std::uint64_t(1) << 40) + 12345});
  }
  std::uint64_t seed = 400;
  for (const Case& c : cases) {
    const std::uint64_t key = 0x5eed0000ULL + seed;
    const std::size_t size = std::size_t(c.n);
    auto x = random_floats(size, seed++, 0.5f, 2.0f);  // nonzero: zero in y means dropped
    std::vector<float> y_ref(size), g_ref(size);
    s.ref.dropout_forward(x.data(), y_ref.data(), c.n, c.p, key, c.offset);
    s.ref.dropout_backward(x.data(), g_ref.data(), c.n, c.p, key, c.offset);
    const std::string what = "dropout n=" + std::to_string(c.n) + " p=" + std::to_string(c.p) + " offset " +
                             std::to_string(c.offset);
    auto got = run_twice(
        [&] {
          auto dx = s.put(x), dy = s.put(nans(size)), dg = s.put(nans(size));
          s.dev.dropout_forward(dx.get(), dy.get(), c.n, c.p, key, c.offset);
          s.dev.dropout_backward(dx.get(), dg.get(), c.n, c.p, key, c.offset);
          return std::vector<std::vector<float>>{dy.download(), dg.download()};
        },
        what);
    s.expect(KernelId::dropout_forward, "y", got[0], y_ref, what + " forward");
    s.expect(KernelId::dropout_backward, "gx", got[1], g_ref, what + " backward");
    if (c.n == 100003 && c.p == 0.5f) {
      const auto dropped = std::count(got[0].begin(), got[0].end(), 0.0f);
      CHECK(dropped > c.n * 45 / 100);
      CHECK(dropped < c.n * 55 / 100);
    }
  }
}

// Gated fusion: s = sigmoid(a), out = s x + (1 - s) y, and its three gradients. The gate
// logits are mostly moderate but every third one is drawn from a list reaching far into
// the range where a naive sigmoid overflows (exp(100) is inf in float) or where s rounds
// to 0 or 1 and s (1 - s) underflows: no output may become NaN or infinite.
template <typename T>
void check_gate_mix(Suite<T>& s) {
  const float inf = std::numeric_limits<float>::infinity(), big = std::numeric_limits<float>::max();
  const float extremes[] = {100.0f, -100.0f, 30.0f, -30.0f, 88.5f, -88.5f, 17.0f, -17.0f, 0.0f,
                            1000.0f, -1000.0f, big, -big, inf, -inf};
  const std::size_t n_extremes = sizeof(extremes) / sizeof(extremes[0]);
  std::uint64_t seed = 450;
  for (i64 n : {i64(1), i64(7), i64(33), i64(1000), i64(100003)}) {
    const std::size_t size = std::size_t(n);
    auto a = random_floats(size, seed++, -8.0f, 8.0f);
    for (std::size_t i = 0; i < size; i += 3) a[i] = extremes[(i / 3) % n_extremes];
    auto x = random_floats(size, seed++, -2.0f, 2.0f);
    auto y = random_floats(size, seed++, -2.0f, 2.0f);
    auto gout = random_floats(size, seed++);
    const std::string what = "gate_mix n=" + std::to_string(n);
    std::vector<float> out_ref(size), ga_ref(size), gx_ref(size), gy_ref(size);
    s.ref.gate_mix_forward(a.data(), x.data(), y.data(), out_ref.data(), n);
    s.ref.gate_mix_backward(a.data(), x.data(), y.data(), gout.data(), ga_ref.data(), gx_ref.data(),
                            gy_ref.data(), n);
    auto got = run_twice(
        [&] {
          auto da = s.put(a), dx = s.put(x), dy = s.put(y), dgout = s.put(gout);
          auto dout = s.put(nans(size)), dga = s.put(nans(size)), dgx = s.put(nans(size)), dgy = s.put(nans(size));
          s.dev.gate_mix_forward(da.get(), dx.get(), dy.get(), dout.get(), n);
          s.dev.gate_mix_backward(da.get(), dx.get(), dy.get(), dgout.get(), dga.get(), dgx.get(), dgy.get(), n);
          return std::vector<std::vector<float>>{dout.download(), dga.download(), dgx.download(), dgy.download()};
        },
        what);
    for (std::size_t k = 0; k < got.size(); ++k) {
      const auto finite = std::count_if(got[k].begin(), got[k].end(), [](float v) { return std::isfinite(v); });
      CHECK_MESSAGE(std::size_t(finite) == size, what << " output " << k << ": NaN or infinity");
    }
    s.expect(KernelId::gate_mix_forward, "out", got[0], out_ref, what + " out");
    s.expect(KernelId::gate_mix_backward, "ga", got[1], ga_ref, what + " ga");
    s.expect(KernelId::gate_mix_backward, "gx gy", got[2], gx_ref, what + " gx");
    s.expect(KernelId::gate_mix_backward, "gx gy", got[3], gy_ref, what + " gy");
  }
}

// Where the selective scan's inputs lie (ScanArgs' strides). Contiguous: the strides left
// at 0. Strided u, delta and z: a piece of longer sequences, each token a row of D + 3 with
// the channels at columns [1, D + 1), the piece starting at token 3 of L + 4 per sequence.
// Strided B and C: slices of a wider projection, each token a row of 2N + 5 with B at
// column 2 and C at column N + 4, the piece starting at token 1 of L + 2. Every element of
// those buffers outside the slices is NaN, so a kernel that reads one poisons its outputs.
// The outputs, gy, h0 and g_h_last stay contiguous in every layout.
struct ScanLayout {
  bool strided_x, strided_bc;
  const char* name;
};
constexpr ScanLayout kScanLayouts[] = {
    {false, false, "contiguous"},
    {true, true, "u, delta, z, B, C strided"},
    {true, false, "u, delta, z strided, B, C contiguous"},
};

// values (batch, L, width), contiguous, copied into `size` NaNs: the row of token t of
// sequence b to offset + b * batch_stride + t * token_stride.
std::vector<float> spread_rows(const std::vector<float>& values, i64 batch, i64 L, i64 width, i64 offset,
                               i64 token_stride, i64 batch_stride, i64 size) {
  std::vector<float> out = nans(std::size_t(size));
  for (i64 b = 0; b < batch; ++b) {
    for (i64 t = 0; t < L; ++t) {
      std::copy_n(values.begin() + (b * L + t) * width, width,
                  out.begin() + offset + b * batch_stride + t * token_stride);
    }
  }
  return out;
}

// The selective scan, forward and backward, on segments that do not divide L, P = 1, P > L,
// every optional input (the output gate z included) present or null, and gradients skipped
// in mixed combinations, each with its inputs contiguous and strided (kScanLayouts). The
// step sums ride with h_last (both per-segment outputs) and their gradient with g_h_last.
// A strided layout's outputs are compared with the reference's on contiguous copies of the
// same values (so the strides are checked whether or not the reference reads them) and
// with the reference's on the same strided inputs, and the reference's two runs must give
// the same bits (the same arithmetic on the same values).
template <typename T>
void check_selective_scan(Suite<T>& s) {
  struct Shape {
    i64 batch, L, D, N, P;
  };
  std::vector<Shape> shapes = {
      {2, 37, 5, 3, 8},     // L not a multiple of P
      {1, 16, 1, 1, 1},     // P = 1, N = 1, D = 1
      {3, 7, 33, 16, 16},   // P > L (one short segment); a tail past the 16- and 32-channel blocks
      {2, 19, 7, 5, 40},    // P > L and longer than the CUDA backward's 16-token chunks
      {2, 50, 70, 20, 24},  // three warps of channels, two chunks of states, 16 + 8 tokens
      {1, 1, 1, 1, 1},
  };
  if (s.large()) shapes.push_back({4, 128, 512, 16, 16});  // SheafStateLM's layer, 4 sequences
  if (s.full()) shapes.push_back({2, 1000, 64, 16, 1000});  // one long segment
  // Which optional inputs are present, and which gradients are asked for (null: skipped).
  struct Variant {
    bool h0, g_h_last, bias, skip, h_last, grads_a, grads_b, gate;
    const char* name;
  };
  const Variant variants[] = {
      {true, true, true, true, true, true, true, true, "all inputs"},
      {false, false, false, false, false, true, true, false, "h0, g_h_last, delta_bias, Dskip, h_last, z null"},
      {true, false, true, false, true, true, false, true, "g_h_last, Dskip null; gu, gC, gDskip, gdelta_bias, gz skipped"},
      {false, true, false, true, true, false, true, true, "h0, delta_bias null; gdelta, gA_log, gB, gh0 skipped"},
  };
  std::uint64_t seed = 1400;
  for (const Shape& sh : shapes) {
    for (const Variant& var : variants) {
      const i64 S = (sh.L + sh.P - 1) / sh.P;
      const std::size_t tokens = std::size_t(sh.batch * sh.L * sh.D), inputs = std::size_t(sh.batch * sh.L * sh.N),
                        params = std::size_t(sh.D * sh.N), states = std::size_t(sh.batch * S * sh.D * sh.N),
                        D = std::size_t(sh.D);
      auto u = random_floats(tokens, seed++), delta = random_floats(tokens, seed++, -4.0f, 2.0f);
      // softplus far out on both sides: dt = 30 (the state forgets at once) and dt ~ 1e-13
      delta[0] = 30.0f;
      if (tokens > 1) delta[tokens - 1] = -30.0f;
      auto delta_bias = random_floats(D, seed++), Dskip = random_floats(D, seed++);
      auto A_log = random_floats(params, seed++, -0.7f, 2.0f);  // A in [-7.4, -0.5]
      auto B = random_floats(inputs, seed++), C = random_floats(inputs, seed++);
      auto h0 = random_floats(states, seed++), gy = random_floats(tokens, seed++), g_h_last = random_floats(states, seed++);
      const std::size_t sums = var.h_last ? std::size_t(sh.batch * S * sh.D) : 0;
      auto g_step_sums = random_floats(std::size_t(sh.batch * S * sh.D), seed++);
      auto z = random_floats(tokens, seed++, -4.0f, 4.0f);

      // The inputs u, delta, delta_bias, A_log, B, C, Dskip, h0, z, contiguous.
      const std::vector<float>* host_inputs[9] = {&u, &delta, &delta_bias, &A_log, &B, &C, &Dskip, &h0, &z};
      // The arguments over input(i), the i-th of those (in host memory for the reference, in
      // the backend's for the kernel under test, laid out as `strides` say: x_batch_stride,
      // x_token_stride, bc_batch_stride, bc_token_stride).
      auto args_over = [&](auto input, const std::array<i64, 4>& strides) {
        ScanArgs<std::remove_const_t<std::remove_pointer_t<decltype(input(0))>>> a;
        a.batch = sh.batch;
        a.L = sh.L;
        a.D = sh.D;
        a.N = sh.N;
        a.P = sh.P;
        a.u = input(0);
        a.delta = input(1);
        a.delta_bias = var.bias ? input(2) : nullptr;
        a.A_log = input(3);
        a.B = input(4);
        a.C = input(5);
        a.Dskip = var.skip ? input(6) : nullptr;
        a.h0 = var.h0 ? input(7) : nullptr;
        a.z = var.gate ? input(8) : nullptr;
        a.x_batch_stride = strides[0];
        a.x_token_stride = strides[1];
        a.bc_batch_stride = strides[2];
        a.bc_token_stride = strides[3];
        return a;
      };
      // Gradient sizes in ScanGrads order (u, delta, delta_bias, A_log, B, C, Dskip, h0, z);
      // 0 where the variant does not ask for it.
      const std::size_t full_sizes[9] = {tokens, tokens, D, params, inputs, inputs, D, states, var.gate ? tokens : 0};
      const bool asked[9] = {var.grads_b, var.grads_a, var.grads_b, var.grads_a, var.grads_a,
                             var.grads_b, var.grads_b, var.grads_a, var.grads_a};
      std::size_t sizes[9];
      for (int i = 0; i < 9; ++i) sizes[i] = asked[i] ? full_sizes[i] : 0;
      auto grads_of = [](auto& buffers, auto pointer) {
        using P = decltype(pointer(buffers[0]));
        P p[9];
        for (int i = 0; i < 9; ++i) p[i] = pointer(buffers[i]);
        return ScanGrads<std::remove_pointer_t<P>>{p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]};
      };

      // The outputs in the order the device's come back in: y, h_last, the gradients in
      // ScanGrads order, the step sums.
      auto run_reference = [&](const ScanArgs<float>& a) {
        std::vector<std::vector<float>> out = {std::vector<float>(tokens), std::vector<float>(var.h_last ? states : 0)};
        for (std::size_t n : sizes) out.emplace_back(n);
        out.emplace_back(sums);
        s.ref.selective_scan_forward(a, out[0].data(), var.h_last ? out[1].data() : nullptr,
                                     var.h_last ? out[11].data() : nullptr);
        auto grad = [&](int k) { return out[2 + k].empty() ? nullptr : out[2 + k].data(); };
        s.ref.selective_scan_backward(a, gy.data(), var.g_h_last ? g_h_last.data() : nullptr,
                                      var.g_h_last ? g_step_sums.data() : nullptr,
                                      ScanGrads<float>{grad(0), grad(1), grad(2), grad(3), grad(4), grad(5), grad(6),
                                                       grad(7), grad(8)});
        return out;
      };
      const auto contiguous_ref =
          run_reference(args_over([&](int i) -> const float* { return host_inputs[i]->data(); }, {}));

      auto terms = [&](const std::vector<float>& ref, double count) {
        return (1.0 + max_abs(ref)) * (1.0 + count / 1000.0);
      };
      const char* names[9] = {"gu", "gdelta", "gdelta_bias", "gA_log", "gB", "gC", "gDskip", "gh0", "gz"};
      const double channels = double(sh.D), steps = double(sh.batch * sh.L);
      const double counts[9] = {0, 0, steps, steps, channels, channels, steps, 0, 0};
      auto compare = [&](const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref,
                         const std::string& what) {
        s.expect(KernelId::selective_scan_forward, "y", got[0], ref[0], what + " y", terms(ref[0], 0));
        s.expect(KernelId::selective_scan_forward, "h_last", got[1], ref[1], what + " h_last", terms(ref[1], 0));
        s.expect(KernelId::selective_scan_forward, "step sums", got[11], ref[11], what + " step sums",
                 terms(ref[11], double(std::min(sh.P, sh.L))));
        for (int k = 0; k < 9; ++k) {
          const char* kind = counts[k] > 0 ? "sums" : "per element";
          s.expect(KernelId::selective_scan_backward, kind, got[2 + k], ref[2 + k], what + " " + names[k],
                   terms(ref[2 + k], counts[k]));
        }
      };

      for (const ScanLayout& layout : kScanLayouts) {
        // The inputs as the layout places them: input i is laid[i] (or host_inputs[i]) from
        // offset[i] on.
        std::vector<float> laid[9];
        i64 offset[9] = {};
        std::array<i64, 4> strides = {};
        auto place = [&](int i, i64 width, i64 at, i64 row, i64 sequence) {
          laid[i] = spread_rows(*host_inputs[i], sh.batch, sh.L, width, at, row, sequence, sh.batch * sequence);
          offset[i] = at;
        };
        if (layout.strided_x) {
          const i64 row = sh.D + 3, sequence = (sh.L + 4) * row, at = 3 * row + 1;
          for (int i : {0, 1, 8}) place(i, sh.D, at, row, sequence);  // u, delta, z
          strides[0] = sequence;
          strides[1] = row;
        }
        if (layout.strided_bc) {
          const i64 row = 2 * sh.N + 5, sequence = (sh.L + 2) * row;
          place(4, sh.N, row + 2, row, sequence);         // B
          place(5, sh.N, row + sh.N + 4, row, sequence);  // C
          strides[2] = sequence;
          strides[3] = row;
        }
        auto input_vector = [&](int i) -> const std::vector<float>& {
          return laid[i].empty() ? *host_inputs[i] : laid[i];
        };

        const std::string what = "selective_scan batch,L,D,N,P=" + shape_str({sh.batch, sh.L, sh.D, sh.N, sh.P}) +
                                 " " + var.name + "; " + layout.name;
        auto got = run_twice(
            [&] {
              std::deque<DeviceBuffer<T, float>> din;  // buffers neither copy nor move
              for (int i = 0; i < 9; ++i) din.emplace_back(s.alloc, input_vector(i));
              auto dgy = s.put(gy), dghl = s.put(g_h_last), dgss = s.put(g_step_sums);
              const ScanArgs<T> da =
                  args_over([&](int i) -> const T* { return din[std::size_t(i)].get() + offset[i]; }, strides);
              auto dy = s.put(nans(tokens)), dh_last = s.put(nans(var.h_last ? states : 0)), dsums = s.put(nans(sums));
              s.dev.selective_scan_forward(da, dy.get(), var.h_last ? dh_last.get() : nullptr,
                                           var.h_last ? dsums.get() : nullptr);
              std::deque<DeviceBuffer<T, float>> dg;  // buffers neither copy nor move
              for (std::size_t n : sizes) dg.emplace_back(s.alloc, nans(n));
              std::size_t i = 0;
              auto grad_pointer = [&](DeviceBuffer<T, float>& b) { return sizes[i++] > 0 ? b.get() : nullptr; };
              s.dev.selective_scan_backward(da, dgy.get(), var.g_h_last ? dghl.get() : nullptr,
                                            var.g_h_last ? dgss.get() : nullptr, grads_of(dg, grad_pointer));
              std::vector<std::vector<float>> out = {dy.download(), dh_last.download()};
              for (const auto& b : dg) out.push_back(b.download());
              out.push_back(dsums.download());
              return out;
            },
            what);
        compare(got, contiguous_ref, what);
        if (layout.strided_x || layout.strided_bc) {
          const auto strided_ref = run_reference(
              args_over([&](int i) -> const float* { return input_vector(i).data() + offset[i]; }, strides));
          for (std::size_t k = 0; k < strided_ref.size(); ++k) {
            CHECK_MESSAGE(bitwise_equal(strided_ref[k], contiguous_ref[k]),
                          what << ": the reference on the strided inputs differs from the reference on contiguous "
                                  "copies (output "
                               << k << ")");
          }
          compare(got, strided_ref, what + " (against the reference on the same layout)");
        }
      }
    }
  }
}

// Two updates of several tensors at once (the second reads the moments the first wrote).
// The segment lists cross the CUDA side's chunk of 32 segments, include empty tensors,
// lengths around the vector width and 100,000+, and scale the gradients (clipping folded in).
template <typename T>
void check_adam(Suite<T>& s) {
  std::vector<std::vector<i64>> lists = {{1}, {1, 17, 1000}, {17, 0, 1, 1000, 33}, {70001, 1}};
  if (s.large()) lists.push_back({1, 7, 0, 33, 1000, 100003, 16, 5});
  {
    std::vector<i64> many;  // 75 tensors: three chunks, the last one partial
    for (int i = 0; i < 75; ++i) many.push_back(i % 11 == 3 ? 0 : (i * 37) % 101 + 1);
    lists.push_back(many);
  }
  std::uint64_t seed = 500;
  for (const std::vector<i64>& sizes : lists) {
    for (bool decoupled : {true, false}) {
      for (float grad_scale : {1.0f, 0.37f}) {
        AdamParams hp{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f - std::pow(0.9f, 3.0f), 1.0f - std::pow(0.999f, 3.0f),
                      decoupled, grad_scale};
        const std::size_t count = sizes.size();
        // per tensor: param, grad, m, v on the host; the reference updates them in place
        std::vector<std::vector<float>> start(4 * count), expected(4 * count);
        std::vector<AdamSegment<float>> ref_segments(count);
        i64 total = 0;
        for (std::size_t t = 0; t < count; ++t) {
          const std::size_t n = std::size_t(sizes[t]);
          start[4 * t] = random_floats(n, seed++);
          start[4 * t + 1] = random_floats(n, seed++, -3.0f, 3.0f);
          start[4 * t + 2] = random_floats(n, seed++, -0.1f, 0.1f);
          start[4 * t + 3] = random_floats(n, seed++, 0.0f, 0.01f);
          for (std::size_t k = 0; k < 4; ++k) expected[4 * t + k] = start[4 * t + k];
          ref_segments[t] = {expected[4 * t].data(), expected[4 * t + 1].data(), expected[4 * t + 2].data(),
                             expected[4 * t + 3].data(), sizes[t]};
          total += sizes[t];
        }
        for (int step = 0; step < 2; ++step) s.ref.adam_update(hp, ref_segments.data(), i64(count));
        const std::string what = "adam " + std::to_string(count) + " tensors, " + std::to_string(total) +
                                 " elements" + (decoupled ? " adamw" : " adam-l2") + " grad_scale " +
                                 std::to_string(grad_scale);
        // every tensor's param, m, v, concatenated
        auto concatenated = [&](const std::function<std::vector<float>(std::size_t)>& part) {
          std::vector<std::vector<float>> out(3);
          for (std::size_t t = 0; t < count; ++t) {
            for (std::size_t k = 0; k < 3; ++k) {
              auto values = part(4 * t + (k == 0 ? 0 : k + 1));
              out[k].insert(out[k].end(), values.begin(), values.end());
            }
          }
          return out;
        };
        auto got = run_twice(
            [&] {
              std::vector<std::unique_ptr<DeviceBuffer<T, float>>> buffers;
              std::vector<AdamSegment<T>> segments(count);
              for (const auto& host : start) buffers.push_back(std::make_unique<DeviceBuffer<T, float>>(s.alloc, host));
              for (std::size_t t = 0; t < count; ++t) {
                segments[t] = {buffers[4 * t]->get(), buffers[4 * t + 1]->get(), buffers[4 * t + 2]->get(),
                               buffers[4 * t + 3]->get(), sizes[t]};
              }
              for (int step = 0; step < 2; ++step) s.dev.adam_update(hp, segments.data(), i64(count));
              return concatenated([&](std::size_t i) { return buffers[i]->download(); });
            },
            what);
        const auto want = concatenated([&](std::size_t i) { return expected[i]; });
        s.expect(KernelId::adam_update, "param", got[0], want[0], what + " param");
        s.expect(KernelId::adam_update, "m", got[1], want[1], what + " m");
        s.expect(KernelId::adam_update, "v", got[2], want[2], what + " v");
      }
    }
  }
}

// ---- reductions ------------------------------------------------------------------------------

template <typename T>
void check_reduce(Suite<T>& s) {
  struct Shape { i64 outer, n, inner; };
  std::vector<Shape> shapes = {{1, 1, 1},    {7, 33, 1}, {3, 1000, 1}, {2, 33, 7}, {5, 7, 33},
                               {1, 300, 70}, {2, 0, 3},  {1, 20000, 1}, {1, 4096, 33}, {3, 7, 9},
                               {1, 1, 33},   {2, 1000, 17}, {5, 3, 1},  {1, 77, 8}};
  if (s.large()) shapes.push_back({1, 4096, 256});  // a bias gradient: column path split
  if (s.full()) {
    shapes.push_back({1, 1000003, 1});  // rows path split in many chunks
    shapes.push_back({2, 100000, 3});
  }
  std::uint64_t seed = 600;
  for (const Shape& sh : shapes) {
    const std::size_t in = std::size_t(sh.outer * sh.n * sh.inner), out = std::size_t(sh.outer * sh.inner);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      std::vector<float> x = random_floats(in, seed++);
      if (op == ReduceOp::Max) {
        // few distinct values: many ties, so "the first maximum" is really tested
        auto q = random_ints(in, seed++, -3, 3);
        for (std::size_t i = 0; i < in; ++i) x[i] = float(q[i]);
        if (in > 5) x[5] = std::numeric_limits<float>::quiet_NaN();  // a NaN wins its output
      }
      std::vector<float> y_ref(out);
      std::vector<int32_t> idx_ref(out);
      s.ref.reduce(op, x.data(), y_ref.data(), idx_ref.data(), sh.outer, sh.n, sh.inner);
      const std::string what = std::string("reduce ") + (op == ReduceOp::Sum ? "sum " : "max ") +
                               shape_str({sh.outer, sh.n, sh.inner});
      std::vector<int32_t> idx_got;
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dy = s.put(nans(out));
            auto didx = s.put_ints(std::vector<int32_t>(out, -7));
            s.dev.reduce(op, dx.get(), dy.get(), op == ReduceOp::Max ? didx.get() : nullptr, sh.outer, sh.n,
                         sh.inner);
            idx_got = didx.download();
            return std::vector<std::vector<float>>{dy.download()};
          },
          what);
      if (op == ReduceOp::Sum) {
        s.expect(KernelId::reduce, "sum", got[0], y_ref, what, double(sh.n));
      } else {
        s.expect(KernelId::reduce, "max", got[0], y_ref, what);
        s.expect(KernelId::reduce, "index", std::vector<float>(idx_got.begin(), idx_got.end()),
                 std::vector<float>(idx_ref.begin(), idx_ref.end()), what + " index");
      }
    }
  }

  std::vector<i64> sizes = {0, 1, 7, 33, 1000, 20000};
  if (s.large()) sizes.push_back(1000003);
  if (s.full()) sizes.push_back(3000017);
  for (i64 n : sizes) {
    auto x = random_floats(static_cast<std::size_t>(n), seed++);
    for (bool accumulate : {false, true}) {
      float expected = accumulate ? 1.25f : std::numeric_limits<float>::quiet_NaN();
      s.ref.sum_squares(x.data(), n, &expected, accumulate);
      const std::string what = "sum_squares n=" + std::to_string(n) + (accumulate ? " accumulate" : "");
      auto got = run_twice(
          [&] {
            auto dx = s.put(x);
            auto dout = s.put(std::vector<float>{accumulate ? 1.25f : std::numeric_limits<float>::quiet_NaN()});
            s.dev.sum_squares(dx.get(), n, dout.get(), accumulate);
            return std::vector<std::vector<float>>{dout.download()};
          },
          what);
      s.expect(KernelId::sum_squares, "out", got[0], std::vector<float>{expected}, what);
    }
  }
}

// ---- softmax and cross-entropy -------------------------------------------------------------------

struct RowShape {
  i64 rows, n;
};

// Rows of logits in [-range, range], odd rows shifted by 300 (so only a kernel that
// subtracts the row maximum stays finite).
std::vector<float> logits_for(const RowShape& sh, std::uint64_t seed, float range) {
  auto x = random_floats(std::size_t(sh.rows * sh.n), seed, -range, range);
  for (i64 r = 1; r < sh.rows; r += 2) {
    for (i64 j = 0; j < sh.n; ++j) x[std::size_t(r * sh.n + j)] += 300.0f;
  }
  return x;
}

template <typename T>
void check_softmax(Suite<T>& s) {
  const std::vector<RowShape> shapes = {{1, 1},  {7, 33},    {3, 1000}, {2, 30522}, {70, 128}, {3, 7},
                                        {5, 33}, {4, 16},    {3, 1037}, {65, 129}};
  std::uint64_t seed = 700;
  for (const RowShape& sh : shapes) {
    const std::size_t size = std::size_t(sh.rows * sh.n);
    for (bool log : {false, true}) {
      auto x = logits_for(sh, seed++, 8.0f);
      // masked entries: one in the first row, one on every third row
      if (size > 3) x[2] = -std::numeric_limits<float>::infinity();
      for (i64 r = 2; r < sh.rows && sh.n > 1; r += 3) {
        x[std::size_t(r * sh.n + r % sh.n)] = -std::numeric_limits<float>::infinity();
      }
      std::vector<float> y_ref(size);
      s.ref.softmax_forward(x.data(), y_ref.data(), sh.rows, sh.n, log);
      const std::string what = std::string(log ? "log_softmax " : "softmax ") + shape_str({sh.rows, sh.n});
      const char* output = log ? "log_softmax" : "softmax";
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dy = s.put(nans(size));
            s.dev.softmax_forward(dx.get(), dy.get(), sh.rows, sh.n, log);
            return std::vector<std::vector<float>>{dy.download()};
          },
          what);
      s.expect(KernelId::softmax_forward, output, got[0], y_ref, what);

      auto gy = random_floats(size, seed++);
      std::vector<float> gx_ref(size);
      s.ref.softmax_backward(y_ref.data(), gy.data(), gx_ref.data(), sh.rows, sh.n, log);
      auto gx = run_twice(
          [&] {
            auto dy = s.put(y_ref), dgy = s.put(gy), dgx = s.put(nans(size));
            s.dev.softmax_backward(dy.get(), dgy.get(), dgx.get(), sh.rows, sh.n, log);
            return std::vector<std::vector<float>>{dgx.download()};
          },
          what + " backward");
      s.expect(KernelId::softmax_backward, output, gx[0], gx_ref, what + " backward", double(sh.n));
    }
  }
}

template <typename T>
void check_cross_entropy(Suite<T>& s) {
  std::vector<RowShape> shapes = {{1, 1}, {7, 33}, {5, 1000}, {3, 30522}, {3, 7}, {5, 33}, {4, 16}};
  // the CPU's: a gradient larger than the caches, written with streaming stores
  if (s.large()) append(shapes, {{2, 1000}, {3, 1037}, {65, 129}, {2, 30522}, {300, 30522}});
  if (s.full()) shapes.push_back({64, 30522});
  const int32_t ignore = -100;
  std::uint64_t seed = 800;
  for (const RowShape& sh : shapes) {
    for (int variant = 0; variant < (sh.rows * sh.n > (i64(1) << 22) ? 1 : 2); ++variant) {  // 1: every row ignored
      const std::size_t size = std::size_t(sh.rows * sh.n);
      auto logits = logits_for(sh, seed++, 6.0f);
      auto targets = random_ints(std::size_t(sh.rows), seed++, 0, int32_t(sh.n - 1));
      for (i64 r = 0; r < sh.rows; ++r) {
        if (variant == 1 || (sh.rows > 2 && r % 3 == 1)) targets[std::size_t(r)] = ignore;
      }
      std::vector<float> lse_ref(std::size_t(sh.rows));
      float loss_ref = 0, count_ref = 0;
      s.ref.cross_entropy_forward(logits.data(), targets.data(), sh.rows, sh.n, ignore, lse_ref.data(), &loss_ref,
                                  &count_ref);
      const float gloss = 1.3f;
      std::vector<float> g_ref(size);
      s.ref.cross_entropy_backward(logits.data(), targets.data(), lse_ref.data(), &count_ref, &gloss, sh.rows, sh.n,
                                   ignore, g_ref.data());
      const std::string what = "cross_entropy " + shape_str({sh.rows, sh.n}) + (variant ? " all ignored" : "");
      auto got = run_twice(
          [&] {
            auto dlogits = s.put(logits);
            auto dtargets = s.put_ints(targets);
            auto dlse = s.put(nans(std::size_t(sh.rows))), dloss = s.put(nans(1)), dcount = s.put(nans(1));
            s.dev.cross_entropy_forward(dlogits.get(), dtargets.get(), sh.rows, sh.n, ignore, dlse.get(), dloss.get(),
                                        dcount.get());
            auto dgloss = s.put(std::vector<float>{gloss}), dg = s.put(nans(size));
            s.dev.cross_entropy_backward(dlogits.get(), dtargets.get(), dlse.get(), dcount.get(), dgloss.get(),
                                         sh.rows, sh.n, ignore, dg.get());
            return std::vector<std::vector<float>>{dlse.download(), dloss.download(), dcount.download(), dg.download()};
          },
          what);
      s.expect(KernelId::cross_entropy_forward, "lse", got[0], lse_ref, what + " lse");
      s.expect(KernelId::cross_entropy_forward, "loss", got[1], std::vector<float>{loss_ref}, what + " loss");
      s.expect(KernelId::cross_entropy_forward, "count", got[2], std::vector<float>{count_ref}, what + " count");
      const double scale = count_ref > 0 ? gloss / count_ref : 0.0;
      s.expect(KernelId::cross_entropy_backward, "glogits", got[3], g_ref, what + " backward", scale);
    }
  }
}

// ---- layer norm -----------------------------------------------------------------------------------

template <typename T>
void check_layer_norm(Suite<T>& s) {
  struct Shape { i64 rows, D; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {5, 256}, {300, 33}, {3, 1000}, {7, 7}, {33, 33}, {5, 16}, {70, 65}};
  if (s.large()) append(shapes, {{300, 256}, {2, 1037}});
  if (s.full()) shapes.push_back({4096, 256});
  std::uint64_t seed = 900;
  for (const Shape& sh : shapes) {
    for (bool affine : {true, false}) {
      const std::size_t size = std::size_t(sh.rows * sh.D), rows = std::size_t(sh.rows), D = std::size_t(sh.D);
      auto x = random_floats(size, seed++, -3.0f, 5.0f);
      // even rows far from zero: the variance must not be formed as E[x^2] - E[x]^2
      for (std::size_t r = 0; r < rows; r += 2) {
        for (std::size_t d = 0; d < D; ++d) x[r * D + d] += 10.0f;
      }
      auto gamma = random_floats(D, seed++, 0.5f, 1.5f), beta = random_floats(D, seed++);
      const float* gp = affine ? gamma.data() : nullptr;
      const float* bp = affine ? beta.data() : nullptr;
      const float eps = 1e-5f;
      std::vector<float> y_ref(size), mean_ref(rows), rstd_ref(rows);
      s.ref.layer_norm_forward(x.data(), gp, bp, sh.rows, sh.D, eps, y_ref.data(), mean_ref.data(), rstd_ref.data());
      auto gy = random_floats(size, seed++);
      std::vector<float> gx_ref(size), gg_ref(D), gb_ref(D);
      s.ref.layer_norm_backward(x.data(), gp, mean_ref.data(), rstd_ref.data(), gy.data(), sh.rows, sh.D,
                                gx_ref.data(), gg_ref.data(), gb_ref.data());
      const std::string what = "layer_norm " + shape_str({sh.rows, sh.D}) + (affine ? "" : " no affine");
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dgamma = s.put(gamma), dbeta = s.put(beta);
            auto dy = s.put(nans(size)), dmean = s.put(nans(rows)), drstd = s.put(nans(rows));
            s.dev.layer_norm_forward(dx.get(), affine ? dgamma.get() : nullptr, affine ? dbeta.get() : nullptr,
                                     sh.rows, sh.D, T(eps), dy.get(), dmean.get(), drstd.get());
            // backward from the reference statistics, so it is judged on its own
            auto dmean_ref = s.put(mean_ref), drstd_ref = s.put(rstd_ref), dgy = s.put(gy);
            auto dgx = s.put(nans(size)), dgg = s.put(nans(D)), dgb = s.put(nans(D));
            s.dev.layer_norm_backward(dx.get(), affine ? dgamma.get() : nullptr, dmean_ref.get(), drstd_ref.get(),
                                      dgy.get(), sh.rows, sh.D, dgx.get(), dgg.get(), dgb.get());
            return std::vector<std::vector<float>>{dy.download(),  dmean.download(), drstd.download(),
                                                   dgx.download(), dgg.download(),   dgb.download()};
          },
          what);
      s.expect(KernelId::layer_norm_forward, "y", got[0], y_ref, what + " y");
      s.expect(KernelId::layer_norm_forward, "mean", got[1], mean_ref, what + " mean");
      s.expect(KernelId::layer_norm_forward, "rstd", got[2], rstd_ref, what + " rstd");
      s.expect(KernelId::layer_norm_backward, "gx", got[3], gx_ref, what + " gx");
      s.expect(KernelId::layer_norm_backward, "gamma beta", got[4], gg_ref, what + " ggamma", double(sh.rows));
      s.expect(KernelId::layer_norm_backward, "gamma beta", got[5], gb_ref, what + " gbeta", double(sh.rows));
    }
  }
}

// ---- residual + dropout + layer norm ----------------------------------------------------------------

// Offsets of every residue mod 4 (dropout's Philox blocks start part-way through a row);
// with and without the gradient that reaches the sum directly; gx or gy not wanted.
template <typename T>
void check_residual_layer_norm(Suite<T>& s) {
  struct Shape { i64 rows, D; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {5, 256}, {300, 33}, {3, 1000}, {70, 65}};
  if (s.large()) append(shapes, {{300, 256}, {2, 1037}});
  if (s.full()) shapes.push_back({4096, 256});
  struct Variant { float p; std::uint64_t offset; bool affine, with_gs, want_gx, want_gy; };
  const Variant variants[] = {{0.3f, 5, true, true, true, true},  {0.0f, 0, true, false, true, true},
                              {0.5f, 2, false, true, false, true}, {0.1f, (std::uint64_t(1) << 40) + 7, true, true, true, false}};
  std::uint64_t seed = 950;
  for (const Shape& sh : shapes) {
    for (const Variant& v : variants) {
      const std::size_t size = std::size_t(sh.rows * sh.D), rows = std::size_t(sh.rows), D = std::size_t(sh.D);
      const std::uint64_t key = 0x5eed0000ULL + seed;
      auto x = random_floats(size, seed++, -3.0f, 5.0f), y = random_floats(size, seed++, -2.0f, 2.0f);
      auto gamma = random_floats(D, seed++, 0.5f, 1.5f), beta = random_floats(D, seed++);
      const float* gp = v.affine ? gamma.data() : nullptr;
      const float* bp = v.affine ? beta.data() : nullptr;
      const float eps = 1e-5f;
      std::vector<float> sum_ref(size), out_ref(size), mean_ref(rows), rstd_ref(rows);
      s.ref.residual_layer_norm_forward(x.data(), y.data(), gp, bp, sh.rows, sh.D, v.p, key, v.offset, eps,
                                        sum_ref.data(), out_ref.data(), mean_ref.data(), rstd_ref.data());
      auto gout = random_floats(size, seed++), gs = random_floats(size, seed++);
      std::vector<float> gx_ref(size), gy_ref(size), gg_ref(D), gb_ref(D);
      s.ref.residual_layer_norm_backward(sum_ref.data(), gp, mean_ref.data(), rstd_ref.data(), gout.data(),
                                         v.with_gs ? gs.data() : nullptr, sh.rows, sh.D, v.p, key, v.offset,
                                         gx_ref.data(), gy_ref.data(), gg_ref.data(), gb_ref.data());
      const std::string what = "residual_layer_norm " + shape_str({sh.rows, sh.D}) + " p=" + std::to_string(v.p) +
                               " offset " + std::to_string(v.offset) + (v.affine ? "" : " no affine") +
                               (v.with_gs ? " with gs" : "");
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dy = s.put(y), dgamma = s.put(gamma), dbeta = s.put(beta);
            auto dsum = s.put(nans(size)), dout = s.put(nans(size)), dmean = s.put(nans(rows)),
                 drstd = s.put(nans(rows));
            s.dev.residual_layer_norm_forward(dx.get(), dy.get(), v.affine ? dgamma.get() : nullptr,
                                              v.affine ? dbeta.get() : nullptr, sh.rows, sh.D, v.p, key, v.offset,
                                              T(eps), dsum.get(), dout.get(), dmean.get(), drstd.get());
            // backward from the reference's sum and statistics, so it is judged on its own
            auto dsum_ref = s.put(sum_ref), dmean_ref = s.put(mean_ref), drstd_ref = s.put(rstd_ref);
            auto dgout = s.put(gout), dgs = s.put(gs);
            auto dgx = s.put(nans(size)), dgy = s.put(nans(size)), dgg = s.put(nans(D)), dgb = s.put(nans(D));
            s.dev.residual_layer_norm_backward(dsum_ref.get(), v.affine ? dgamma.get() : nullptr, dmean_ref.get(),
                                               drstd_ref.get(), dgout.get(), v.with_gs ? dgs.get() : nullptr, sh.rows,
                                               sh.D, v.p, key, v.offset, v.want_gx ? dgx.get() : nullptr,
                                               v.want_gy ? dgy.get() : nullptr, dgg.get(), dgb.get());
            return std::vector<std::vector<float>>{dsum.download(), dout.download(), dmean.download(),
                                                   drstd.download(), dgx.download(), dgy.download(),
                                                   dgg.download(), dgb.download()};
          },
          what);
      s.expect(KernelId::residual_layer_norm_forward, "sum", got[0], sum_ref, what + " sum");
      s.expect(KernelId::residual_layer_norm_forward, "out", got[1], out_ref, what + " out");
      s.expect(KernelId::residual_layer_norm_forward, "mean", got[2], mean_ref, what + " mean");
      s.expect(KernelId::residual_layer_norm_forward, "rstd", got[3], rstd_ref, what + " rstd");
      // An output not wanted is not written: it is still NaN.
      if (v.want_gx) s.expect(KernelId::residual_layer_norm_backward, "gx gy", got[4], gx_ref, what + " gx");
      else CHECK_MESSAGE(std::all_of(got[4].begin(), got[4].end(), [](float f) { return std::isnan(f); }), what << " wrote gx");
      if (v.want_gy) s.expect(KernelId::residual_layer_norm_backward, "gx gy", got[5], gy_ref, what + " gy");
      else CHECK_MESSAGE(std::all_of(got[5].begin(), got[5].end(), [](float f) { return std::isnan(f); }), what << " wrote gy");
      s.expect(KernelId::residual_layer_norm_backward, "gamma beta", got[6], gg_ref, what + " ggamma", double(sh.rows));
      s.expect(KernelId::residual_layer_norm_backward, "gamma beta", got[7], gb_ref, what + " gbeta", double(sh.rows));
    }
  }
}

// ---- embedding --------------------------------------------------------------------------------------

template <typename T>
void check_embedding(Suite<T>& s) {
  // ids drawn from [0, id_range): repeats guaranteed; or (id_range 0) n distinct rows of
  // the table in shuffled order, a permutation when n == V (the models' row gathers).
  struct Shape { i64 V, D, n; int id_range; };
  std::vector<Shape> shapes = {{1, 1, 1, 1}, {7, 33, 7, 3}, {50, 256, 1000, 50}, {1000, 1, 33, 1000}, {5, 7, 300, 1},
                               {1, 5, 1, 0},  {300, 37, 300, 0}, {4096, 256, 4096, 0}, {1000, 19, 333, 0}};
  shapes.push_back({s.full() ? 30522 : 3000, 33, 1000, 200});
  if (s.full()) shapes.push_back({30522, 256, 4096, 30522});
  std::uint64_t seed = 1000;
  for (const Shape& sh : shapes) {
    const std::size_t table_size = std::size_t(sh.V * sh.D), out_size = std::size_t(sh.n * sh.D);
    auto table = random_floats(table_size, seed++);
    std::vector<std::int32_t> ids;
    if (sh.id_range > 0) {
      ids = random_ints(std::size_t(sh.n), seed++, 0, sh.id_range - 1);
      if (sh.n > 2) ids.back() = int32_t(sh.V - 1);  // the last vocabulary row is used
    } else {
      ids.resize(std::size_t(sh.V));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed++));
      ids.resize(std::size_t(sh.n));
    }
    std::vector<float> out_ref(out_size);
    s.ref.embedding_forward(table.data(), ids.data(), sh.n, sh.V, sh.D, out_ref.data());
    auto gout = random_floats(out_size, seed++);
    std::vector<float> gtable_ref(table_size);
    s.ref.embedding_backward(ids.data(), gout.data(), sh.n, sh.V, sh.D, gtable_ref.data());
    const std::string what = "embedding V,D,n=" + shape_str({sh.V, sh.D, sh.n});
    auto got = run_twice(
        [&] {
          auto dtable = s.put(table), dgout = s.put(gout);
          auto dids = s.put_ints(ids);
          auto dout = s.put(nans(out_size)), dgtable = s.put(nans(table_size));
          s.dev.embedding_forward(dtable.get(), dids.get(), sh.n, sh.V, sh.D, dout.get());
          s.dev.embedding_backward(dids.get(), dgout.get(), sh.n, sh.V, sh.D, dgtable.get());
          return std::vector<std::vector<float>>{dout.download(), dgtable.download()};
        },
        what);
    s.expect(KernelId::embedding_forward, "out", got[0], out_ref, what + " forward");
    s.expect(KernelId::embedding_backward, "gtable", got[1], gtable_ref, what + " backward", double(sh.n));
  }
}

// ---- attention --------------------------------------------------------------------------------------

template <typename T>
void check_attention(Suite<T>& s) {
  struct Shape { i64 BH, L, dh; };
  std::vector<Shape> shapes = {{1, 1, 1}, {2, 7, 16}, {3, 33, 64}, {1, 70, 33}, {2, 40, 128}, {1, 65, 7}};
  // around the CPU's 64-row tile, head sizes that are not multiples of 16
  if (s.large()) append(shapes, {{2, 7, 5}, {3, 33, 16}, {1, 64, 64}, {2, 65, 33}, {1, 130, 70}, {4, 100, 64}});
  if (s.full()) {
    shapes.push_back({128, 128, 64});  // the paper model: batch 32 x 4 heads, block 128
    shapes.push_back({1, 1029, 64});
  }
  std::uint64_t seed = 1100;
  for (const Shape& sh : shapes) {
    for (bool causal : {true, false}) {
      const std::size_t size = std::size_t(sh.BH * sh.L * sh.dh), rows = std::size_t(sh.BH * sh.L);
      // scores of a few units: the softmax is neither uniform nor one-hot
      auto q = random_floats(size, seed++, -1.5f, 1.5f), k = random_floats(size, seed++, -1.5f, 1.5f);
      auto v = random_floats(size, seed++);
      const float scale = 1.0f / std::sqrt(float(sh.dh));
      std::vector<float> out_ref(size), lse_ref(rows);
      s.ref.attention_forward(q.data(), k.data(), v.data(), sh.BH, sh.L, sh.dh, scale, causal, out_ref.data(),
                              lse_ref.data());
      auto gout = random_floats(size, seed++);
      std::vector<float> gq_ref(size), gk_ref(size), gv_ref(size);
      s.ref.attention_backward(q.data(), k.data(), v.data(), out_ref.data(), lse_ref.data(), gout.data(), sh.BH,
                               sh.L, sh.dh, scale, causal, gq_ref.data(), gk_ref.data(), gv_ref.data());
      const std::string what = "attention BH,L,dh=" + shape_str({sh.BH, sh.L, sh.dh}) + (causal ? " causal" : "");
      auto got = run_twice(
          [&] {
            auto dq = s.put(q), dk = s.put(k), dv = s.put(v);
            auto dout = s.put(nans(size)), dlse = s.put(nans(rows));
            s.dev.attention_forward(dq.get(), dk.get(), dv.get(), sh.BH, sh.L, sh.dh, T(scale), causal, dout.get(),
                                    dlse.get());
            // backward from the reference forward, so it is judged on its own
            auto dout_ref = s.put(out_ref), dlse_ref = s.put(lse_ref), dgout = s.put(gout);
            auto dgq = s.put(nans(size)), dgk = s.put(nans(size)), dgv = s.put(nans(size));
            s.dev.attention_backward(dq.get(), dk.get(), dv.get(), dout_ref.get(), dlse_ref.get(), dgout.get(), sh.BH,
                                     sh.L, sh.dh, T(scale), causal, dgq.get(), dgk.get(), dgv.get());
            return std::vector<std::vector<float>>{dout.download(), dlse.download(), dgq.download(), dgk.download(),
                                                   dgv.download()};
          },
          what);
      s.expect(KernelId::attention_forward, "out", got[0], out_ref, what + " out");
      s.expect(KernelId::attention_forward, "lse", got[1], lse_ref, what + " lse");
      s.expect(KernelId::attention_backward, "gq", got[2], gq_ref, what + " gq");
      s.expect(KernelId::attention_backward, "gk", got[3], gk_ref, what + " gk");
      s.expect(KernelId::attention_backward, "gv", got[4], gv_ref, what + " gv");
    }
  }
}

// ---- attention over a key/value cache -----------------------------------------------------------------

// The n newest of L positions against heads of `capacity` rows of which the first L are
// filled; the unfilled rows hold NaN, so a kernel that reads past L fails. Around the CPU's
// 64-key blocks and its switch from row-by-row products to packed tiles or GEMMs (at 8 rows
// with AVX-512, 4 with AVX2), the CUDA kernel's 128-key chunks, head sizes that are not
// multiples of 8 or 16, n = 1 (a step of generation), n = L (a whole prompt) and chunks of a
// prompt in between.
template <typename T>
void check_attention_decode(Suite<T>& s) {
  struct Shape { i64 BH, n, L, capacity, dh; };
  std::vector<Shape> shapes = {{1, 1, 1, 1, 1},      {2, 1, 7, 9, 13},     {3, 1, 70, 75, 64}, {2, 3, 33, 40, 16},
                               {1, 5, 5, 9, 7},      {2, 4, 65, 65, 13},   {1, 7, 40, 48, 64}, {2, 8, 65, 70, 16},
                               {2, 37, 130, 131, 33}, {1, 1, 129, 130, 128}};
  if (s.large())
    append(shapes, {{4, 1, 1029, 1100, 64}, {32, 1, 200, 256, 64}, {2, 70, 300, 300, 64}, {1, 65, 65, 70, 70},
                    {3, 2, 257, 300, 5}});
  if (s.full()) append(shapes, {{32, 1, 4096, 4096, 64}, {4, 256, 2048, 4096, 64}});
  std::uint64_t seed = 1150;
  for (const Shape& sh : shapes) {
    const std::size_t q_size = std::size_t(sh.BH * sh.n * sh.dh), cache = std::size_t(sh.BH * sh.capacity * sh.dh);
    // scores of a few units: the softmax is neither uniform nor one-hot
    auto q = random_floats(q_size, seed++, -1.5f, 1.5f), k = random_floats(cache, seed++, -1.5f, 1.5f);
    auto v = random_floats(cache, seed++);
    for (i64 h = 0; h < sh.BH; ++h) {
      for (i64 e = sh.L * sh.dh; e < sh.capacity * sh.dh; ++e) {
        k[std::size_t(h * sh.capacity * sh.dh + e)] = v[std::size_t(h * sh.capacity * sh.dh + e)] = std::nanf("");
      }
    }
    const float scale = 1.0f / std::sqrt(float(sh.dh));
    const i64 kv_stride = sh.capacity * sh.dh;
    std::vector<float> expected(q_size);
    s.ref.attention_decode_forward(q.data(), k.data(), v.data(), sh.BH, sh.n, sh.L, kv_stride, sh.dh, scale,
                                   expected.data());
    const std::string what = "attention_decode BH,n,L,capacity,dh=" + shape_str({sh.BH, sh.n, sh.L, sh.capacity, sh.dh});
    auto got = run_twice(
        [&] {
          auto dq = s.put(q), dk = s.put(k), dv = s.put(v), dout = s.put(nans(q_size));
          s.dev.attention_decode_forward(dq.get(), dk.get(), dv.get(), sh.BH, sh.n, sh.L, kv_stride, sh.dh, T(scale),
                                         dout.get());
          return std::vector<std::vector<float>>{dout.download()};
        },
        what);
    s.expect(KernelId::attention_decode_forward, "out", got[0], expected, what);
  }
}

// ---- Plücker pairing ---------------------------------------------------------------------------------

template <typename T>
void check_plucker(Suite<T>& s) {
  struct Shape { i64 B, L, r; std::vector<int32_t> offsets; };
  const std::vector<int32_t> paper = {1, 2, 4, 8, 12, 16};
  std::vector<Shape> shapes = {{1, 1, 1, {1}},
                               {2, 7, 4, {1, 2}},
                               {2, 33, 32, paper},
                               {1, 20, 5, {1, 3, 25}},  // an offset longer than the sequence
                               {3, 9, 7, {2}},
                               {1, 20, 16, {1, 3}},
                               {3, 7, 7, {1, 2, 4, 8}},  // L shorter than the largest offset
                               {1, 33, 33, {1, 5}},
                               {2, 5, 2, {1}},           // P = 1
                               {1, 1, 32, paper},        // no valid offset anywhere
                               {1, 12, 32, paper}};
  if (s.large()) {
    shapes.push_back({2, 40, 32, paper});      // the paper's rank and offsets
    shapes.push_back({1, 18, 64, {2, 1}});     // the CPU's largest fast rank, unsorted offsets
    shapes.push_back({1, 6, 70, {1, 2}});      // above it
  }
  if (s.full()) shapes.push_back({32, 128, 32, paper});
  std::uint64_t seed = 1200;
  for (const Shape& sh : shapes) {
    const i64 m = i64(sh.offsets.size()), P = sh.r * (sh.r - 1) / 2;
    const std::size_t zs = std::size_t(sh.B * sh.L * sh.r), ns = std::size_t(sh.B * sh.L * m);
    const std::size_t outs = std::size_t(sh.B * sh.L * m * P), means = std::size_t(sh.B * sh.L * P);
    auto z = random_floats(zs, seed++);
    // Row 2 parallel to row 1 (p = 0, the norm clamps to eps) and row 3 almost parallel
    // to row 1, where the sequence allows.
    for (i64 c = 0; c < sh.r && sh.L >= 3; ++c) z[std::size_t(2 * sh.r + c)] = 2.0f * z[std::size_t(sh.r + c)];
    for (i64 c = 0; c < sh.r && sh.L >= 4; ++c) {
      z[std::size_t(3 * sh.r + c)] = -z[std::size_t(sh.r + c)] + (c == 0 ? 1e-3f : 0.0f);
    }
    const float eps = 1e-6f;
    const int32_t* off = sh.offsets.data();
    std::vector<float> out_ref(outs), norms_ref(ns), mean_ref(means), mean_norms_ref(ns);
    s.ref.plucker_forward(z.data(), sh.B, sh.L, sh.r, off, m, eps, out_ref.data(), norms_ref.data());
    s.ref.plucker_mean_forward(z.data(), sh.B, sh.L, sh.r, off, m, eps, mean_ref.data(), mean_norms_ref.data());
    auto gout = random_floats(outs, seed++), gmean = random_floats(means, seed++);
    std::vector<float> gz_ref(zs), gz_mean_ref(zs);
    s.ref.plucker_backward(z.data(), sh.B, sh.L, sh.r, off, m, eps, out_ref.data(), norms_ref.data(), gout.data(),
                           gz_ref.data());
    s.ref.plucker_mean_backward(z.data(), sh.B, sh.L, sh.r, off, m, eps, norms_ref.data(), gmean.data(),
                                gz_mean_ref.data());
    const std::string what = "plucker B,L,r,m=" + shape_str({sh.B, sh.L, sh.r, m});
    auto got = run_twice(
        [&] {
          auto dz = s.put(z);
          auto dout = s.put(nans(outs)), dnorms = s.put(nans(ns)), dmean = s.put(nans(means)),
               dmean_norms = s.put(nans(ns));
          s.dev.plucker_forward(dz.get(), sh.B, sh.L, sh.r, off, m, T(eps), dout.get(), dnorms.get());
          s.dev.plucker_mean_forward(dz.get(), sh.B, sh.L, sh.r, off, m, T(eps), dmean.get(), dmean_norms.get());
          // backward from the reference forward, so it is judged on its own
          auto dout_ref = s.put(out_ref), dnorms_ref = s.put(norms_ref), dgout = s.put(gout), dgmean = s.put(gmean);
          auto dgz = s.put(nans(zs)), dgz_mean = s.put(nans(zs));
          s.dev.plucker_backward(dz.get(), sh.B, sh.L, sh.r, off, m, T(eps), dout_ref.get(), dnorms_ref.get(),
                                 dgout.get(), dgz.get());
          s.dev.plucker_mean_backward(dz.get(), sh.B, sh.L, sh.r, off, m, T(eps), dnorms_ref.get(), dgmean.get(),
                                      dgz_mean.get());
          return std::vector<std::vector<float>>{dout.download(),        dnorms.download(), dmean.download(),
                                                 dmean_norms.download(), dgz.download(),    dgz_mean.download()};
        },
        what);
    s.expect(KernelId::plucker_forward, "out", got[0], out_ref, what + " out");
    s.expect(KernelId::plucker_forward, "norms", got[1], norms_ref, what + " norms");
    s.expect(KernelId::plucker_mean_forward, "out", got[2], mean_ref, what + " mean");
    s.expect(KernelId::plucker_mean_forward, "norms", got[3], mean_norms_ref, what + " mean norms");
    s.expect(KernelId::plucker_backward, "gz", got[4], gz_ref, what + " backward", max_abs(gz_ref));
    s.expect(KernelId::plucker_mean_backward, "gz", got[5], gz_mean_ref, what + " mean backward", max_abs(gz_mean_ref));
  }
}

// ---- memory movement ---------------------------------------------------------------------------------

struct Copy {
  std::vector<i64> shape, src, dst;
};

// The view `shape` of a packed source read through the axis permutation `perm` (the first
// axis broadcast when asked), into a packed destination whose rows are `pad` wider (a
// window of a concatenation).
Copy permuted_copy(const std::vector<i64>& shape, const std::vector<int>& perm, i64 pad, bool broadcast_first) {
  const std::size_t n = shape.size();
  std::vector<i64> base(n), base_strides(n);
  for (std::size_t d = 0; d < n; ++d) base[std::size_t(perm[d])] = shape[d];
  for (i64 d = i64(n) - 1, acc = 1; d >= 0; --d) base_strides[std::size_t(d)] = acc, acc *= base[std::size_t(d)];
  Copy c{shape, std::vector<i64>(n), std::vector<i64>(n)};
  for (i64 d = i64(n) - 1, acc = 1; d >= 0; --d) {
    const std::size_t u = std::size_t(d);
    c.src[u] = broadcast_first && d == 0 ? 0 : base_strides[std::size_t(perm[u])];
    c.dst[u] = acc;
    acc *= shape[u] + (u == n - 1 ? pad : 0);
  }
  return c;
}

// ---- the sum over ranks -----------------------------------------------------------------------

// The tree order written out by hand for the counts whose shape matters (an oracle
// independent of the split rule): element i of `v`, count slices of n.
float tree_by_hand(const std::vector<float>& v, i64 n, i64 count, i64 i) {
  const auto at = [&](i64 k) { return v[std::size_t(k * n + i)]; };
  switch (count) {
    case 1: return at(0);
    case 2: return at(0) + at(1);
    case 3: return (at(0) + at(1)) + at(2);
    case 4: return (at(0) + at(1)) + (at(2) + at(3));
    case 5: return ((at(0) + at(1)) + at(2)) + (at(3) + at(4));
    case 6: return ((at(0) + at(1)) + at(2)) + ((at(3) + at(4)) + at(5));
    case 7: return ((at(0) + at(1)) + (at(2) + at(3))) + ((at(4) + at(5)) + at(6));
    case 8: return ((at(0) + at(1)) + (at(2) + at(3))) + ((at(4) + at(5)) + (at(6) + at(7)));
  }
  FAIL("no hand-written order for " << count << " slices");
  return 0;
}

// Slices of mixed magnitudes (2^-12 .. 2^12), so that another order of the same additions
// gives other bits; counts 1 .. 8 and 13, lengths that end inside the reference's chunk and
// past several; out apart from the slices and out = the first slice (in place).
template <typename T>
void check_tree_sum(Suite<T>& s) {
  std::uint64_t seed = 1400;
  for (i64 count : {i64(1), i64(2), i64(3), i64(4), i64(5), i64(6), i64(7), i64(8), i64(13)}) {
    for (i64 n : {i64(1), i64(17), i64(513), i64(4099)}) {
      const std::size_t size = std::size_t(count * n);
      auto v = random_floats(size, seed++);
      const auto scale = random_ints(size, seed++, -12, 12);
      for (std::size_t k = 0; k < size; ++k) v[k] = std::ldexp(v[k], scale[k]);
      const std::string what = "tree_sum count=" + std::to_string(count) + " n=" + std::to_string(n);
      std::vector<float> expected(std::size_t(n), std::nanf(""));
      s.ref.tree_sum(v.data(), n, count, expected.data());
      double terms = 0;
      std::size_t other_order_differs = 0;
      for (i64 i = 0; i < n; ++i) {
        double magnitude = 0;
        float in_row_order = 0;
        for (i64 k = 0; k < count; ++k) {
          magnitude += std::fabs(double(v[std::size_t(k * n + i)]));
          in_row_order += v[std::size_t(k * n + i)];
        }
        terms = std::max(terms, magnitude);
        if (count <= 8) {
          const float hand = tree_by_hand(v, n, count, i);
          if (std::memcmp(&hand, &expected[std::size_t(i)], sizeof hand) != 0) {
            FAIL_CHECK(what << ": the reference's element " << i << " is " << expected[std::size_t(i)]
                            << ", the tree order by hand gives " << hand);
            break;
          }
        }
        other_order_differs += in_row_order != expected[std::size_t(i)];
      }
      // The slices are such that adding them one after another is another result: a kernel
      // that ignored the tree could not pass.
      if (count >= 4 && n >= 513) CHECK_MESSAGE(other_order_differs > 0, what << ": the order does not show");
      auto got = run_twice(
          [&] {
            auto dv = s.put(v), dout = s.put(nans(std::size_t(n)));
            s.dev.tree_sum(dv.get(), n, count, dout.get());
            auto in_place = s.put(v);
            s.dev.tree_sum(in_place.get(), n, count, in_place.get());
            auto first = in_place.download();
            first.resize(std::size_t(n));
            return std::vector<std::vector<float>>{dout.download(), first};
          },
          what);
      s.expect(KernelId::tree_sum, "out", got[0], expected, what, terms);
      s.expect(KernelId::tree_sum, "out", got[1], expected, what + " in place", terms);
    }
  }
}

template <typename T>
void check_memory(Suite<T>& s) {
  std::vector<Copy> copies = {
      {{1}, {1}, {1}},
      {{33, 7}, {1, 33}, {7, 1}},               // transpose into contiguous
      {{5, 6, 7}, {84, 14, 2}, {42, 7, 1}},     // every other element of the last axis
      {{1000, 3}, {0, 1}, {3, 1}},              // one row repeated (expand + contiguous)
      {{300, 17}, {1, 0}, {17, 1}},             // each element repeated along a row (a sum's backward)
      {{40, 9, 16}, {9, 1, 0}, {150, 16, 1}},   // the same into a window, rows of 16
      {{4, 1, 5}, {5, 5, 1}, {5, 5, 1}},        // contiguous (single memcpy)
      {{3, 4, 5}, {1, 3, 12}, {20, 5, 1}},      // full reversal of axis order
      permuted_copy({64, 128}, {0, 1}, 0, false),          // a plain packed copy
      permuted_copy({33, 257}, {0, 1}, 31, false),         // into a concatenation's window
      permuted_copy({7, 1000}, {1, 0}, 0, false),          // a transpose
      permuted_copy({3, 5, 1031}, {0, 1, 2}, 3, true),     // broadcast source rows into a window
  };
  const std::size_t small_copies = copies.size();
  // heads split: (B, L, H, dh) -> (B, H, L, dh)
  if (s.large()) copies.push_back(permuted_copy({32, 4, 128, 64}, {0, 2, 1, 3}, 0, false));
  std::uint64_t seed = 1300;
  for (int elem : {1, 2, 4, 8}) {
    for (std::size_t ci = 0; ci < copies.size(); ++ci) {
      if (ci >= small_copies && elem != 4) continue;  // the large copy once
      const Copy& c = copies[ci];
      CopyLayout l{};
      l.ndim = int(c.shape.size());
      i64 reach_src = 0, reach_dst = 0;
      for (int d = 0; d < l.ndim; ++d) {
        l.shape[d] = c.shape[std::size_t(d)];
        l.stride_src[d] = c.src[std::size_t(d)];
        l.stride_dst[d] = c.dst[std::size_t(d)];
        reach_src += (l.shape[d] - 1) * l.stride_src[d];
        reach_dst += (l.shape[d] - 1) * l.stride_dst[d];
      }
      const std::size_t src_bytes = std::size_t(reach_src + 1) * std::size_t(elem);
      const std::size_t dst_bytes = std::size_t(reach_dst + 1) * std::size_t(elem);
      auto noise = random_ints(src_bytes, seed++, 0, 255);
      std::vector<std::uint8_t> src(noise.begin(), noise.end());
      std::vector<std::uint8_t> expected(dst_bytes, 0xAB);
      s.ref_mem.strided_copy(l, src.data(), expected.data(), elem);
      DeviceBuffer<std::uint8_t> dsrc(s.alloc, src), ddst(s.alloc, std::vector<std::uint8_t>(dst_bytes, 0xAB));
      s.backend.memory->strided_copy(l, dsrc.get(), ddst.get(), elem);
      const std::string what = "strided_copy elem " + std::to_string(elem) + " case " + std::to_string(ci);
      const auto got = ddst.download();
      s.expect(KernelId::strided_copy, "dst", std::vector<float>(got.begin(), got.end()),
               std::vector<float>(expected.begin(), expected.end()), what);
    }
  }

  // casts between f32, f64, i32 with the awkward values: fractions of both signs,
  // out-of-range, NaN, infinities
  const std::vector<double> values = {0.0, -0.0, 1.5, -1.5, 2.5, -2.7, 123456789.75, 3e9, -3e9,
                                      std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(), 1e-40, 16777217.0, 7.0};
  const int sizes[] = {4, 8, 4};
  for (int from = 0; from < 3; ++from) {
    for (int to = 0; to < 3; ++to) {
      std::vector<std::uint8_t> src(values.size() * std::size_t(sizes[from]));
      for (std::size_t i = 0; i < values.size(); ++i) {
        const double v = values[i];
        if (from == 0) { float f = float(v); std::memcpy(&src[i * 4], &f, 4); }
        if (from == 1) std::memcpy(&src[i * 8], &v, 8);
        if (from == 2) { int32_t k = std::isfinite(v) && std::fabs(v) < 2e9 ? int32_t(v) : 17; std::memcpy(&src[i * 4], &k, 4); }
      }
      const std::size_t dst_bytes = values.size() * std::size_t(sizes[to]);
      std::vector<std::uint8_t> expected(dst_bytes, 0);
      s.ref_mem.cast(src.data(), from, expected.data(), to, i64(values.size()));
      DeviceBuffer<std::uint8_t> dsrc(s.alloc, src), ddst(s.alloc, std::vector<std::uint8_t>(dst_bytes, 0xCD));
      s.backend.memory->cast(dsrc.get(), from, ddst.get(), to, i64(values.size()));
      auto decode = [&](const std::vector<std::uint8_t>& bytes) {
        std::vector<double> out(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (to == 0) { float f; std::memcpy(&f, &bytes[i * 4], 4); out[i] = f; }
          if (to == 1) std::memcpy(&out[i], &bytes[i * 8], 8);
          if (to == 2) { int32_t k; std::memcpy(&k, &bytes[i * 4], 4); out[i] = k; }
        }
        return out;
      };
      const std::string what = "cast " + std::to_string(from) + " -> " + std::to_string(to);
      const Tolerance* t = find_tolerance(KernelId::cast, "dst");
      REQUIRE(t != nullptr);
      expect_close(decode(ddst.download()), decode(expected), t->bound.atol, t->bound.rtol,
                   s.backend.name + ": " + what);
    }
  }
}

// ---- the checks by name, and the run over a backend ------------------------------------------------

template <typename T>
void run_check(Check check, Suite<T>& s) {
  switch (check) {
    case Check::gemm:
      check_gemm(s, harness_gemm_cases(s.large(), s.full()));
      check_gemm_epilogue(s, epilogue_cases(harness_epilogue_shapes(s.large(), s.full())));
      return;
    case Check::bias_act: return check_bias_act_backward(s);
    case Check::fill_unary: return check_fill_unary(s);
    case Check::binary: return check_binary(s);
    case Check::dropout: return check_dropout(s);
    case Check::gate_mix: return check_gate_mix(s);
    case Check::selective_scan: return check_selective_scan(s);
    case Check::adam: return check_adam(s);
    case Check::reduce: return check_reduce(s);
    case Check::softmax: return check_softmax(s);
    case Check::cross_entropy: return check_cross_entropy(s);
    case Check::layer_norm: return check_layer_norm(s);
    case Check::residual_layer_norm: return check_residual_layer_norm(s);
    case Check::embedding: return check_embedding(s);
    case Check::attention: return check_attention(s);
    case Check::attention_decode: return check_attention_decode(s);
    case Check::plucker: return check_plucker(s);
    case Check::memory: return check_memory(s);
    case Check::tree_sum: return check_tree_sum(s);
  }
  FAIL("a check of the case list that the harness does not know: " << int(check));
}

template <typename T>
bool has_case_kernel(const Backend<T>& b, KernelId id) {
  return is_memory_kernel(id) ? has_kernel(*b.memory, id) : has_kernel(*b.table, id);
}

}  // namespace

template <typename T>
void run_backend_harness(const Backend<T>& backend) {
  Suite<T> s{backend};
  const std::size_t in_use = backend.alloc->bytes_in_use();
  std::vector<Check> done;
  for (const KernelCase& c : kernel_cases) {
    if (is_memory_kernel(c.kernel) && backend.memory == nullptr) continue;
    // every kernel of the list is in the table: a missing one would be called through null
    REQUIRE_MESSAGE(has_case_kernel(backend, c.kernel), backend.name << " has no " << kernel_name(c.kernel));
    if (std::find(done.begin(), done.end(), c.check) != done.end()) continue;
    done.push_back(c.check);
    INFO(backend.name << ", the check of " << kernel_name(c.kernel));
    run_check(c.check, s);
  }
  CHECK_MESSAGE(backend.alloc->bytes_in_use() == in_use, backend.name << ": the harness did not free all it allocated");
}
template void run_backend_harness(const Backend<float>&);
template void run_backend_harness(const Backend<double>&);

template <typename T>
void run_kernel_checks(const Backend<T>& backend, const std::vector<KernelId>& kernels) {
  Suite<T> s{backend};
  const std::size_t in_use = backend.alloc->bytes_in_use();
  std::vector<Check> done;
  for (const KernelCase& c : kernel_cases) {
    if (std::find(kernels.begin(), kernels.end(), c.kernel) == kernels.end()) continue;
    REQUIRE_MESSAGE(has_case_kernel(backend, c.kernel), backend.name << " has no " << kernel_name(c.kernel));
    if (std::find(done.begin(), done.end(), c.check) != done.end()) continue;
    done.push_back(c.check);
    INFO(backend.name << ", the check of " << kernel_name(c.kernel));
    run_check(c.check, s);
  }
  CHECK_MESSAGE(done.size() > 0, backend.name << ": none of the kernels asked for has a check");
  CHECK_MESSAGE(backend.alloc->bytes_in_use() == in_use, backend.name << ": the checks did not free all they allocated");
}
template void run_kernel_checks(const Backend<float>&, const std::vector<KernelId>&);
template void run_kernel_checks(const Backend<double>&, const std::vector<KernelId>&);

template <typename T>
void run_gemm_checks(const Backend<T>& backend, const std::vector<GemmShape>& shapes, Precision precision) {
  Suite<T> s{backend};
  if (shapes.empty() && precision == Precision::F32) {
    run_check(Check::gemm, s);
    return;
  }
  if (shapes.empty()) {  // the harness's own shapes, in the given precision
    check_gemm(s, harness_gemm_cases(s.large(), s.full()), precision);
    check_gemm_epilogue(s, epilogue_cases(harness_epilogue_shapes(s.large(), s.full())), precision);
    return;
  }
  check_gemm(s, gemm_cases(shapes, false), precision);
  EpilogueShapes split;
  for (const GemmShape& sh : shapes) (sh.m * sh.n * sh.k <= (i64(1) << 20) ? split.every : split.linear).push_back(sh);
  check_gemm_epilogue(s, epilogue_cases(split), precision);
}
template void run_gemm_checks(const Backend<float>&, const std::vector<GemmShape>&, Precision);
template void run_gemm_checks(const Backend<double>&, const std::vector<GemmShape>&, Precision);

}  // namespace wedge::kernels::harness

namespace wedge::kernels::harness {

TEST_CASE("backend harness: every kernel of engine/kernels.def has a case, a check and a tolerance") {
  // one case per kernel, in the list's order: a kernel added to the .def without one fails
  CHECK_MESSAGE(kernel_case_count == kernel_count,
                "backend_cases.h lists " << kernel_case_count << " cases for " << kernel_count << " kernels");
  for (int i = 0; i < kernel_count; ++i) {
    const KernelId id = KernelId(i);
    INFO("kernel " << kernel_name(id));
    REQUIRE_MESSAGE(i < kernel_case_count, "no harness case for " << kernel_name(id));
    const KernelCase& c = kernel_cases[i];
    CHECK_MESSAGE(c.kernel == id, "case " << i << " is " << kernel_name(c.kernel) << ", not " << kernel_name(id));
    CHECK(bool(c.prepare != nullptr));  // (bool: doctest cannot print function pointers)
    CHECK(c.shape != nullptr);
    bool tolerance = false;
    for (const Tolerance& t : kTolerances) tolerance = tolerance || t.kernel == id;
    CHECK_MESSAGE(tolerance, "no tolerance written for " << kernel_name(id));
  }
  for (const Tolerance& t : kTolerances) {
    CHECK_MESSAGE(std::strlen(t.why) > 0, kernel_name(t.kernel) << ": a tolerance without its reason");
  }
}

TEST_CASE("backend harness: the reference in double agrees with the reference in float on every kernel") {
  HostMemory host;
  // No memory kernels of its own: the memory table is the one the float reference uses.
  run_backend_harness(
      Backend<double>{"reference f64", Family::reference, &ref_table_f64(), nullptr, &host, Sizes::reduced});
}

TEST_CASE("backend harness: CPU kernels match the reference kernels on awkward shapes") {
  if (!cpu::has_avx512()) {
    MESSAGE("this CPU has no AVX-512: the CPU table is the reference except its GEMM and, with AVX2, the entries "
            "engine/kernels.def marks avx512_avx2 ("
            << std::string(cpu_backend_name()) << ")");
  }
  HostMemory host;
  run_backend_harness(cpu_backend(host));
}

TEST_CASE("backend harness: the CPU's float64 GEMM (OpenBLAS dgemm) matches the reference") {
  HostMemory host;
  run_gemm_checks(Backend<double>{"CPU f64", Family::cpu, &cpu_table_f64(), nullptr, &host, Sizes::reduced});
}

TEST_CASE("backend harness: CUDA kernels match the reference kernels on awkward shapes") {
  const auto* table = kernel_table<float>(1);
  const auto* memory = memory_table(1);
  if (table == nullptr || memory == nullptr) {
    MESSAGE("no CUDA device: CUDA parity tests skipped");
    return;
  }
  // there is no double table on the GPU; every entry of the float one is checked by the run
  CHECK(kernel_table<double>(1) == nullptr);
  run_backend_harness(Backend<float>{"CUDA", Family::cuda, table, memory, &allocator_for(Device::cuda()), Sizes::full});
}

}  // namespace wedge::kernels::harness
