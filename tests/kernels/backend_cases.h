// What the backend harness (tests/kernels/backend_harness.cpp) and the backend bench
// (bench/bench_backends.cpp) share: memory on a backend, seeded inputs, the backends
// themselves, and the list of cases, ONE per kernel of engine/kernels.def, keyed by
// KernelId. A case names the harness check that compares the kernel with the reference on
// awkward shapes, and holds one call of the kernel on a representative shape of the paper
// models: the shape the bench times on every backend, and the one the CPU's thread-count
// test runs.
//
// A kernel added to engine/kernels.def without a case here fails the harness's coverage
// test. Nothing here depends on doctest.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/allocator.h"
#include "kernels/tables.h"

namespace wedge::kernels::harness {

using std::int32_t;

// ---- memory ------------------------------------------------------------------------------

// "Device" memory on the host, counted so a test can check that every buffer it allocated
// came back. The CPU backend and the host emulation of the CUDA kernels work in it.
class HostMemory final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    in_use_ += bytes;
    return ::operator new(bytes, std::align_val_t(64));
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    in_use_ -= bytes;
    ::operator delete(ptr, std::align_val_t(64));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_within(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  std::size_t bytes_in_use() const override { return in_use_; }
  std::size_t bytes_cached() const override { return 0; }
  void release_cached() override {}

 private:
  std::size_t in_use_ = 0;
};

// n values of T in a backend's memory, written from and read back into host vectors of H:
// H = T, or float for a double backend (the harness works in float, the kernels in T).
template <typename T, typename H = T>
class DeviceBuffer {
 public:
  DeviceBuffer(Allocator& alloc, const std::vector<H>& host) : alloc_(alloc), count_(host.size()) {
    ptr_ = static_cast<T*>(alloc_.allocate(bytes()));
    if (count_ == 0) return;
    if constexpr (std::is_same_v<T, H>) {
      alloc_.copy_from_host(ptr_, host.data(), count_ * sizeof(T));
    } else {
      const std::vector<T> values(host.begin(), host.end());
      alloc_.copy_from_host(ptr_, values.data(), count_ * sizeof(T));
    }
  }
  ~DeviceBuffer() { alloc_.deallocate(ptr_, bytes()); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  std::vector<H> download() const {
    std::vector<T> values(count_);
    if (count_ > 0) alloc_.copy_to_host(values.data(), ptr_, count_ * sizeof(T));
    if constexpr (std::is_same_v<T, H>) {
      return values;
    } else {
      return std::vector<H>(values.begin(), values.end());
    }
  }

 private:
  std::size_t bytes() const { return (count_ > 0 ? count_ : 1) * sizeof(T); }
  Allocator& alloc_;
  std::size_t count_;
  T* ptr_ = nullptr;
};

// ---- inputs --------------------------------------------------------------------------------

inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<int32_t> random_ints(std::size_t n, std::uint64_t seed, int32_t lo, int32_t hi) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// Outputs start as NaN: a kernel that reads an output it should only write, or leaves an
// element unwritten, shows up as NaN in the comparison.
inline std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

// ---- backends ------------------------------------------------------------------------------

// How large the shapes of the harness get on a backend:
//   reduced  the backends that are slow by nature (the host emulation of the CUDA kernels,
//            the scalar double reference): every awkward shape, but the largest cut down
//   large    + the shapes that drive the CPU's threading and cache blocking
//   full     + the largest shapes (GPU tiles, vocabulary-sized tables), whose reference
//            results alone take seconds
enum class Sizes { reduced, large, full };

// Which kind of implementation a backend is: where one kind needs a looser tolerance than
// the others, the harness's tolerance table says so, next to the kernel's.
enum class Family { reference, cpu, cuda };

// One implementation of the kernel contract: its tables and the memory its kernels work
// on. `memory` is null for a backend without memory kernels of its own.
template <typename T>
struct Backend {
  std::string name;
  Family family;
  const KernelTable<T>* table;
  const MemoryTable* memory;
  Allocator* alloc;
  Sizes sizes;
};

// ---- the case list ---------------------------------------------------------------------------

// The harness check that covers a kernel; a forward kernel and its backward share one.
enum class Check { gemm, bias_act, fill_unary, binary, dropout, gate_mix, selective_scan, adam, reduce, softmax,
                   cross_entropy, layer_norm, residual_layer_norm, embedding, attention, attention_decode, plucker, memory, tree_sum };

// One kernel call with its operands in one backend's memory (freed with the Call).
class Call {
 public:
  Call(const KernelTable<float>& table, const MemoryTable& memory, Allocator& alloc)
      : k(table), mem(memory), alloc_(alloc) {}
  ~Call() {
    for (const Block& b : blocks_) alloc_.deallocate(b.ptr, b.bytes);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // An operand holding `host`; `output` when the kernel writes it.
  template <typename T>
  T* in(const std::vector<T>& host, bool output = false) {
    const std::size_t bytes = (host.empty() ? 1 : host.size()) * sizeof(T);
    void* ptr = alloc_.allocate(bytes);
    blocks_.push_back({ptr, bytes, host.size() * sizeof(T), output});
    if (!host.empty()) alloc_.copy_from_host(ptr, host.data(), host.size() * sizeof(T));
    return static_cast<T*>(ptr);
  }
  // An output of n elements, zero before the call.
  template <typename T>
  T* out(std::size_t n) { return in(std::vector<T>(n, T(0)), true); }
  // Every output's bytes after the calls so far, in the order they were made.
  std::vector<std::vector<std::uint8_t>> outputs() const {
    std::vector<std::vector<std::uint8_t>> all;
    for (const Block& b : blocks_) {
      if (!b.output) continue;
      all.emplace_back(b.used);
      if (b.used > 0) alloc_.copy_to_host(all.back().data(), b.ptr, b.used);
    }
    return all;
  }

  const KernelTable<float>& k;
  const MemoryTable& mem;
  std::function<void()> run;  // the call itself, set by the case's prepare

 private:
  struct Block {
    void* ptr;
    std::size_t bytes, used;
    bool output;
  };
  Allocator& alloc_;
  std::vector<Block> blocks_;
};

struct KernelCase {
  KernelId kernel;
  Check check;
  const char* shape;             // the representative shape, in words
  void (*prepare)(Call& call);   // puts its operands in memory and sets call.run
};

// The representative shapes: a training step of batch 8 x block 128 = 1024 tokens of the
// paper models (d 256, d_ff 1024, 4 heads of 64, vocabulary 30,522, Grassmann rank 32 with
// offsets {1, 2, 4, 8, 12, 16}), cut where the reference would take seconds per call.
namespace shape {
constexpr i64 kTokens = 1024, kModel = 256, kHidden = 1024, kVocab = 30522, kVocabRows = 128;
constexpr i64 kBatch = 8, kBlock = 128, kHeads = 4, kHeadDim = 64, kRank = 32;
constexpr i64 kElements = i64(1) << 20;  // element-wise kernels
inline const std::vector<int32_t> kOffsets = {1, 2, 4, 8, 12, 16};
}  // namespace shape

namespace prepare {
using namespace shape;

// Uniform in [lo, hi), from a cheap hash of (seed, index): these operands run to millions of
// elements, and only their spread matters.
inline std::vector<float> values(i64 n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(std::size_t(n > 0 ? n : 0));
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull;
  for (float& x : v) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = lo + (hi - lo) * float(z >> 40) * 0x1.0p-24f;
  }
  return v;
}

// The MLP's first linear layer: (tokens, d) x W^T (d_ff, d) + bias, GELU kept in aux.
inline void gemm(Call& c) {
  GemmArgs<float> g;
  g.trans_b = Trans::T;
  g.m = kTokens, g.n = kHidden, g.k = kModel;
  g.a = c.in(values(kTokens * kModel, 1)), g.lda = kModel;
  g.b = c.in(values(kHidden * kModel, 2)), g.ldb = kModel;
  g.c = c.out<float>(std::size_t(kTokens * kHidden)), g.ldc = kHidden;
  g.bias = c.in(values(kHidden, 3));
  g.act = Activation::Gelu;
  g.aux = c.out<float>(std::size_t(kTokens * kHidden));
  c.run = [&c, g] { c.k.gemm(g); };
}
inline void bias_act_backward(Call& c) {
  const float* aux = c.in(values(kTokens * kHidden, 4, -4.0f, 4.0f));
  const float* gy = c.in(values(kTokens * kHidden, 5));
  float* gh = c.out<float>(std::size_t(kTokens * kHidden));
  float* gbias = c.out<float>(std::size_t(kHidden));
  c.run = [&c, aux, gy, gh, gbias] { c.k.bias_act_backward(Activation::Gelu, aux, gy, kTokens, kHidden, gh, gbias); };
}
inline void fill(Call& c) {
  float* y = c.out<float>(std::size_t(kElements));
  c.run = [&c, y] { c.k.fill(y, 0.5f, kElements); };
}
inline void unary(Call& c) {
  const float* x = c.in(values(kElements, 6, -6.0f, 6.0f));
  float* y = c.out<float>(std::size_t(kElements));
  c.run = [&c, x, y] { c.k.unary(UnaryOp::Gelu, 0.0f, x, y, kElements); };
}
inline void unary_backward(Call& c) {
  const float* x = c.in(values(kElements, 7, -6.0f, 6.0f));
  const float* y = c.in(values(kElements, 8, -0.2f, 6.0f));  // read by the ops whose derivative needs y
  const float* gy = c.in(values(kElements, 9));
  float* gx = c.out<float>(std::size_t(kElements));
  c.run = [&c, x, y, gy, gx] { c.k.unary_backward(UnaryOp::Gelu, 0.0f, x, y, gy, gx, kElements, false); };
}
// A bias row added to every token's hidden vector.
inline void binary(Call& c) {
  BroadcastLayout l;
  l.ndim = 2;
  l.shape[0] = kTokens, l.shape[1] = kHidden;
  l.stride_a[0] = kHidden, l.stride_a[1] = 1;
  l.stride_b[0] = 0, l.stride_b[1] = 1;
  const float* a = c.in(values(kTokens * kHidden, 10));
  const float* b = c.in(values(kHidden, 11));
  float* out = c.out<float>(std::size_t(kTokens * kHidden));
  c.run = [&c, l, a, b, out] { c.k.binary(BinaryOp::Add, l, a, b, out); };
}
// A bias gradient: the column sums of (tokens, d_ff).
inline void reduce(Call& c) {
  const float* x = c.in(values(kTokens * kHidden, 12));
  float* y = c.out<float>(std::size_t(kHidden));
  c.run = [&c, x, y] { c.k.reduce(ReduceOp::Sum, x, y, nullptr, 1, kTokens, kHidden); };
}
inline void sum_squares(Call& c) {
  const float* x = c.in(values(kElements, 13));
  float* out = c.out<float>(1);
  c.run = [&c, x, out] { c.k.sum_squares(x, kElements, out, false); };
}
inline void softmax_forward(Call& c) {
  const float* x = c.in(values(kVocabRows * kVocab, 13, -8.0f, 8.0f));
  float* y = c.out<float>(std::size_t(kVocabRows * kVocab));
  c.run = [&c, x, y] { c.k.softmax_forward(x, y, kVocabRows, kVocab, false); };
}
inline void softmax_backward(Call& c) {
  const float* y = c.in(values(kVocabRows * kVocab, 14, 0.0f, 2.0f / float(kVocab)));
  const float* gy = c.in(values(kVocabRows * kVocab, 15));
  float* gx = c.out<float>(std::size_t(kVocabRows * kVocab));
  c.run = [&c, y, gy, gx] { c.k.softmax_backward(y, gy, gx, kVocabRows, kVocab, false); };
}
// Logits over the vocabulary, their targets, and the forward's row log-sum-exp and count.
struct CrossEntropyOperands {
  const float* logits;
  const int32_t* targets;
  float *lse, *loss, *count;
};
inline CrossEntropyOperands cross_entropy_operands(Call& c) {
  CrossEntropyOperands o;
  o.logits = c.in(values(kVocabRows * kVocab, 16, -6.0f, 6.0f));
  o.targets = c.in(random_ints(std::size_t(kVocabRows), 17, 0, int32_t(kVocab - 1)));
  o.lse = c.out<float>(std::size_t(kVocabRows));
  o.loss = c.out<float>(1);
  o.count = c.out<float>(1);
  return o;
}
inline void cross_entropy_forward(Call& c) {
  const CrossEntropyOperands o = cross_entropy_operands(c);
  c.run = [&c, o] { c.k.cross_entropy_forward(o.logits, o.targets, kVocabRows, kVocab, -100, o.lse, o.loss, o.count); };
}
inline void cross_entropy_backward(Call& c) {
  const CrossEntropyOperands o = cross_entropy_operands(c);
  c.k.cross_entropy_forward(o.logits, o.targets, kVocabRows, kVocab, -100, o.lse, o.loss, o.count);
  const float* gloss = c.in(std::vector<float>{1.0f});
  float* glogits = c.out<float>(std::size_t(kVocabRows * kVocab));
  c.run = [&c, o, gloss, glogits] {
    c.k.cross_entropy_backward(o.logits, o.targets, o.lse, o.count, gloss, kVocabRows, kVocab, -100, glogits);
  };
}
// (tokens, d) with gamma and beta, and the mean and rstd the forward writes.
struct LayerNormOperands {
  const float *x, *gamma, *beta;
  float *mean, *rstd;
};
inline LayerNormOperands layer_norm_operands(Call& c) {
  LayerNormOperands o;
  o.x = c.in(values(kTokens * kModel, 18, -3.0f, 5.0f));
  o.gamma = c.in(values(kModel, 19, 0.5f, 1.5f));
  o.beta = c.in(values(kModel, 20));
  o.mean = c.out<float>(std::size_t(kTokens));
  o.rstd = c.out<float>(std::size_t(kTokens));
  return o;
}
inline void layer_norm_forward(Call& c) {
  const LayerNormOperands o = layer_norm_operands(c);
  float* y = c.out<float>(std::size_t(kTokens * kModel));
  c.run = [&c, o, y] { c.k.layer_norm_forward(o.x, o.gamma, o.beta, kTokens, kModel, 1e-5f, y, o.mean, o.rstd); };
}
// The operands with mean and rstd filled in by a forward, for the backward kernels.
inline LayerNormOperands layer_norm_statistics(Call& c) {
  const LayerNormOperands o = layer_norm_operands(c);
  std::vector<float> scratch(std::size_t(kTokens * kModel));
  c.k.layer_norm_forward(o.x, o.gamma, o.beta, kTokens, kModel, 1e-5f, c.in(scratch), o.mean, o.rstd);
  return o;
}
inline void layer_norm_backward(Call& c) {
  const LayerNormOperands o = layer_norm_statistics(c);
  const float* gy = c.in(values(kTokens * kModel, 21));
  float* gx = c.out<float>(std::size_t(kTokens * kModel));
  float* ggamma = c.out<float>(std::size_t(kModel));
  float* gbeta = c.out<float>(std::size_t(kModel));
  c.run = [&c, o, gy, gx, ggamma, gbeta] {
    c.k.layer_norm_backward(o.x, o.gamma, o.mean, o.rstd, gy, kTokens, kModel, gx, ggamma, gbeta);
  };
}
// The residual pair over the same (tokens, d): x + dropout(y) normalised.
inline void residual_layer_norm_forward(Call& c) {
  const LayerNormOperands o = layer_norm_operands(c);
  const float* y = c.in(values(kTokens * kModel, 50));
  float* sum = c.out<float>(std::size_t(kTokens * kModel));
  float* out = c.out<float>(std::size_t(kTokens * kModel));
  c.run = [&c, o, y, sum, out] {
    c.k.residual_layer_norm_forward(o.x, y, o.gamma, o.beta, kTokens, kModel, 0.1f, 1234, 5, 1e-5f, sum, out, o.mean,
                                    o.rstd);
  };
}
inline void residual_layer_norm_backward(Call& c) {
  const LayerNormOperands o = layer_norm_statistics(c);
  const float* gout = c.in(values(kTokens * kModel, 51));
  const float* gs = c.in(values(kTokens * kModel, 52));
  float* gx = c.out<float>(std::size_t(kTokens * kModel));
  float* gy = c.out<float>(std::size_t(kTokens * kModel));
  float* ggamma = c.out<float>(std::size_t(kModel));
  float* gbeta = c.out<float>(std::size_t(kModel));
  c.run = [&c, o, gout, gs, gx, gy, ggamma, gbeta] {
    c.k.residual_layer_norm_backward(o.x, o.gamma, o.mean, o.rstd, gout, gs, kTokens, kModel, 0.1f, 1234, 5, gx, gy,
                                     ggamma, gbeta);
  };
}
inline void embedding_forward(Call& c) {
  const float* table = c.in(values(kVocab * kModel, 22));
  const int32_t* ids = c.in(random_ints(std::size_t(kTokens), 23, 0, int32_t(kVocab - 1)));
  float* out = c.out<float>(std::size_t(kTokens * kModel));
  c.run = [&c, table, ids, out] { c.k.embedding_forward(table, ids, kTokens, kVocab, kModel, out); };
}
inline void embedding_backward(Call& c) {
  const int32_t* ids = c.in(random_ints(std::size_t(kTokens), 24, 0, 999));  // frequent tokens repeat
  const float* gout = c.in(values(kTokens * kModel, 25));
  float* gtable = c.out<float>(std::size_t(kVocab * kModel));
  c.run = [&c, ids, gout, gtable] { c.k.embedding_backward(ids, gout, kTokens, kVocab, kModel, gtable); };
}
inline void dropout_forward(Call& c) {
  const float* x = c.in(values(kElements, 26));
  float* y = c.out<float>(std::size_t(kElements));
  c.run = [&c, x, y] { c.k.dropout_forward(x, y, kElements, 0.1f, 1234, 5); };
}
inline void dropout_backward(Call& c) {
  const float* gy = c.in(values(kElements, 27));
  float* gx = c.out<float>(std::size_t(kElements));
  c.run = [&c, gy, gx] { c.k.dropout_backward(gy, gx, kElements, 0.1f, 1234, 5); };
}
// Causal self-attention of every head of the batch: q, k, v, and the forward's out, lse.
struct AttentionOperands {
  const float *q, *k, *v;
  float *out, *lse;
  static constexpr i64 BH = kBatch * kHeads, L = kBlock, dh = kHeadDim;
  static constexpr float scale = 0.125f;  // 1 / sqrt(64)
};
inline AttentionOperands attention_operands(Call& c) {
  using A = AttentionOperands;
  AttentionOperands o;
  o.q = c.in(values(A::BH * A::L * A::dh, 28, -1.5f, 1.5f));
  o.k = c.in(values(A::BH * A::L * A::dh, 29, -1.5f, 1.5f));
  o.v = c.in(values(A::BH * A::L * A::dh, 30));
  o.out = c.out<float>(std::size_t(A::BH * A::L * A::dh));
  o.lse = c.out<float>(std::size_t(A::BH * A::L));
  return o;
}
inline void attention_forward(Call& c) {
  using A = AttentionOperands;
  const AttentionOperands o = attention_operands(c);
  c.run = [&c, o] { c.k.attention_forward(o.q, o.k, o.v, A::BH, A::L, A::dh, A::scale, true, o.out, o.lse); };
}
inline void attention_backward(Call& c) {
  using A = AttentionOperands;
  const AttentionOperands o = attention_operands(c);
  c.k.attention_forward(o.q, o.k, o.v, A::BH, A::L, A::dh, A::scale, true, o.out, o.lse);
  const float* gout = c.in(values(A::BH * A::L * A::dh, 31));
  float* gq = c.out<float>(std::size_t(A::BH * A::L * A::dh));
  float* gk = c.out<float>(std::size_t(A::BH * A::L * A::dh));
  float* gv = c.out<float>(std::size_t(A::BH * A::L * A::dh));
  c.run = [&c, o, gout, gq, gk, gv] {
    c.k.attention_backward(o.q, o.k, o.v, o.out, o.lse, gout, A::BH, A::L, A::dh, A::scale, true, gq, gk, gv);
  };
}
// One step of generation for every head of the batch: the newest query against a cache of
// kBlock positions (capacity kBlock rows per head, all filled), read in place.
inline void attention_decode_forward(Call& c) {
  constexpr i64 BH = kBatch * kHeads, L = kBlock, dh = kHeadDim;
  const float* q = c.in(values(BH * dh, 28, -1.5f, 1.5f));
  const float* k = c.in(values(BH * L * dh, 29, -1.5f, 1.5f));
  const float* v = c.in(values(BH * L * dh, 30));
  float* out = c.out<float>(std::size_t(BH * dh));
  c.run = [&c, q, k, v, out] { c.k.attention_decode_forward(q, k, v, BH, 1, L, L * dh, dh, 0.125f, out); };
}
// The Grassmann mixing of a batch: z (B, L, r), and the norms (B, L, m) the forward writes.
struct PluckerOperands {
  const float* z;
  float* norms;
  static constexpr i64 P = kRank * (kRank - 1) / 2;
  static i64 m() { return i64(kOffsets.size()); }
};
inline PluckerOperands plucker_operands(Call& c) {
  PluckerOperands o;
  o.z = c.in(values(kBatch * kBlock * kRank, 32));
  o.norms = c.out<float>(std::size_t(kBatch * kBlock * PluckerOperands::m()));
  return o;
}
// The forward (mean = false: every offset's vectors; true: their mean) and, when
// `backward`, the backward from a gradient of that output.
inline void plucker(Call& c, bool mean, bool backward) {
  using P = PluckerOperands;
  const PluckerOperands o = plucker_operands(c);
  const i64 m = P::m(), out_size = kBatch * kBlock * (mean ? 1 : m) * P::P;
  const int32_t* off = kOffsets.data();  // host memory, as the contract says
  float* out = backward ? c.in(std::vector<float>(std::size_t(out_size))) : c.out<float>(std::size_t(out_size));
  const auto forward = mean ? c.k.plucker_mean_forward : c.k.plucker_forward;
  if (!backward) {
    c.run = [&c, o, off, m, out, forward] { forward(o.z, kBatch, kBlock, kRank, off, m, 1e-6f, out, o.norms); };
    return;
  }
  forward(o.z, kBatch, kBlock, kRank, off, m, 1e-6f, out, o.norms);
  const float* gout = c.in(values(out_size, 33));
  float* gz = c.out<float>(std::size_t(kBatch * kBlock * kRank));
  if (mean) {
    c.run = [&c, o, off, m, gout, gz] {
      c.k.plucker_mean_backward(o.z, kBatch, kBlock, kRank, off, m, 1e-6f, o.norms, gout, gz);
    };
  } else {
    c.run = [&c, o, off, m, out, gout, gz] {
      c.k.plucker_backward(o.z, kBatch, kBlock, kRank, off, m, 1e-6f, out, o.norms, gout, gz);
    };
  }
}
inline void plucker_forward(Call& c) { plucker(c, false, false); }
inline void plucker_backward(Call& c) { plucker(c, false, true); }
inline void plucker_mean_forward(Call& c) { plucker(c, true, false); }
inline void plucker_mean_backward(Call& c) { plucker(c, true, true); }
inline void gate_mix_forward(Call& c) {
  const float* a = c.in(values(kElements, 34, -8.0f, 8.0f));
  const float *x = c.in(values(kElements, 35)), *y = c.in(values(kElements, 36));
  float* out = c.out<float>(std::size_t(kElements));
  c.run = [&c, a, x, y, out] { c.k.gate_mix_forward(a, x, y, out, kElements); };
}
inline void gate_mix_backward(Call& c) {
  const float* a = c.in(values(kElements, 37, -8.0f, 8.0f));
  const float *x = c.in(values(kElements, 38)), *y = c.in(values(kElements, 39));
  const float* gout = c.in(values(kElements, 40));
  float *ga = c.out<float>(std::size_t(kElements)), *gx = c.out<float>(std::size_t(kElements));
  float* gy = c.out<float>(std::size_t(kElements));
  c.run = [&c, a, x, y, gout, ga, gx, gy] { c.k.gate_mix_backward(a, x, y, gout, ga, gx, gy, kElements); };
}
// SheafStateLM's scan: inner width 2d = 512, 16 states, patches of 16 tokens, each from
// its own initial state.
constexpr i64 kInner = 2 * kModel, kStates = 16, kPatch = 16;
inline ScanArgs<float> scan_operands(Call& c) {
  const i64 tokens = kBatch * kBlock * kInner, inputs = kBatch * kBlock * kStates;
  ScanArgs<float> a;
  a.batch = kBatch;
  a.L = kBlock;
  a.D = kInner;
  a.N = kStates;
  a.P = kPatch;
  a.u = c.in(values(tokens, 50));
  a.delta = c.in(values(tokens, 51, -4.0f, 1.0f));
  a.delta_bias = c.in(values(kInner, 52));
  a.A_log = c.in(values(kInner * kStates, 53, 0.0f, 2.0f));
  a.B = c.in(values(inputs, 54));
  a.C = c.in(values(inputs, 55));
  a.Dskip = c.in(values(kInner, 56));
  a.h0 = c.in(values(a.batch * a.segments() * kInner * kStates, 57));
  return a;
}
inline void selective_scan_forward(Call& c) {
  const ScanArgs<float> a = scan_operands(c);
  float* y = c.out<float>(std::size_t(kBatch * kBlock * kInner));
  c.run = [&c, a, y] { c.k.selective_scan_forward(a, y, nullptr, nullptr); };
}
inline void selective_scan_backward(Call& c) {
  const ScanArgs<float> a = scan_operands(c);
  const float* gy = c.in(values(kBatch * kBlock * kInner, 58));
  ScanGrads<float> g;
  g.u = c.out<float>(std::size_t(kBatch * kBlock * kInner));
  g.delta = c.out<float>(std::size_t(kBatch * kBlock * kInner));
  g.delta_bias = c.out<float>(std::size_t(kInner));
  g.A_log = c.out<float>(std::size_t(kInner * kStates));
  g.B = c.out<float>(std::size_t(kBatch * kBlock * kStates));
  g.C = c.out<float>(std::size_t(kBatch * kBlock * kStates));
  g.Dskip = c.out<float>(std::size_t(kInner));
  g.h0 = c.out<float>(std::size_t(a.batch * a.segments() * kInner * kStates));
  c.run = [&c, a, gy, g] { c.k.selective_scan_backward(a, gy, nullptr, nullptr, g); };
}
// One step over the parameters of a transformer block: its weights and biases.
inline void adam_update(Call& c) {
  const i64 sizes[] = {kModel * kHidden, kHidden, kHidden * kModel, kModel, kModel, kModel,
                       3 * kModel * kModel, 3 * kModel, kModel * kModel, kModel};
  auto segments = std::make_shared<std::vector<AdamSegment<float>>>();  // host memory
  std::uint64_t seed = 41;
  for (i64 n : sizes) {
    AdamSegment<float> s;
    s.param = c.in(values(n, seed++), true);
    s.grad = c.in(values(n, seed++));
    s.m = c.in(values(n, seed++, -0.1f, 0.1f), true);
    s.v = c.in(values(n, seed++, 0.0f, 0.01f), true);
    s.n = n;
    segments->push_back(s);
  }
  const AdamParams hp{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.271f, 0.002997f, true, 0.5f};
  c.run = [&c, hp, segments] { c.k.adam_update(hp, segments->data(), i64(segments->size())); };
}
// Heads split: (B, L, H, dh) read as (B, H, L, dh) into contiguous memory.
inline void strided_copy(Call& c) {
  CopyLayout l;
  l.ndim = 4;
  const i64 shape[] = {kBatch, kHeads, kBlock, kHeadDim};
  const i64 src[] = {kBlock * kHeads * kHeadDim, kHeadDim, kHeads * kHeadDim, 1};
  i64 stride = 1;
  for (int d = 3; d >= 0; --d) {
    l.shape[d] = shape[d];
    l.stride_src[d] = src[d];
    l.stride_dst[d] = stride;
    stride *= shape[d];
  }
  const float* x = c.in(values(stride, 48));
  float* y = c.out<float>(std::size_t(stride));
  c.run = [&c, l, x, y] { c.mem.strided_copy(l, x, y, 4); };
}
inline void cast(Call& c) {
  const float* x = c.in(values(kElements, 49));
  double* y = c.out<double>(std::size_t(kElements));
  c.run = [&c, x, y] { c.mem.cast(x, 0, y, 1, kElements); };
}
// Four ranks' gradients of 2^20 elements summed, as a step of four processes sums them.
inline void tree_sum(Call& c) {
  const float* slices = c.in(values(4 * kElements, 50));
  float* out = c.out<float>(std::size_t(kElements));
  c.run = [&c, slices, out] { c.k.tree_sum(slices, kElements, 4, out); };
}
}  // namespace prepare

// ONE case per kernel of engine/kernels.def, in its order.
inline const KernelCase kernel_cases[] = {
    {KernelId::gemm, Check::gemm, "1024x1024x256, W^T, bias + GELU", prepare::gemm},
    {KernelId::bias_act_backward, Check::bias_act, "1024x1024, GELU, bias gradient", prepare::bias_act_backward},
    {KernelId::fill, Check::fill_unary, "2^20", prepare::fill},
    {KernelId::unary, Check::fill_unary, "GELU, 2^20", prepare::unary},
    {KernelId::unary_backward, Check::fill_unary, "GELU, 2^20", prepare::unary_backward},
    {KernelId::binary, Check::binary, "1024x1024 + a bias row", prepare::binary},
    {KernelId::reduce, Check::reduce, "column sums of 1024x1024", prepare::reduce},
    {KernelId::sum_squares, Check::reduce, "2^20", prepare::sum_squares},
    {KernelId::softmax_forward, Check::softmax, "128x30522", prepare::softmax_forward},
    {KernelId::softmax_backward, Check::softmax, "128x30522", prepare::softmax_backward},
    {KernelId::cross_entropy_forward, Check::cross_entropy, "128x30522", prepare::cross_entropy_forward},
    {KernelId::cross_entropy_backward, Check::cross_entropy, "128x30522", prepare::cross_entropy_backward},
    {KernelId::layer_norm_forward, Check::layer_norm, "1024x256", prepare::layer_norm_forward},
    {KernelId::layer_norm_backward, Check::layer_norm, "1024x256", prepare::layer_norm_backward},
    {KernelId::residual_layer_norm_forward, Check::residual_layer_norm, "1024x256 p 0.1", prepare::residual_layer_norm_forward},
    {KernelId::residual_layer_norm_backward, Check::residual_layer_norm, "1024x256 p 0.1", prepare::residual_layer_norm_backward},
    {KernelId::embedding_forward, Check::embedding, "1024 of 30522x256", prepare::embedding_forward},
    {KernelId::embedding_backward, Check::embedding, "1024 into 30522x256", prepare::embedding_backward},
    {KernelId::dropout_forward, Check::dropout, "2^20, p 0.1", prepare::dropout_forward},
    {KernelId::dropout_backward, Check::dropout, "2^20, p 0.1", prepare::dropout_backward},
    {KernelId::attention_forward, Check::attention, "32 heads x 128 x 64, causal", prepare::attention_forward},
    {KernelId::attention_backward, Check::attention, "32 heads x 128 x 64, causal", prepare::attention_backward},
    {KernelId::attention_decode_forward, Check::attention_decode, "32 heads, 1 query x 128 keys x 64",
     prepare::attention_decode_forward},
    {KernelId::plucker_forward, Check::plucker, "8x128, r 32, 6 offsets", prepare::plucker_forward},
    {KernelId::plucker_backward, Check::plucker, "8x128, r 32, 6 offsets", prepare::plucker_backward},
    {KernelId::plucker_mean_forward, Check::plucker, "8x128, r 32, 6 offsets", prepare::plucker_mean_forward},
    {KernelId::plucker_mean_backward, Check::plucker, "8x128, r 32, 6 offsets", prepare::plucker_mean_backward},
    {KernelId::gate_mix_forward, Check::gate_mix, "2^20", prepare::gate_mix_forward},
    {KernelId::gate_mix_backward, Check::gate_mix, "2^20", prepare::gate_mix_backward},
    {KernelId::selective_scan_forward, Check::selective_scan, "8x128, E 512, N 16, P 16",
     prepare::selective_scan_forward},
    {KernelId::selective_scan_backward, Check::selective_scan, "8x128, E 512, N 16, P 16",
     prepare::selective_scan_backward},
    {KernelId::adam_update, Check::adam, "one transformer block, 10 tensors", prepare::adam_update},
    {KernelId::tree_sum, Check::tree_sum, "4 slices of 2^20", prepare::tree_sum},
    {KernelId::strided_copy, Check::memory, "8x128x4x64 heads split", prepare::strided_copy},
    {KernelId::cast, Check::memory, "2^20 f32 -> f64", prepare::cast},
};
inline constexpr int kernel_case_count = int(std::size(kernel_cases));

}  // namespace wedge::kernels::harness
