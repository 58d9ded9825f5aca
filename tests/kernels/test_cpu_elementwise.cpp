// The AVX-512 element-wise kernels against the reference kernels: bit-identical results
// on awkward shapes (sizes 1, 7, 33, 1000+, tails that are not multiples of 16, every
// broadcast pattern, counters that cross a 2^32 boundary).
#include <doctest/doctest.h>

#include <tuple>
#include <vector>

#include "engine/philox.h"
#include "engine/thread_pool.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/ref.h"

using namespace wedge::kernels;

namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = wedge::philox_uniform(seed, i) * 4.0f - 2.0f + 0.01f;
  return v;
}

// A layout over `shape` with operand strides from per-axis "is broadcast" flags.
BroadcastLayout layout(const std::vector<i64>& shape, const std::vector<bool>& a_bcast, const std::vector<bool>& b_bcast) {
  BroadcastLayout l;
  l.ndim = static_cast<int>(shape.size());
  i64 sa = 1, sb = 1;
  for (int d = l.ndim - 1; d >= 0; --d) {
    l.shape[d] = shape[d];
    l.stride_a[d] = a_bcast[d] ? 0 : sa;
    l.stride_b[d] = b_bcast[d] ? 0 : sb;
    if (!a_bcast[d]) sa *= shape[d];
    if (!b_bcast[d]) sb *= shape[d];
  }
  return l;
}

}  // namespace

TEST_CASE("avx512 binary maps equal the reference bit for bit on every broadcast pattern") {
  if (!cpu::has_avx512()) {
    MESSAGE("no AVX-512 on this CPU: skipped");
    return;
  }
  struct Case { std::vector<i64> shape; std::vector<bool> a, b; };
  const std::vector<Case> cases = {
      {{1}, {false}, {false}},
      {{7}, {false}, {false}},
      {{33, 5}, {false, false}, {false, false}},
      {{1000, 33}, {false, false}, {true, false}},  // bias row
      {{7, 1029}, {true, false}, {false, false}},   // row on the left
      {{65, 17}, {false, false}, {true, true}},     // scalar b
      {{3, 50, 7}, {false, false, false}, {false, true, false}},  // middle broadcast: reference path
      {{2, 3, 129}, {false, false, false}, {true, true, false}},
  };
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max}) {
    for (const Case& c : cases) {
      const BroadcastLayout l = layout(c.shape, c.a, c.b);
      i64 n = 1;
      for (i64 d : c.shape) n *= d;
      const auto a = random_floats(static_cast<std::size_t>(n), 1), b = random_floats(static_cast<std::size_t>(n), 2);
      std::vector<float> want(n), got(n, -7.0f);
      ref::binary<float>(op, l, a.data(), b.data(), want.data());
      cpu::avx512::binary(op, l, a.data(), b.data(), got.data());
      INFO("op " << int(op) << " n " << n);
      CHECK(want == got);
    }
  }
}

TEST_CASE("avx512 axis sums equal the reference bit for bit") {
  if (!cpu::has_avx512()) {
    MESSAGE("no AVX-512 on this CPU: skipped");
    return;
  }
  for (auto [outer, n, inner] : std::vector<std::tuple<i64, i64, i64>>{{1, 4096, 256}, {3, 7, 9}, {1, 1, 33}, {2, 1000, 17}, {5, 3, 1}, {1, 77, 8}}) {
    const auto x = random_floats(static_cast<std::size_t>(outer * n * inner), 3);
    std::vector<float> want(outer * inner), got(outer * inner, -7.0f);
    ref::reduce<float>(ReduceOp::Sum, x.data(), want.data(), nullptr, outer, n, inner);
    cpu::avx512::reduce(ReduceOp::Sum, x.data(), got.data(), nullptr, outer, n, inner);
    INFO(outer << "x" << n << "x" << inner);
    CHECK(want == got);
  }
}

TEST_CASE("avx512 dropout draws the reference mask and values, including across a 2^32 counter boundary") {
  // Element i uses word i % 4 of Philox counter i / 4 (engine/philox.h); offsets of every
  // residue mod 4 start a kernel block part-way through a counter, and an offset near
  // 4 * 2^32 carries the counter's low word into its high word inside a vector.
  if (!cpu::has_avx512()) {
    MESSAGE("no AVX-512 on this CPU: skipped");
    return;
  }
  for (auto [n, p, offset] : std::vector<std::tuple<i64, float, std::uint64_t>>{
           {1, 0.5f, 0}, {37, 0.1f, 5}, {100003, 0.3f, 123456789}, {1000, 0.5f, 4 * 0xFFFFFFFFull - 502},
           {64, 1.0f, 9}, {50, 0.0f, 0}, {65, 0.5f, 2}, {70001, 0.25f, 3}, {3, 0.5f, 7}}) {
    const auto x = random_floats(static_cast<std::size_t>(n), 4);
    std::vector<float> want(n), got(n, -7.0f), gwant(n), ggot(n, -7.0f);
    ref::dropout_forward<float>(x.data(), want.data(), n, p, 77, offset);
    cpu::avx512::dropout_forward(x.data(), got.data(), n, p, 77, offset);
    INFO("n " << n << " p " << p << " offset " << offset);
    CHECK(want == got);
    ref::dropout_backward<float>(x.data(), gwant.data(), n, p, 77, offset);
    cpu::avx512::dropout_backward(x.data(), ggot.data(), n, p, 77, offset);
    CHECK(gwant == ggot);
    std::vector<float> one_thread(n);
    const int saved_threads = wedge::num_threads();
    wedge::set_num_threads(1);  // other chunk boundaries: every block start still agrees
    cpu::avx512::dropout_forward(x.data(), one_thread.data(), n, p, 77, offset);
    wedge::set_num_threads(saved_threads);
    CHECK(one_thread == got);
  }
}
