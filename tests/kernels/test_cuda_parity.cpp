// Every entry of the CUDA kernel table against the reference kernels (kernels/ref), on
// awkward shapes: size 1, odd sizes (7, 33), tails past every tile size, rows of 1000+
// and vocabulary rows of 30,522. Also: deterministic kernels give the same bits when run
// twice, outputs are written (never read) where the contract says so — they start as
// NaN — and dropout masks equal the CPU's bit for bit.
//
// This file uses only engine/kernel_table.h, kernels/tables.h and engine/allocator.h: it compiles in every
// build. Without a CUDA device the CUDA table is null and the test says it was skipped.
// The same suite also runs on the host emulation of the CUDA kernels
// (test_cuda_emulated.cpp), which is how it is exercised on machines without a GPU.
//
// Tolerances (absolute + relative to the reference value), and why:
//   exact (0)   fill, copies, casts, embedding forward AND backward (the CUDA backward
//               adds in the reference's order), dropout (same mask, same double scaling),
//               add/sub/mul/div/max/min and neg/relu/abs/+c/*c (one correctly rounded
//               float operation on both sides), reduce max and its index
//   1e-6 + 1e-5 transcendental unary maps and their derivatives (CUDA's expf, erff, powf
//               ... are within 2 ulp; the reference rounds a double result once)
//   1e-6 .. 2e-6 the gated fusion (relative; see check_gate_mix for the error budget)
//   k * 1e-6    gemm (float accumulation over k terms of size <= 1); with the epilogue,
//               + 2e-6 for the bias's rounding, and x 1.2 (+ 1e-6) after the GELU
//               (|gelu'| <= 1.13, erff within 2 ulp)
//   n * 1e-6    sums over n terms in float (reduce sum, sum of squares, layer-norm
//               parameter gradients over rows, the epilogue's bias gradient over rows)
//   1e-5 + 1e-4 softmax/log-softmax backward, layer-norm backward, attention backward,
//               Plücker backward: differences of nearly equal sums
//   see each check for the rest; every tolerance is written next to its check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/device.h"
#include "kernels/tables.h"

namespace wedge::kernels::cuda_parity {

using std::int32_t;

// ---- device buffers ------------------------------------------------------------------

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(Allocator& alloc, const std::vector<T>& host) : alloc_(alloc), count_(host.size()) {
    ptr_ = static_cast<T*>(alloc_.allocate(bytes()));
    if (!host.empty()) alloc_.copy_from_host(ptr_, host.data(), host.size() * sizeof(T));
  }
  ~DeviceBuffer() { alloc_.deallocate(ptr_, bytes()); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) alloc_.copy_to_host(host.data(), ptr_, count_ * sizeof(T));
    return host;
  }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == count_);
    if (count_ > 0) alloc_.copy_from_host(ptr_, host.data(), count_ * sizeof(T));
  }

 private:
  std::size_t bytes() const { return std::max<std::size_t>(count_, 1) * sizeof(T); }
  Allocator& alloc_;
  std::size_t count_;
  T* ptr_ = nullptr;
};

// ---- inputs and comparisons --------------------------------------------------------------

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<int32_t> random_ints(std::size_t n, std::uint64_t seed, int32_t lo, int32_t hi) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// Outputs start as NaN: a kernel that reads an output it should only write, or leaves an
// element unwritten, shows up as NaN in the comparison.
std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

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

// |actual - expected| <= atol + rtol |expected| everywhere (NaN only where expected is NaN,
// infinities must match); reports the worst element.
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

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  REQUIRE(a.size() == b.size());
  const bool same = a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
  CHECK_MESSAGE(same, what << ": two runs differ (the kernel is not deterministic)");
}

struct Suite {
  const KernelTable<float>& dev;
  const MemoryTable& mem;
  Allocator& alloc;
  bool full_size;  // false in the host emulation: the largest shapes are cut down
  const KernelTable<float>& ref = ref_table_f32();
  const MemoryTable& ref_mem = ref_memory_table();

  template <typename T>
  DeviceBuffer<T> put(const std::vector<T>& host) { return DeviceBuffer<T>(alloc, host); }
};

// Runs `device_outputs` twice and checks the two results are the same bits; returns the
// first. Every CUDA kernel of the table is meant to be deterministic.
std::vector<std::vector<float>> run_twice(const std::function<std::vector<std::vector<float>>()>& device_outputs,
                                          const std::string& what) {
  auto first = device_outputs();
  auto second = device_outputs();
  REQUIRE(first.size() == second.size());
  for (std::size_t i = 0; i < first.size(); ++i) expect_same_bits(first[i], second[i], what);
  return first;
}

// ---- gemm ----------------------------------------------------------------------------------

struct GemmShape {
  i64 m, n, k;
};

// A GEMM's sizes and row-major layout: leading dimensions padded by `pad`, one whole
// matrix per batch entry (a caller that broadcasts an operand sets its stride to 0).
struct GemmLayout {
  GemmArgs<float> args;
  i64 a_size, b_size, c_size;  // elements of one matrix of A, B, C
};

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

// `g` with its operand pointers (host or device memory) filled in.
GemmArgs<float> bound(GemmArgs<float> g, const float* a, const float* b, float* c, const float* bias = nullptr,
                      float* aux = nullptr) {
  g.a = a;
  g.b = b;
  g.c = c;
  g.bias = bias;
  g.aux = aux;
  return g;
}

void check_gemm(Suite& s) {
  using Shape = GemmShape;
  std::vector<Shape> shapes = {{1, 1, 1}, {7, 33, 5}, {33, 7, 64}, {1, 70, 33}, {65, 1, 17}, {64, 1000, 33}, {3, 4, 0}};
  if (s.full_size) shapes.push_back({257, 300, 1029});
  std::uint64_t seed = 100;
  for (const Shape& sh : shapes) {
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        for (int variant = 0; variant < 3; ++variant) {
          // variant 0: single matrix, beta 0, padded leading dimensions
          // variant 1: batch 3, alpha 0.7, beta 0.5
          // variant 2: batch 2 with A broadcast (stride 0), beta 0
          const GemmLayout layout =
              gemm_layout(ta, tb, sh, variant == 0 ? 1 : (variant == 1 ? 3 : 2), variant == 0 ? 3 : 0);
          GemmArgs<float> g = layout.args;
          g.alpha = variant == 1 ? 0.7f : 1.0f;
          g.beta = variant == 1 ? 0.5f : 0.0f;
          const i64 a_size = layout.a_size, b_size = layout.b_size, c_size = layout.c_size;
          if (variant == 2) g.stride_a = 0;
          const i64 a_count = variant == 2 ? a_size : a_size * g.batch;
          auto A = random_floats(std::size_t(std::max<i64>(a_count, 1)), seed++);
          auto B = random_floats(std::size_t(std::max<i64>(b_size * g.batch, 1)), seed++);
          auto C = g.beta == 0.0f ? nans(std::size_t(c_size * g.batch)) : random_floats(std::size_t(c_size * g.batch), seed++);
          const std::string what = "gemm m,n,k=" + shape_str({sh.m, sh.n, sh.k}) + " ta=" +
                                   std::to_string(int(ta)) + " tb=" + std::to_string(int(tb)) + " variant " +
                                   std::to_string(variant);
          auto expected = C;
          // Padding columns of C are not part of the product: the reference leaves them
          // alone, and so must the device.
          s.ref.gemm(bound(g, A.data(), B.data(), expected.data()));
          auto got = run_twice(
              [&] {
                auto dA = s.put(A), dB = s.put(B), dC = s.put(C);
                s.dev.gemm(bound(g, dA.get(), dB.get(), dC.get()));
                return std::vector<std::vector<float>>{dC.download()};
              },
              what);
          expect_close(got[0], expected, 1e-6 * double(sh.k) + 1e-6, 1e-5, what);
        }
      }
    }
  }
}

// The GEMM epilogue: bias (one value per column, shared by every row and every matrix of
// the batch) and the exact GELU with h kept in aux. C and aux start as NaN (beta == 0) so
// an element not written, or C read where beta == 0 says it must not be, shows up; the
// padding columns of C and aux must stay as they were.
void check_gemm_epilogue(Suite& s) {
  using Shape = GemmShape;
  std::vector<Shape> shapes = {{1, 1, 1}, {7, 33, 5}, {33, 7, 64}, {1, 7, 33}, {33, 1, 7}, {7, 7, 0}, {65, 33, 1}};
  if (s.full_size) shapes.push_back({257, 300, 1029});
  enum class Epi { Bias, BiasGelu, Gelu };
  std::uint64_t seed = 150;
  for (const Shape& sh : shapes) {
    for (Trans ta : {Trans::N, Trans::T}) {
      for (Trans tb : {Trans::N, Trans::T}) {
        for (i64 batch : {i64(1), i64(3)}) {
          for (float beta : {0.0f, 1.0f}) {
            for (Epi epi : {Epi::Bias, Epi::BiasGelu, Epi::Gelu}) {
              // Padded leading dimensions on single matrices; batch 3 broadcasts B (stride
              // 0), as a linear layer's weight over a batch.
              const GemmLayout layout = gemm_layout(ta, tb, sh, batch, batch == 1 ? 3 : 0);
              GemmArgs<float> g = layout.args;
              g.alpha = batch == 1 ? 1.0f : 0.7f;
              g.beta = beta;
              g.act = epi == Epi::Bias ? Activation::None : Activation::Gelu;
              const i64 a_size = layout.a_size, b_size = layout.b_size, c_size = layout.c_size;
              if (batch != 1) g.stride_b = 0;
              const std::size_t c_count = std::size_t(c_size * batch);
              auto A = random_floats(std::size_t(std::max<i64>(a_size * batch, 1)), seed++);
              auto B = random_floats(std::size_t(std::max<i64>(b_size, 1)), seed++);
              auto C = beta == 0.0f ? nans(c_count) : random_floats(c_count, seed++);
              auto bias = random_floats(std::size_t(sh.n), seed++, -2.0f, 2.0f);
              const bool has_bias = epi != Epi::Gelu, gelu = epi != Epi::Bias;
              const std::string what = "gemm epilogue m,n,k=" + shape_str({sh.m, sh.n, sh.k}) + " ta=" +
                                       std::to_string(int(ta)) + " tb=" + std::to_string(int(tb)) + " batch " +
                                       std::to_string(batch) + " beta " + std::to_string(int(beta)) +
                                       (has_bias ? " bias" : "") + (gelu ? " gelu" : "");
              auto expected = C, aux_expected = nans(c_count);
              s.ref.gemm(bound(g, A.data(), B.data(), expected.data(), has_bias ? bias.data() : nullptr,
                               gelu ? aux_expected.data() : nullptr));
              auto got = run_twice(
                  [&] {
                    auto dA = s.put(A), dB = s.put(B), dC = s.put(C), dbias = s.put(bias);
                    auto daux = s.put(nans(c_count));
                    s.dev.gemm(bound(g, dA.get(), dB.get(), dC.get(), has_bias ? dbias.get() : nullptr,
                                     gelu ? daux.get() : nullptr));
                    return std::vector<std::vector<float>>{dC.download(), daux.download()};
                  },
                  what);
              // h: the gemm tolerance (float accumulation over k terms) plus the bias's
              // rounding. gelu(h): h's error times |gelu'| <= 1.13, plus erff's 2 ulp.
              const double h_atol = 1e-6 * double(sh.k) + 2e-6;
              if (gelu) {
                expect_close(got[1], aux_expected, h_atol, 1e-5, what + " aux");
                expect_close(got[0], expected, 1.2 * h_atol + 1e-6, 2e-5, what + " C");
              } else {
                expect_close(got[0], expected, h_atol, 1e-5, what + " C");
                expect_close(got[1], nans(c_count), 0, 0, what + " aux untouched");
              }
            }
          }
        }
      }
    }
  }
}

// The backward of the epilogue: gh = gy * gelu'(aux) (act Gelu), gbias = column sums of
// gh (or of gy when act is None, where gh must not be written).
void check_bias_act_backward(Suite& s) {
  struct Shape { i64 rows, n; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {33, 7}, {300, 70}, {1000, 67}, {0, 5}, {2000, 1}};
  if (s.full_size) shapes.push_back({4096, 256});  // a model's hidden layer: the split column sum
  std::uint64_t seed = 170;
  for (const Shape& sh : shapes) {
    const std::size_t size = std::size_t(sh.rows * sh.n), n = std::size_t(sh.n);
    auto aux = random_floats(size, seed++, -4.0f, 4.0f);
    auto gy = random_floats(size, seed++);
    for (Activation act : {Activation::None, Activation::Gelu}) {
      for (int variant = 0; variant < 3; ++variant) {
        // 0: gh separate, gbias wanted; 1: gh aliases gy (Gelu) or gh null (None), gbias
        // wanted; 2: no gbias
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
              float* dev_gh = alias ? (act == Activation::Gelu ? dgy.get() : nullptr) : dgh.get();
              s.dev.bias_act_backward(act, daux.get(), dgy.get(), sh.rows, sh.n, dev_gh,
                                      want_gbias ? dgbias.get() : nullptr);
              auto gh = alias && act == Activation::Gelu ? dgy.download() : dgh.download();
              return std::vector<std::vector<float>>{gh, dgbias.download(), dgy.download()};
            },
            what);
        if (act == Activation::Gelu) {
          // gy * gelu'(aux): CUDA's erff/expf (<= 2 ulp), as the unary GELU backward
          expect_close(got[0], gh_ref, 1e-6, 1e-5, what + " gh");
        } else {
          expect_close(got[0], nans(size), 0, 0, what + " gh not written");
          expect_close(got[2], gy, 0, 0, what + " gy untouched");
        }
        // a float sum of rows terms of size <= 1.13 (in a different, fixed order)
        if (want_gbias) {
          expect_close(got[1], gbias_ref, 1e-6 * double(sh.rows) + 1e-6, 1e-5, what + " gbias");
        } else {
          expect_close(got[1], nans(n), 0, 0, what + " gbias not written");
        }
      }
    }
  }
}

// ---- element-wise ----------------------------------------------------------------------------

void check_fill_unary(Suite& s) {
  std::vector<i64> sizes = {1, 7, 33, 1000, 70001};
  for (i64 n : sizes) {
    auto got = run_twice(
        [&] {
          auto y = s.put(nans(static_cast<std::size_t>(n)));
          s.dev.fill(y.get(), -2.5f, n);
          return std::vector<std::vector<float>>{y.download()};
        },
        "fill");
    expect_close(got[0], std::vector<float>(static_cast<std::size_t>(n), -2.5f), 0, 0, "fill n=" + std::to_string(n));
  }

  struct Case {
    UnaryOp op;
    float param;
    float lo, hi;
    bool exact;
    const char* name;
  };
  const Case cases[] = {
      {UnaryOp::Neg, 0, -3, 3, true, "neg"},          {UnaryOp::Exp, 0, -10, 10, false, "exp"},
      {UnaryOp::Log, 0, 0.01f, 50, false, "log"},     {UnaryOp::Sqrt, 0, 0.01f, 50, false, "sqrt"},
      {UnaryOp::Tanh, 0, -6, 6, false, "tanh"},       {UnaryOp::Sigmoid, 0, -20, 20, false, "sigmoid"},
      {UnaryOp::Relu, 0, -3, 3, true, "relu"},        {UnaryOp::Gelu, 0, -6, 6, false, "gelu"},
      {UnaryOp::AddScalar, 0.375f, -3, 3, true, "add_scalar"},
      {UnaryOp::MulScalar, -1.5f, -3, 3, true, "mul_scalar"},
      {UnaryOp::PowScalar, 2.5f, 0.01f, 4, false, "pow_scalar"},
      {UnaryOp::PowScalar, 0.0f, 0.0f, 4, false, "pow_scalar_0"},
      {UnaryOp::Abs, 0, -3, 3, true, "abs"},
  };
  std::uint64_t seed = 200;
  for (const Case& c : cases) {
    for (i64 n : {i64(1), i64(33), i64(1000), i64(70001)}) {
      auto x = random_floats(static_cast<std::size_t>(n), seed++, c.lo, c.hi);
      if (c.op == UnaryOp::Relu || c.op == UnaryOp::Abs) x[0] = 0.0f;  // the kink
      const std::string what = std::string("unary ") + c.name + " n=" + std::to_string(n);
      std::vector<float> y_ref(static_cast<std::size_t>(n));
      s.ref.unary(c.op, c.param, x.data(), y_ref.data(), n);
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dy = s.put(nans(static_cast<std::size_t>(n)));
            s.dev.unary(c.op, c.param, dx.get(), dy.get(), n);
            return std::vector<std::vector<float>>{dy.download()};
          },
          what);
      // exact: one correctly rounded operation; otherwise CUDA's math library (<= 2 ulp)
      expect_close(got[0], y_ref, c.exact ? 0.0 : 1e-6, c.exact ? 0.0 : 1e-5, what);

      // backward, overwriting and accumulating; derivatives built on y use the reference y
      auto gy = random_floats(static_cast<std::size_t>(n), seed++);
      auto gx0 = random_floats(static_cast<std::size_t>(n), seed++);
      for (bool accumulate : {false, true}) {
        auto expected = accumulate ? gx0 : nans(static_cast<std::size_t>(n));
        if (!accumulate) std::fill(expected.begin(), expected.end(), 0.0f);
        s.ref.unary_backward(c.op, c.param, x.data(), y_ref.data(), gy.data(), expected.data(), n, accumulate);
        auto gx = run_twice(
            [&] {
              auto dx = s.put(x), dy = s.put(y_ref), dgy = s.put(gy);
              auto dgx = s.put(accumulate ? gx0 : nans(static_cast<std::size_t>(n)));
              s.dev.unary_backward(c.op, c.param, dx.get(), dy.get(), dgy.get(), dgx.get(), n, accumulate);
              return std::vector<std::vector<float>>{dgx.download()};
            },
            what + " backward");
        // gy * f'(x) (+ gx) is up to two roundings on the device, one in the reference:
        // half an ulp of values below 2.5 for the exact ops
        expect_close(gx[0], expected, c.exact ? 3e-7 : 1e-6, c.exact ? 0.0 : 1e-5,
                     what + (accumulate ? " backward accumulate" : " backward"));
      }
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

void check_binary(Suite& s) {
  std::vector<Layout> layouts = {
      make_layout({1}, {1}, {1}),
      make_layout({33, 7}, {7, 1}, {7, 1}),                // same shape
      make_layout({33, 7}, {7, 1}, {0, 1}),                // b is a row, repeated down
      make_layout({33, 7}, {1, 0}, {7, 1}),                // a is a column, repeated across
      make_layout({5, 7, 3}, {1, 5, 35}, {21, 3, 1}),      // a read transposed
      make_layout({7, 1, 33}, {33, 33, 1}, {0, 0, 0}),     // b a scalar, a size-1 dimension
      make_layout({2, 3, 4, 5, 6}, {360, 120, 30, 6, 1}, {0, 5, 0, 1, 0}),
      make_layout({1000, 67}, {67, 1}, {0, 1}),            // 1000+ rows, bias-like
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
      // one correctly rounded operation (exact) except powf (<= 2 ulp)
      expect_close(got[0], expected, 0.0, pow ? 1e-5 : 0.0, what);
    }
  }
}

void check_dropout(Suite& s) {
  std::vector<i64> sizes = {1, 33, 1000, 100003};
  std::uint64_t seed = 400;
  for (i64 n : sizes) {
    for (float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
      const std::uint64_t key = 0x5eed0000ULL + seed, offset = (std::uint64_t(1) << 40) + 12345;
      auto x = random_floats(static_cast<std::size_t>(n), seed++, 0.5f, 2.0f);  // nonzero: zero in y means dropped
      std::vector<float> y_ref(static_cast<std::size_t>(n)), g_ref(static_cast<std::size_t>(n));
      s.ref.dropout_forward(x.data(), y_ref.data(), n, p, key, offset);
      s.ref.dropout_backward(x.data(), g_ref.data(), n, p, key, offset);
      const std::string what = "dropout n=" + std::to_string(n) + " p=" + std::to_string(p);
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dy = s.put(nans(static_cast<std::size_t>(n))), dg = s.put(nans(static_cast<std::size_t>(n)));
            s.dev.dropout_forward(dx.get(), dy.get(), n, p, key, offset);
            s.dev.dropout_backward(dx.get(), dg.get(), n, p, key, offset);
            return std::vector<std::vector<float>>{dy.download(), dg.download()};
          },
          what);
      // The same mask AND the same values as the CPU: bit for bit.
      expect_same_bits(got[0], y_ref, what + " forward vs CPU");
      expect_same_bits(got[1], g_ref, what + " backward vs CPU");
      if (n == 100003 && p == 0.5f) {
        const auto dropped = std::count(got[0].begin(), got[0].end(), 0.0f);
        CHECK(dropped > n * 45 / 100);
        CHECK(dropped < n * 55 / 100);
      }
    }
  }
}

// Gated fusion: s = sigmoid(a), out = s x + (1 - s) y, and its three gradients. The gate
// logits are mostly moderate but every third one is drawn from a list reaching far into
// the range where a naive sigmoid overflows (exp(100) is inf in float) or where s rounds
// to 0 or 1 and s (1 - s) underflows: no output may become NaN or infinite.
void check_gate_mix(Suite& s) {
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
    // The device works in float: s and 1 - s each carry expf's 2 ulp plus three roundings
    // (relative error <= 5.4e-7; 1 - s is formed as e / (1 + e), never as 1 - s), the
    // reference rounds a double result once. gx, gy: one more product, <= 6.6e-7
    // relative. ga: also x - y and two more products, <= 1.1e-6. out: s x + (1 - s) y may
    // cancel, so its error is relative to |s x| + |(1 - s) y| <= 2, not to out: 1.3e-6
    // absolute. atol 1e-15 on the gradients: the reference forms 1 - s by subtraction in
    // double (absolute error <= 1.1e-16, so no relative accuracy once s rounds near 1, a >
    // 23), times |gout (x - y)| <= 4; it also covers float's denormals (below 1.2e-38).
    expect_close(got[0], out_ref, 2e-6, 1e-6, what + " out");
    expect_close(got[1], ga_ref, 1e-15, 2e-6, what + " ga");
    expect_close(got[2], gx_ref, 1e-15, 1e-6, what + " gx");
    expect_close(got[3], gy_ref, 1e-15, 1e-6, what + " gy");
  }
}

// One update of several tensors at once. The segment lists cross the CUDA side's chunk of
// 32 segments, include empty tensors, and scale the gradients (clipping folded in).
void check_adam(Suite& s) {
  std::vector<std::vector<i64>> lists = {{1}, {1, 17, 1000}, {17, 0, 1, 1000, 33}, {70001, 1}};
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
        std::vector<std::vector<float>> p(count), g(count), m(count), v(count);
        std::vector<std::vector<float>> p_ref(count), m_ref(count), v_ref(count);
        std::vector<AdamSegment<float>> ref_segments(count);
        i64 total = 0;
        for (std::size_t t = 0; t < count; ++t) {
          const std::size_t n = std::size_t(sizes[t]);
          p[t] = random_floats(n, seed++);
          g[t] = random_floats(n, seed++, -3.0f, 3.0f);
          m[t] = random_floats(n, seed++, -0.1f, 0.1f);
          v[t] = random_floats(n, seed++, 0.0f, 0.01f);
          p_ref[t] = p[t];
          m_ref[t] = m[t];
          v_ref[t] = v[t];
          ref_segments[t] = {p_ref[t].data(), g[t].data(), m_ref[t].data(), v_ref[t].data(), sizes[t]};
          total += sizes[t];
        }
        s.ref.adam_update(hp, ref_segments.data(), i64(count));
        const std::string what = "adam " + std::to_string(count) + " tensors, " + std::to_string(total) +
                                 " elements" + (decoupled ? " adamw" : " adam-l2") + " grad_scale " +
                                 std::to_string(grad_scale);
        auto got = run_twice(
            [&] {
              std::vector<std::unique_ptr<DeviceBuffer<float>>> buffers;
              std::vector<AdamSegment<float>> segments(count);
              for (std::size_t t = 0; t < count; ++t) {
                for (const auto* host : {&p[t], &g[t], &m[t], &v[t]}) {
                  buffers.push_back(std::make_unique<DeviceBuffer<float>>(s.alloc, *host));
                }
                segments[t] = {buffers[4 * t]->get(), buffers[4 * t + 1]->get(), buffers[4 * t + 2]->get(),
                               buffers[4 * t + 3]->get(), sizes[t]};
              }
              s.dev.adam_update(hp, segments.data(), i64(count));
              // every tensor's param, m, v, concatenated
              std::vector<std::vector<float>> out(3);
              for (std::size_t t = 0; t < count; ++t) {
                for (int k = 0; k < 3; ++k) {
                  auto host = buffers[4 * t + std::size_t(k == 0 ? 0 : k + 1)]->download();
                  out[std::size_t(k)].insert(out[std::size_t(k)].end(), host.begin(), host.end());
                }
              }
              return out;
            },
            what);
        std::vector<std::vector<float>> expected(3);
        for (std::size_t t = 0; t < count; ++t) {
          expected[0].insert(expected[0].end(), p_ref[t].begin(), p_ref[t].end());
          expected[1].insert(expected[1].end(), m_ref[t].begin(), m_ref[t].end());
          expected[2].insert(expected[2].end(), v_ref[t].begin(), v_ref[t].end());
        }
        // double arithmetic on both sides; only sqrt/division implementations may differ
        expect_close(got[0], expected[0], 1e-7, 1e-6, what + " param");
        expect_close(got[1], expected[1], 1e-9, 1e-6, what + " m");
        expect_close(got[2], expected[2], 1e-12, 1e-6, what + " v");
      }
    }
  }
}

// ---- reductions ------------------------------------------------------------------------------

void check_reduce(Suite& s) {
  struct Shape { i64 outer, n, inner; };
  std::vector<Shape> shapes = {{1, 1, 1}, {7, 33, 1},  {3, 1000, 1}, {2, 33, 7},  {5, 7, 33},
                               {1, 300, 70}, {2, 0, 3}, {1, 20000, 1}, {1, 4096, 33}};
  if (s.full_size) {
    shapes.push_back({1, 1000003, 1});  // rows path split in many chunks
    shapes.push_back({1, 4096, 256});   // a bias gradient: column path split
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
            DeviceBuffer<int32_t> didx(s.alloc, std::vector<int32_t>(out, -7));
            s.dev.reduce(op, dx.get(), dy.get(), op == ReduceOp::Max ? didx.get() : nullptr, sh.outer, sh.n,
                         sh.inner);
            idx_got = didx.download();
            return std::vector<std::vector<float>>{dy.download()};
          },
          what);
      if (op == ReduceOp::Sum) {
        expect_close(got[0], y_ref, 1e-6 * double(sh.n) + 1e-6, 1e-5, what);
      } else {
        expect_close(got[0], y_ref, 0, 0, what);
        expect_close(idx_got, idx_ref, 0, 0, what + " index");
      }
    }
  }

  std::vector<i64> sizes = {1, 7, 1000, 20000};
  if (s.full_size) sizes.push_back(3000017);
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
      expect_close(got[0], std::vector<float>{expected}, 1e-6, 1e-5, what);
    }
  }
}

// ---- softmax and cross-entropy -------------------------------------------------------------------

void check_softmax(Suite& s) {
  struct Shape { i64 rows, n; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {3, 1000}, {2, 30522}, {70, 128}};
  std::uint64_t seed = 700;
  for (const Shape& sh : shapes) {
    const std::size_t size = std::size_t(sh.rows * sh.n);
    for (bool log : {false, true}) {
      auto x = random_floats(size, seed++, -8.0f, 8.0f);
      if (size > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked entry
      std::vector<float> y_ref(size);
      s.ref.softmax_forward(x.data(), y_ref.data(), sh.rows, sh.n, log);
      const std::string what = std::string(log ? "log_softmax " : "softmax ") + shape_str({sh.rows, sh.n});
      auto got = run_twice(
          [&] {
            auto dx = s.put(x), dy = s.put(nans(size));
            s.dev.softmax_forward(dx.get(), dy.get(), sh.rows, sh.n, log);
            return std::vector<std::vector<float>>{dy.download()};
          },
          what);
      // log-softmax values reach ~ -20: a few ulp of that is ~1e-5
      expect_close(got[0], y_ref, log ? 1e-5 : 1e-7, 1e-5, what);

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
      // differences of a row sum: absolute error grows with the row's sum of |gy|
      expect_close(gx[0], gx_ref, log ? 1e-6 * double(sh.n) : 1e-6, 1e-4, what + " backward");
    }
  }
}

void check_cross_entropy(Suite& s) {
  struct Shape { i64 rows, V; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {5, 1000}, {3, 30522}};
  if (s.full_size) shapes.push_back({64, 30522});
  const int32_t ignore = -100;
  std::uint64_t seed = 800;
  for (const Shape& sh : shapes) {
    for (int variant = 0; variant < 2; ++variant) {  // 1: every row ignored
      const std::size_t size = std::size_t(sh.rows * sh.V);
      auto logits = random_floats(size, seed++, -6.0f, 6.0f);
      auto targets = random_ints(std::size_t(sh.rows), seed++, 0, int32_t(sh.V - 1));
      for (i64 r = 0; r < sh.rows; ++r) {
        if (variant == 1 || (sh.rows > 2 && r % 3 == 1)) targets[std::size_t(r)] = ignore;
      }
      std::vector<float> lse_ref(std::size_t(sh.rows));
      float loss_ref = 0, count_ref = 0;
      s.ref.cross_entropy_forward(logits.data(), targets.data(), sh.rows, sh.V, ignore, lse_ref.data(), &loss_ref,
                                  &count_ref);
      const float gloss = 1.3f;
      std::vector<float> g_ref(size);
      s.ref.cross_entropy_backward(logits.data(), targets.data(), lse_ref.data(), &count_ref, &gloss, sh.rows, sh.V,
                                   ignore, g_ref.data());
      const std::string what = "cross_entropy " + shape_str({sh.rows, sh.V}) + (variant ? " all ignored" : "");
      auto got = run_twice(
          [&] {
            auto dlogits = s.put(logits);
            DeviceBuffer<int32_t> dtargets(s.alloc, targets);
            auto dlse = s.put(nans(std::size_t(sh.rows))), dloss = s.put(nans(1)), dcount = s.put(nans(1));
            s.dev.cross_entropy_forward(dlogits.get(), dtargets.get(), sh.rows, sh.V, ignore, dlse.get(), dloss.get(),
                                        dcount.get());
            auto dgloss = s.put(std::vector<float>{gloss}), dg = s.put(nans(size));
            s.dev.cross_entropy_backward(dlogits.get(), dtargets.get(), dlse.get(), dcount.get(), dgloss.get(),
                                         sh.rows, sh.V, ignore, dg.get());
            return std::vector<std::vector<float>>{dlse.download(), dloss.download(), dcount.download(), dg.download()};
          },
          what);
      expect_close(got[0], lse_ref, 2e-6, 1e-6, what + " lse");
      expect_close(got[1], std::vector<float>{loss_ref}, 1e-6, 1e-5, what + " loss");
      expect_close(got[2], std::vector<float>{count_ref}, 0, 0, what + " count");
      // prob = exp(x - lse) carries lse's rounding (~1e-6 relative); scale = gloss/count
      const double scale = count_ref > 0 ? gloss / count_ref : 0.0;
      expect_close(got[3], g_ref, 1e-7 * scale, 1e-5, what + " backward");
    }
  }
}

// ---- layer norm -----------------------------------------------------------------------------------

void check_layer_norm(Suite& s) {
  struct Shape { i64 rows, D; };
  std::vector<Shape> shapes = {{1, 1}, {7, 33}, {5, 256}, {300, 33}, {3, 1000}};
  if (s.full_size) shapes.push_back({4096, 256});
  std::uint64_t seed = 900;
  for (const Shape& sh : shapes) {
    for (bool affine : {true, false}) {
      const std::size_t size = std::size_t(sh.rows * sh.D), rows = std::size_t(sh.rows), D = std::size_t(sh.D);
      auto x = random_floats(size, seed++, -3.0f, 5.0f);
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
                                     sh.rows, sh.D, eps, dy.get(), dmean.get(), drstd.get());
            // backward from the reference statistics, so it is judged on its own
            auto dmean_ref = s.put(mean_ref), drstd_ref = s.put(rstd_ref), dgy = s.put(gy);
            auto dgx = s.put(nans(size)), dgg = s.put(nans(D)), dgb = s.put(nans(D));
            s.dev.layer_norm_backward(dx.get(), affine ? dgamma.get() : nullptr, dmean_ref.get(), drstd_ref.get(),
                                      dgy.get(), sh.rows, sh.D, dgx.get(), dgg.get(), dgb.get());
            return std::vector<std::vector<float>>{dy.download(),  dmean.download(), drstd.download(),
                                                   dgx.download(), dgg.download(),   dgb.download()};
          },
          what);
      expect_close(got[0], y_ref, 1e-5, 1e-5, what + " y");
      expect_close(got[1], mean_ref, 1e-6, 1e-6, what + " mean");
      expect_close(got[2], rstd_ref, 0, 1e-5, what + " rstd");
      expect_close(got[3], gx_ref, 1e-5, 1e-4, what + " gx");
      expect_close(got[4], gg_ref, 1e-6 * double(sh.rows) + 1e-6, 1e-5, what + " ggamma");
      expect_close(got[5], gb_ref, 1e-6 * double(sh.rows) + 1e-6, 1e-5, what + " gbeta");
    }
  }
}

// ---- embedding --------------------------------------------------------------------------------------

void check_embedding(Suite& s) {
  struct Shape { i64 V, D, n; int id_range; };  // ids drawn from [0, id_range): repeats guaranteed
  std::vector<Shape> shapes = {{1, 1, 1, 1}, {7, 33, 7, 3}, {50, 256, 1000, 50}, {1000, 1, 33, 1000}, {5, 7, 300, 1}};
  shapes.push_back({s.full_size ? 30522 : 3000, 33, 1000, 200});
  if (s.full_size) shapes.push_back({30522, 256, 4096, 30522});
  std::uint64_t seed = 1000;
  for (const Shape& sh : shapes) {
    const std::size_t table_size = std::size_t(sh.V * sh.D), out_size = std::size_t(sh.n * sh.D);
    auto table = random_floats(table_size, seed++);
    auto ids = random_ints(std::size_t(sh.n), seed++, 0, sh.id_range - 1);
    if (sh.n > 2) ids.back() = int32_t(sh.V - 1);  // the last vocabulary row is used
    std::vector<float> out_ref(out_size);
    s.ref.embedding_forward(table.data(), ids.data(), sh.n, sh.V, sh.D, out_ref.data());
    auto gout = random_floats(out_size, seed++);
    std::vector<float> gtable_ref(table_size);
    s.ref.embedding_backward(ids.data(), gout.data(), sh.n, sh.V, sh.D, gtable_ref.data());
    const std::string what = "embedding V,D,n=" + shape_str({sh.V, sh.D, sh.n});
    auto got = run_twice(
        [&] {
          auto dtable = s.put(table), dgout = s.put(gout);
          DeviceBuffer<int32_t> dids(s.alloc, ids);
          auto dout = s.put(nans(out_size)), dgtable = s.put(nans(table_size));
          s.dev.embedding_forward(dtable.get(), dids.get(), sh.n, sh.V, sh.D, dout.get());
          s.dev.embedding_backward(dids.get(), dgout.get(), sh.n, sh.V, sh.D, dgtable.get());
          return std::vector<std::vector<float>>{dout.download(), dgtable.download()};
        },
        what);
    expect_same_bits(got[0], out_ref, what + " forward");
    // summed in increasing position, like the reference: the same bits
    expect_same_bits(got[1], gtable_ref, what + " backward");
  }
}

// ---- attention --------------------------------------------------------------------------------------

void check_attention(Suite& s) {
  struct Shape { i64 BH, L, dh; };
  std::vector<Shape> shapes = {{1, 1, 1}, {2, 7, 16}, {3, 33, 64}, {1, 70, 33}, {2, 40, 128}, {1, 65, 7}};
  if (s.full_size) {
    shapes.push_back({128, 128, 64});  // the paper model: batch 32 x 4 heads, block 128
    shapes.push_back({1, 1029, 64});
  }
  std::uint64_t seed = 1100;
  for (const Shape& sh : shapes) {
    for (bool causal : {true, false}) {
      const std::size_t size = std::size_t(sh.BH * sh.L * sh.dh), rows = std::size_t(sh.BH * sh.L);
      auto q = random_floats(size, seed++), k = random_floats(size, seed++), v = random_floats(size, seed++);
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
            s.dev.attention_forward(dq.get(), dk.get(), dv.get(), sh.BH, sh.L, sh.dh, scale, causal, dout.get(),
                                    dlse.get());
            // backward from the reference forward, so it is judged on its own
            auto dout_ref = s.put(out_ref), dlse_ref = s.put(lse_ref), dgout = s.put(gout);
            auto dgq = s.put(nans(size)), dgk = s.put(nans(size)), dgv = s.put(nans(size));
            s.dev.attention_backward(dq.get(), dk.get(), dv.get(), dout_ref.get(), dlse_ref.get(), dgout.get(), sh.BH,
                                     sh.L, sh.dh, scale, causal, dgq.get(), dgk.get(), dgv.get());
            return std::vector<std::vector<float>>{dout.download(), dlse.download(), dgq.download(), dgk.download(),
                                                   dgv.download()};
          },
          what);
      expect_close(got[0], out_ref, 1e-5, 1e-4, what + " out");
      expect_close(got[1], lse_ref, 1e-5, 1e-5, what + " lse");
      // The reference accumulates each gradient term in float too (into the output);
      // both sides sum up to L terms of size ~1/L.
      expect_close(got[2], gq_ref, 2e-5, 1e-3, what + " gq");
      expect_close(got[3], gk_ref, 2e-5, 1e-3, what + " gk");
      expect_close(got[4], gv_ref, 2e-5, 1e-3, what + " gv");
    }
  }
}

// ---- Plücker pairing ---------------------------------------------------------------------------------

void check_plucker(Suite& s) {
  struct Shape { i64 B, L, r; std::vector<int32_t> offsets; };
  std::vector<Shape> shapes = {{1, 1, 1, {1}},
                               {2, 7, 4, {1, 2}},
                               {2, 33, 32, {1, 2, 4, 8, 12, 16}},
                               {1, 20, 5, {1, 3, 25}},  // an offset longer than the sequence
                               {3, 9, 7, {2}}};
  if (s.full_size) shapes.push_back({32, 128, 32, {1, 2, 4, 8, 12, 16}});
  std::uint64_t seed = 1200;
  for (const Shape& sh : shapes) {
    const i64 m = i64(sh.offsets.size()), P = sh.r * (sh.r - 1) / 2;
    const std::size_t zs = std::size_t(sh.B * sh.L * sh.r), ns = std::size_t(sh.B * sh.L * m);
    const std::size_t outs = std::size_t(sh.B * sh.L * m * P), means = std::size_t(sh.B * sh.L * P);
    auto z = random_floats(zs, seed++);
    // Rows 1 and 2 parallel (p = 0, the norm clamps to eps) where the sequence allows.
    if (sh.L >= 3) {
      for (i64 c = 0; c < sh.r; ++c) z[std::size_t(2 * sh.r + c)] = 2.0f * z[std::size_t(sh.r + c)];
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
          s.dev.plucker_forward(dz.get(), sh.B, sh.L, sh.r, off, m, eps, dout.get(), dnorms.get());
          s.dev.plucker_mean_forward(dz.get(), sh.B, sh.L, sh.r, off, m, eps, dmean.get(), dmean_norms.get());
          // backward from the reference forward, so it is judged on its own
          auto dout_ref = s.put(out_ref), dnorms_ref = s.put(norms_ref), dgout = s.put(gout), dgmean = s.put(gmean);
          auto dgz = s.put(nans(zs)), dgz_mean = s.put(nans(zs));
          s.dev.plucker_backward(dz.get(), sh.B, sh.L, sh.r, off, m, eps, dout_ref.get(), dnorms_ref.get(),
                                 dgout.get(), dgz.get());
          s.dev.plucker_mean_backward(dz.get(), sh.B, sh.L, sh.r, off, m, eps, dnorms_ref.get(), dgmean.get(),
                                      dgz_mean.get());
          return std::vector<std::vector<float>>{dout.download(),        dnorms.download(), dmean.download(),
                                                 dmean_norms.download(), dgz.download(),    dgz_mean.download()};
        },
        what);
    expect_close(got[0], out_ref, 1e-6, 1e-5, what + " out");
    expect_close(got[1], norms_ref, 1e-7, 1e-5, what + " norms");
    expect_close(got[2], mean_ref, 1e-6, 1e-5, what + " mean");
    expect_close(got[3], mean_norms_ref, 1e-7, 1e-5, what + " mean norms");
    // dp = (g - phat (phat.g)) / ||p||, then sums over r-1 coordinates and up to 2m pairs;
    // the clamped rows divide by eps = 1e-6, which magnifies rounding a millionfold, so
    // the absolute tolerance is relative to the largest reference value.
    auto max_abs = [](const std::vector<float>& v) {
      double m = 0;
      for (float x : v) m = std::max(m, double(std::fabs(x)));
      return m;
    };
    expect_close(got[4], gz_ref, 1e-5 * (1.0 + max_abs(gz_ref) * 1e-2), 1e-4, what + " backward");
    expect_close(got[5], gz_mean_ref, 1e-5 * (1.0 + max_abs(gz_mean_ref) * 1e-2), 1e-4, what + " mean backward");
  }
}

// ---- selective scan ---------------------------------------------------------------------------------

void check_selective_scan(Suite& s) {
  struct Shape { i64 batch, L, D, N, P; };
  std::vector<Shape> shapes = {
      {2, 37, 5, 3, 8},     // L not a multiple of P
      {1, 16, 1, 1, 1},     // P = 1, N = 1, D = 1
      {3, 7, 33, 16, 16},   // P > L (one short segment), two warps of channels
      {2, 19, 7, 5, 40},    // P > L and longer than the backward's 16-token chunks
      {2, 50, 70, 20, 24},  // three warps of channels, two chunks of states, 16 + 8 tokens
      {1, 1, 1, 1, 1},
  };
  if (s.full_size) {
    shapes.push_back({32, 128, 512, 16, 16});  // SheafStateLM-sized
    shapes.push_back({2, 1000, 64, 16, 1000});  // one long segment: 63 chunks of tokens
  }
  // Which optional inputs are present, and which gradients are asked for (null: skipped).
  struct Variant { bool h0, g_h_last, bias, skip, h_last, grads_a, grads_b; const char* name; };
  const Variant variants[] = {
      {true, true, true, true, true, true, true, "all inputs"},
      {false, false, false, false, false, true, true, "h0, g_h_last, delta_bias, Dskip, h_last null"},
      {true, false, true, false, true, true, false, "g_h_last, Dskip null; gB, gA_log, gdelta, gh0 skipped"},
      {false, true, false, true, true, false, true, "h0, delta_bias null; gC, gu, gDskip, gdelta_bias skipped"},
  };
  auto max_abs = [](const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, double(std::fabs(x)));
    return m;
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

      ScanArgs<float> ha;  // the arguments in host memory, for the reference
      ha.batch = sh.batch;
      ha.L = sh.L;
      ha.D = sh.D;
      ha.N = sh.N;
      ha.P = sh.P;
      ha.u = u.data();
      ha.delta = delta.data();
      ha.delta_bias = var.bias ? delta_bias.data() : nullptr;
      ha.A_log = A_log.data();
      ha.B = B.data();
      ha.C = C.data();
      ha.Dskip = var.skip ? Dskip.data() : nullptr;
      ha.h0 = var.h0 ? h0.data() : nullptr;
      const float* ghl = var.g_h_last ? g_h_last.data() : nullptr;
      // Gradient sizes; 0 where the variant does not ask for it.
      const std::size_t n_gu = var.grads_b ? tokens : 0, n_gdelta = var.grads_a ? tokens : 0,
                        n_gbias = var.grads_b ? D : 0, n_gA = var.grads_a ? params : 0,
                        n_gB = var.grads_a ? inputs : 0, n_gC = var.grads_b ? inputs : 0,
                        n_gskip = var.grads_b ? D : 0, n_gh0 = var.grads_a ? states : 0;
      auto grad_ptrs = [&](std::vector<float>& gu, std::vector<float>& gdelta, std::vector<float>& gbias,
                           std::vector<float>& gA, std::vector<float>& gB, std::vector<float>& gC,
                           std::vector<float>& gskip, std::vector<float>& gh0) {
        auto p = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
        return ScanGrads<float>{p(gu), p(gdelta), p(gbias), p(gA), p(gB), p(gC), p(gskip), p(gh0)};
      };

      std::vector<float> y_ref(tokens), h_last_ref(var.h_last ? states : 0);
      s.ref.selective_scan_forward(ha, y_ref.data(), var.h_last ? h_last_ref.data() : nullptr);
      std::vector<float> gu_ref(n_gu), gdelta_ref(n_gdelta), gbias_ref(n_gbias), gA_ref(n_gA), gB_ref(n_gB),
          gC_ref(n_gC), gskip_ref(n_gskip), gh0_ref(n_gh0);
      s.ref.selective_scan_backward(ha, gy.data(), ghl,
                                    grad_ptrs(gu_ref, gdelta_ref, gbias_ref, gA_ref, gB_ref, gC_ref, gskip_ref, gh0_ref));

      const std::string what = "selective_scan batch,L,D,N,P=" + shape_str({sh.batch, sh.L, sh.D, sh.N, sh.P}) + " " +
                               var.name;
      auto got = run_twice(
          [&] {
            auto du = s.put(u), ddelta = s.put(delta), dbias = s.put(delta_bias), dA = s.put(A_log), dB = s.put(B),
                 dC = s.put(C), dskip = s.put(Dskip), dh0 = s.put(h0), dgy = s.put(gy), dghl = s.put(g_h_last);
            ScanArgs<float> da = ha;  // the same arguments in device memory
            da.u = du.get();
            da.delta = ddelta.get();
            da.delta_bias = var.bias ? dbias.get() : nullptr;
            da.A_log = dA.get();
            da.B = dB.get();
            da.C = dC.get();
            da.Dskip = var.skip ? dskip.get() : nullptr;
            da.h0 = var.h0 ? dh0.get() : nullptr;
            auto dy = s.put(nans(tokens)), dh_last = s.put(nans(var.h_last ? states : 0));
            s.dev.selective_scan_forward(da, dy.get(), var.h_last ? dh_last.get() : nullptr);
            auto dgu = s.put(nans(n_gu)), dgdelta = s.put(nans(n_gdelta)), dgbias = s.put(nans(n_gbias)),
                 dgA = s.put(nans(n_gA)), dgB = s.put(nans(n_gB)), dgC = s.put(nans(n_gC)),
                 dgskip = s.put(nans(n_gskip)), dgh0 = s.put(nans(n_gh0));
            auto p = [](std::size_t n, const DeviceBuffer<float>& b) { return n > 0 ? b.get() : nullptr; };
            const ScanGrads<float> dg{p(n_gu, dgu),       p(n_gdelta, dgdelta), p(n_gbias, dgbias),
                                      p(n_gA, dgA),       p(n_gB, dgB),         p(n_gC, dgC),
                                      p(n_gskip, dgskip), p(n_gh0, dgh0)};
            s.dev.selective_scan_backward(da, dgy.get(), var.g_h_last ? dghl.get() : nullptr, dg);
            return std::vector<std::vector<float>>{dy.download(),     dh_last.download(), dgu.download(),
                                                   dgdelta.download(), dgbias.download(), dgA.download(),
                                                   dgB.download(),     dgC.download(),     dgskip.download(),
                                                   dgh0.download()};
          },
          what);
      // Float against the reference's double, as |got - ref| <= atol (1 + max |ref|): every
      // output is a sum whose terms can be as large as the largest output, so an element near 0
      // carries the rounding of those terms. Both sides sum in the same order; the error is
      // float rounding (and on the GPU expf/log1pf within 2 ulp), about 1e-7 (1 + max |ref|)
      // in the emulation for the per-element outputs (the decay forgets old rounding, so it
      // does not grow with P). The sums over channels (gB, gC: D terms) and over tokens
      // (gA_log, gDskip, gdelta_bias: batch x L terms, a segment's tokens added in sequence)
      // grow with their length: about 9e-7 at 2 x 1000 tokens in one segment.
      auto close = [&](std::size_t k, const std::vector<float>& ref, double atol, const char* name) {
        expect_close(got[k], ref, atol * (1.0 + max_abs(ref)), 1e-5, what + " " + name);
      };
      const double per_element = 2e-6, over_channels = 2e-6 * (1.0 + double(sh.D) / 1000.0),
                   over_tokens = 2e-6 * (1.0 + double(sh.batch * sh.L) / 1000.0);
      close(0, y_ref, per_element, "y");
      close(1, h_last_ref, per_element, "h_last");
      close(2, gu_ref, per_element, "gu");
      close(3, gdelta_ref, per_element, "gdelta");
      close(4, gbias_ref, over_tokens, "gdelta_bias");
      close(5, gA_ref, over_tokens, "gA_log");
      close(6, gB_ref, over_channels, "gB");
      close(7, gC_ref, over_channels, "gC");
      close(8, gskip_ref, over_tokens, "gDskip");
      close(9, gh0_ref, per_element, "gh0");
    }
  }
}

// ---- memory movement ---------------------------------------------------------------------------------

void check_memory(Suite& s) {
  // strided copies: a transpose, a strided slice, a broadcast read, contiguous
  struct Copy {
    std::vector<i64> shape, src, dst;
  };
  const std::vector<Copy> copies = {
      {{1}, {1}, {1}},
      {{33, 7}, {1, 33}, {7, 1}},               // transpose into contiguous
      {{5, 6, 7}, {84, 14, 2}, {42, 7, 1}},     // every other element of the last axis
      {{1000, 3}, {0, 1}, {3, 1}},              // one row repeated (expand + contiguous)
      {{4, 1, 5}, {5, 5, 1}, {5, 5, 1}},        // contiguous (single memcpy)
      {{3, 4, 5}, {1, 3, 12}, {20, 5, 1}},      // full reversal of axis order
  };
  std::uint64_t seed = 1300;
  for (int elem : {1, 2, 4, 8}) {
    for (std::size_t ci = 0; ci < copies.size(); ++ci) {
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
      s.mem.strided_copy(l, dsrc.get(), ddst.get(), elem);
      CHECK_MESSAGE(ddst.download() == expected, "strided_copy elem " << elem << " case " << ci);
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
      s.mem.cast(dsrc.get(), from, ddst.get(), to, i64(values.size()));
      // compared as values: a NaN is any NaN (the GPU writes the canonical NaN bits)
      auto decode = [&](const std::vector<std::uint8_t>& bytes) {
        std::vector<double> out(values.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (to == 0) { float f; std::memcpy(&f, &bytes[i * 4], 4); out[i] = f; }
          if (to == 1) std::memcpy(&out[i], &bytes[i * 8], 8);
          if (to == 2) { int32_t k; std::memcpy(&k, &bytes[i * 4], 4); out[i] = k; }
        }
        return out;
      };
      expect_close(decode(ddst.download()), decode(expected), 0, 0,
                   "cast " + std::to_string(from) + " -> " + std::to_string(to));
    }
  }
}

}  // namespace wedge::kernels::cuda_parity

// The whole suite against one implementation of the CUDA table. `device` allocates and
// copies the memory the table's kernels work on.
void run_cuda_parity_suite(const wedge::kernels::KernelTable<float>& table, const wedge::kernels::MemoryTable& memory,
                           wedge::Allocator& device, bool full_size) {
  using namespace wedge::kernels::cuda_parity;
  Suite s{table, memory, device, full_size};
  check_gemm(s);
  check_gemm_epilogue(s);
  check_bias_act_backward(s);
  check_fill_unary(s);
  check_binary(s);
  check_dropout(s);
  check_gate_mix(s);
  check_adam(s);
  check_reduce(s);
  check_softmax(s);
  check_cross_entropy(s);
  check_layer_norm(s);
  check_embedding(s);
  check_attention(s);
  check_plucker(s);
  check_selective_scan(s);
  check_memory(s);
}

// Only the GEMM checks (plain and with the epilogue): the emulation runs them a second time
// on the unfused path (plain GEMM, then the separate epilogue pass) that the GPU takes where
// cuBLASLt offers no algorithm.
void run_cuda_gemm_suite(const wedge::kernels::KernelTable<float>& table, const wedge::kernels::MemoryTable& memory,
                         wedge::Allocator& device, bool full_size) {
  using namespace wedge::kernels::cuda_parity;
  Suite s{table, memory, device, full_size};
  check_gemm(s);
  check_gemm_epilogue(s);
}

TEST_CASE("CUDA kernels match the reference kernels on awkward shapes") {
  const auto* table = wedge::kernels::kernel_table<float>(1);
  const auto* memory = wedge::kernels::memory_table(1);
  if (table == nullptr || memory == nullptr) {
    MESSAGE("no CUDA device: CUDA parity tests skipped");
    return;
  }
  // Every entry of the contract is filled; there is no double table on the GPU.
  const auto& t = *table;
  const void* entries[] = {(void*)t.gemm, (void*)t.bias_act_backward, (void*)t.fill, (void*)t.unary,
                           (void*)t.unary_backward, (void*)t.binary,
                           (void*)t.reduce, (void*)t.softmax_forward, (void*)t.softmax_backward,
                           (void*)t.cross_entropy_forward, (void*)t.cross_entropy_backward,
                           (void*)t.layer_norm_forward, (void*)t.layer_norm_backward, (void*)t.embedding_forward,
                           (void*)t.embedding_backward, (void*)t.dropout_forward, (void*)t.dropout_backward,
                           (void*)t.attention_forward, (void*)t.attention_backward, (void*)t.plucker_forward,
                           (void*)t.plucker_backward, (void*)t.plucker_mean_forward, (void*)t.plucker_mean_backward,
                           (void*)t.gate_mix_forward, (void*)t.gate_mix_backward,
                           (void*)t.adam_update, (void*)t.sum_squares, (void*)memory->strided_copy,
                           (void*)memory->cast};
  for (const void* e : entries) CHECK(e != nullptr);
  CHECK(wedge::kernels::kernel_table<double>(1) == nullptr);
  run_cuda_parity_suite(*table, *memory, wedge::allocator_for(wedge::Device::cuda()), true);
}
