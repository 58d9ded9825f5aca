// Mixed precision at the op level: under MatmulPrecisionGuard(BF16), matmul and linear
// multiply bf16-rounded operands (checked against sums of the rounded values), their
// backward runs in the precision of the forward, float64 ignores the setting, and the
// guard restores the previous precision. On a CPU without bf16 instructions a BF16 GEMM
// takes the documented fallback, the fp32 GEMM on the unrounded operands
// (kernels/cpu/cpu.h), and the tests expect exactly that there.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/precision.h"
#include "kernels/cpu/cpu.h"
#include "kernels/ref/bf16.h"
#include "ops/ops.h"

using namespace wedge;
using kernels::ref::bf16_round;

namespace {

std::vector<float> values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// What a BF16 GEMM reads of its operands on this CPU: bf16-rounded values, or the values
// themselves on the fp32 fallback.
bool cpu_rounds_to_bf16() { return kernels::bf16_path() != kernels::Bf16Path::Fp32; }

std::vector<float> rounded(std::vector<float> v) {
  if (!cpu_rounds_to_bf16()) return v;
  for (float& x : v) x = bf16_round(x);
  return v;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  CHECK_MESSAGE(worst <= tol, what << ": worst difference " << worst);
}

}  // namespace

TEST_CASE("matmul precision: the guard sets and restores the thread's precision; names parse") {
  CHECK(matmul_precision() == Precision::F32);
  {
    const MatmulPrecisionGuard bf16(Precision::BF16);
    CHECK(matmul_precision() == Precision::BF16);
    {
      const MatmulPrecisionGuard fp32(Precision::F32);
      CHECK(matmul_precision() == Precision::F32);
    }
    CHECK(matmul_precision() == Precision::BF16);
  }
  CHECK(matmul_precision() == Precision::F32);
  CHECK(parse_precision("bf16") == Precision::BF16);
  CHECK(std::string(precision_name(Precision::F32)) == "fp32");
  CHECK_THROWS_WITH_AS(parse_precision("fp16"), doctest::Contains("fp32 or bf16"), std::invalid_argument);
}

TEST_CASE("linear in bf16: the rounded operands' product, fp32 accumulation; the backward as the forward ran") {
  const std::int64_t rows = 13, in = 37, out = 19;
  const auto xv = values(std::size_t(rows * in), 1), wv = values(std::size_t(out * in), 2), bv = values(std::size_t(out), 3);
  const Tensor x = Tensor::from_vector(xv, {rows, in}).set_requires_grad();
  const Tensor w = Tensor::from_vector(wv, {out, in}).set_requires_grad();
  const Tensor b = Tensor::from_vector(bv, {out}).set_requires_grad();
  Tensor y;
  {
    const MatmulPrecisionGuard bf16(Precision::BF16);
    y = ops::linear(x, w, b);
  }
  // y = bf16(x) bf16(W)^T + b, in double
  const auto xr = rounded(xv), wr = rounded(wv);
  std::vector<double> want(std::size_t(rows * out));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = bv[std::size_t(o)];
      for (std::int64_t p = 0; p < in; ++p) s += double(xr[std::size_t(i * in + p)]) * wr[std::size_t(o * in + p)];
      want[std::size_t(i * out + o)] = s;
    }
  const auto got = y.to_vector<float>();
  check_close(got, want, 1e-5, "forward");
  // ... which the fp32 product is not
  const auto fp32 = ops::linear(x.detach(), w.detach(), b.detach()).to_vector<float>();
  double apart = 0;
  for (std::size_t i = 0; i < got.size(); ++i) apart = std::max(apart, std::fabs(double(got[i]) - fp32[i]));
  if (cpu_rounds_to_bf16()) {
    CHECK(apart > 1e-4);
  } else {
    MESSAGE("this CPU has no bf16 instructions: BF16 GEMMs run the fp32 fallback, checked as such");
    CHECK(apart == 0);
  }

  // The backward runs after the guard is gone, yet in bf16 like its forward: with
  // dY = 3 (exact in bf16), dX[i][p] = 3 sum_o bf16(W)[o][p], dW[o][p] = 3 sum_i bf16(x)[i][p].
  ops::mul_scalar(ops::sum(y), 3.0).backward();
  std::vector<double> gx(std::size_t(rows * in)), gw(std::size_t(out * in));
  for (std::int64_t p = 0; p < in; ++p) {
    double sw = 0, sx = 0;
    for (std::int64_t o = 0; o < out; ++o) sw += wr[std::size_t(o * in + p)];
    for (std::int64_t i = 0; i < rows; ++i) sx += xr[std::size_t(i * in + p)];
    for (std::int64_t i = 0; i < rows; ++i) gx[std::size_t(i * in + p)] = 3 * sw;
    for (std::int64_t o = 0; o < out; ++o) gw[std::size_t(o * in + p)] = 3 * sx;
  }
  check_close(x.grad().to_vector<float>(), gx, 1e-5, "dX");
  check_close(w.grad().to_vector<float>(), gw, 1e-5, "dW");
}

TEST_CASE("matmul in bf16 rounds both operands, batched too; float64 ignores the setting") {
  const std::int64_t batch = 3, m = 5, k = 33, n = 7;
  const auto av = values(std::size_t(batch * m * k), 4), bv = values(std::size_t(batch * k * n), 5);
  const MatmulPrecisionGuard bf16(Precision::BF16);
  const auto got = ops::matmul(Tensor::from_vector(av, {batch, m, k}), Tensor::from_vector(bv, {batch, k, n})).to_vector<float>();
  const auto ar = rounded(av), br = rounded(bv);
  std::vector<double> want(std::size_t(batch * m * n));
  for (std::int64_t q = 0; q < batch; ++q)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += double(ar[std::size_t((q * m + i) * k + p)]) * br[std::size_t((q * k + p) * n + j)];
        want[std::size_t((q * m + i) * n + j)] = s;
      }
  check_close(got, want, 1e-5, "batched");

  std::vector<double> ad(av.begin(), av.end()), bd(bv.begin(), bv.end());
  const auto exact = ops::matmul(Tensor::from_vector(ad, {batch, m, k}), Tensor::from_vector(bd, {batch, k, n})).to_vector<double>();
  for (std::int64_t q = 0; q < batch; ++q)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t p = 0; p < k; ++p) s += ad[std::size_t((q * m + i) * k + p)] * bd[std::size_t((q * k + p) * n + j)];
        CHECK(std::fabs(exact[std::size_t((q * m + i) * n + j)] - s) < 1e-12);
      }
}

TEST_CASE("matmul_flops counts 2 m n k per GEMM, forward and backward") {
  const Tensor x = Tensor::from_vector(values(13 * 37, 6), {13, 37}).set_requires_grad();
  const Tensor w = Tensor::from_vector(values(19 * 37, 7), {19, 37}).set_requires_grad();
  const std::uint64_t before = ops::matmul_flops();
  const Tensor y = ops::linear(x, w);
  CHECK(ops::matmul_flops() - before == 2u * 13 * 19 * 37);
  ops::sum(y).backward();  // dX (13 x 37 over 19) and dW (19 x 37 over 13)
  CHECK(ops::matmul_flops() - before == 3u * 2 * 13 * 19 * 37);
  const std::uint64_t mid = ops::matmul_flops();
  ops::matmul(Tensor::from_vector(values(2 * 3 * 4, 8), {2, 3, 4}), Tensor::from_vector(values(2 * 4 * 5, 9), {2, 4, 5}));
  CHECK(ops::matmul_flops() - mid == 2u * 2 * 3 * 4 * 5);
}
