// attention_decode against the causal attention it shortcuts: decoding the n newest positions of
// a stream over its keys so far gives the last n rows of attention(q, k, v, true) over the whole
// stream. In float (the CPU's kernels on both sides) and in float64 (the reference kernels, whose
// steps are the same: equal to rounding). Also: k and v read in place from a larger cache, the
// layouts that must be packed first, and the argument errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "ops/ops.h"

namespace wedge {
namespace {

struct Case {
  std::int64_t B, H, L, dh;
  std::vector<std::int64_t> ns;  // how many of the newest positions to decode
};

// |got - want| <= atol + rtol |want| everywhere; reports the worst element.
void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  REQUIRE(got.shape() == want.shape());
  const auto a = got.to(DType::F64).to_vector<double>(), b = want.to(DType::F64).to_vector<double>();
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (std::size_t e = 0; e < a.size(); ++e) {
    const double excess = std::fabs(a[e] - b[e]) - (atol + rtol * std::fabs(b[e]));
    if (!(excess <= 0)) {
      ++bad;
      if (std::isnan(excess) || excess > worst_excess) {
        worst_excess = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
        worst = e;
      }
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << a.size() << " elements differ; worst at " << worst
                               << ": got " << a[worst] << ", expected " << b[worst]);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to(DType::F64).to_vector<double>() == b.to(DType::F64).to_vector<double>();
}

// The last n rows (positions) of x (B, H, L, dh).
Tensor newest(const Tensor& x, std::int64_t n) { return ops::narrow(x, 2, x.size(2) - n, n); }

void check_against_attention(DType dtype, double atol, double rtol) {
  const std::vector<Case> cases = {
      {1, 1, 1, 1, {1}},             {2, 3, 9, 13, {1, 2, 9}},       {2, 3, 37, 16, {1, 3, 4, 36}},
      {1, 2, 130, 64, {1, 5, 70, 130}}, {1, 4, 1029, 64, {1, 65}},
  };
  NoGradGuard no_grad;
  std::uint64_t seed = 7;
  for (const Case& c : cases) {
    const Tensor q = Tensor::randn({c.B, c.H, c.L, c.dh}, seed++, 0, 1, dtype);
    const Tensor k = Tensor::randn({c.B, c.H, c.L, c.dh}, seed++, 0, 1, dtype);
    const Tensor v = Tensor::randn({c.B, c.H, c.L, c.dh}, seed++, 0, 1, dtype);
    const Tensor full = ops::attention(q, k, v, true);
    for (std::int64_t n : c.ns) {
      const std::string what = std::string(dtype_name(dtype)) + " B,H,L,dh = " + std::to_string(c.B) + "," +
                               std::to_string(c.H) + "," + std::to_string(c.L) + "," + std::to_string(c.dh) +
                               ", n = " + std::to_string(n);
      const Tensor out = ops::attention_decode(newest(q, n), k, v);
      CHECK(out.shape() == Shape{c.B, c.H, n, c.dh});
      expect_close(out, newest(full, n), atol, rtol, what);
    }
  }
}

TEST_CASE("attention_decode equals the last n rows of causal attention (float, the CPU's kernels)") {
  check_against_attention(DType::F32, 1e-6, 1e-5);
}

TEST_CASE("attention_decode equals the last n rows of causal attention (float64, the reference)") {
  check_against_attention(DType::F64, 1e-13, 1e-12);
}

TEST_CASE("attention_decode reads k and v in place from a larger cache; other layouts are packed first") {
  NoGradGuard no_grad;
  const std::int64_t B = 2, H = 3, capacity = 80, L = 67, dh = 16, n = 2;
  for (DType dtype : {DType::F32, DType::F64}) {
    INFO(std::string(dtype_name(dtype)));
    Tensor cache_k = Tensor::randn({B, H, capacity, dh}, 21, 0, 1, dtype);
    Tensor cache_v = Tensor::randn({B, H, capacity, dh}, 22, 0, 1, dtype);
    // The unfilled rows: a kernel that read them would return NaN.
    ops::narrow(cache_k, 2, L, capacity - L).fill_(std::nan(""));
    ops::narrow(cache_v, 2, L, capacity - L).fill_(std::nan(""));
    const Tensor k = ops::narrow(cache_k, 2, 0, L), v = ops::narrow(cache_v, 2, 0, L);
    CHECK_FALSE(k.is_contiguous());
    const Tensor q = Tensor::randn({B, H, n, dh}, 23, 0, 1, dtype);
    const Tensor packed = ops::attention_decode(q, k.contiguous(), v.contiguous());
    CHECK(same_bits(ops::attention_decode(q, k, v), packed));  // the same kernel on the same values
    CHECK(same_bits(ops::attention_decode(q, k, v.contiguous()), packed));  // head strides differ: both packed

    // (B, L, H, dh) seen as (B, H, L, dh): rows H * dh apart, so not a cache layout.
    const Tensor k_blhd = ops::permute(k.contiguous(), {0, 2, 1, 3}).contiguous();
    const Tensor v_blhd = ops::permute(v.contiguous(), {0, 2, 1, 3}).contiguous();
    CHECK(same_bits(
        ops::attention_decode(q, ops::permute(k_blhd, {0, 2, 1, 3}), ops::permute(v_blhd, {0, 2, 1, 3})), packed));
    // One head's keys and values shared by every head (stride 0 over H): packed, not read in place.
    const Tensor k1 = ops::narrow(k, 1, 0, 1), v1 = ops::narrow(v, 1, 0, 1);
    const Tensor shared = ops::attention_decode(q, ops::expand(k1, {B, H, L, dh}), ops::expand(v1, {B, H, L, dh}));
    const Tensor shared_packed = ops::attention_decode(q, ops::expand(k1, {B, H, L, dh}).contiguous(),
                                                       ops::expand(v1, {B, H, L, dh}).contiguous());
    CHECK(same_bits(shared, shared_packed));
    // A single head (B = H = 1) is read in place whatever its strides of size-1 dims say.
    const Tensor one = ops::attention_decode(ops::narrow(ops::narrow(q, 0, 1, 1), 1, 2, 1),
                                             ops::narrow(ops::narrow(k, 0, 1, 1), 1, 2, 1),
                                             ops::narrow(ops::narrow(v, 0, 1, 1), 1, 2, 1));
    CHECK(same_bits(one, ops::narrow(ops::narrow(packed, 0, 1, 1), 1, 2, 1).contiguous()));
  }
}

TEST_CASE("attention_decode of one position is that position's value row") {
  NoGradGuard no_grad;
  const Tensor q = Tensor::randn({2, 2, 1, 5}, 31, 0, 1, DType::F64);
  const Tensor k = Tensor::randn({2, 2, 1, 5}, 32, 0, 1, DType::F64);
  const Tensor v = Tensor::randn({2, 2, 1, 5}, 33, 0, 1, DType::F64);
  CHECK(same_bits(ops::attention_decode(q, k, v), v));
}

TEST_CASE("attention_decode: argument errors name the op and the shapes") {
  NoGradGuard no_grad;
  const Tensor q = Tensor::randn({1, 2, 3, 4}, 41, 0, 1);
  const Tensor kv = Tensor::randn({1, 2, 5, 4}, 42, 0, 1);
  CHECK_THROWS_WITH_AS(ops::attention_decode(q, kv, Tensor::randn({1, 2, 6, 4}, 43, 0, 1)),
                       doctest::Contains("attention_decode: q must be (B, H, n, dh) and k, v (B, H, L, dh); got q "
                                         "(1, 2, 3, 4), k (1, 2, 5, 4), v (1, 2, 6, 4)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::attention_decode(Tensor::randn({1, 3, 3, 4}, 44, 0, 1), kv, kv),
                       doctest::Contains("attention_decode: q must be"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::attention_decode(Tensor::randn({1, 2, 3, 5}, 45, 0, 1), kv, kv),
                       doctest::Contains("attention_decode: q must be"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::attention_decode(Tensor::randn({2, 3, 4}, 46, 0, 1), kv, kv),
                       doctest::Contains("attention_decode: q must be"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::attention_decode(Tensor::randn({1, 2, 6, 4}, 47, 0, 1), kv, kv),
                       doctest::Contains("attention_decode: needs 1 <= n <= L"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::attention_decode(Tensor::randn({1, 2, 0, 4}, 48, 0, 1), kv, kv),
                       doctest::Contains("attention_decode: needs 1 <= n <= L"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ops::attention_decode(q, kv.to(DType::F64), kv), doctest::Contains("attention_decode"),
                       std::invalid_argument);
}

TEST_CASE("attention_decode is for inference: it refuses to run where autograd would record it") {
  const Tensor q = Tensor::randn({1, 2, 1, 4}, 51, 0, 1);
  const Tensor k = Tensor::randn({1, 2, 5, 4}, 52, 0, 1);
  Tensor v = Tensor::randn({1, 2, 5, 4}, 53, 0, 1);
  v.set_requires_grad(true);
  REQUIRE(grad_enabled());
  CHECK_THROWS_WITH_AS(ops::attention_decode(q, k, v), doctest::Contains("attention_decode: is forward-only, for inference"),
                       std::invalid_argument);
  // Grad mode on but nothing requiring grad, or grad mode off: it runs, and records nothing.
  Tensor plain = ops::attention_decode(q, k, v.detach());
  CHECK_FALSE(plain.requires_grad());
  NoGradGuard no_grad;
  Tensor out = ops::attention_decode(q, k, v);
  CHECK_FALSE(out.requires_grad());
  CHECK(same_bits(out, plain));
}

}  // namespace
}  // namespace wedge
