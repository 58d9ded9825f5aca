// Fused reference kernels against the same computation composed from simpler kernels,
// plus dropout statistics and two Adam steps worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/philox.h"
#include "kernels/tables.h"
#include "test_ref_helpers.h"

namespace wedge::kernels {
namespace {

using std::int32_t;
using testing::check_all_close;
using testing::random_vector;

TEST_CASE("ref attention_forward == gemm + causal mask + softmax + gemm") {
  const auto& k = ref_table_f64();
  const i64 BH = 3, L = 6, dh = 5;
  const double scale = 0.37;
  const auto q = random_vector(BH * L * dh, 1, -2, 2), kk = random_vector(BH * L * dh, 2, -2, 2),
             v = random_vector(BH * L * dh, 3);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    std::vector<double> out(BH * L * dh), lse(BH * L);
    k.attention_forward(q.data(), kk.data(), v.data(), BH, L, dh, scale, causal, out.data(),
                        lse.data());

    // S = scale * Q K^T for every head at once (batched gemm, K read transposed)
    std::vector<double> S(BH * L * L);
    GemmArgs<double> qk;
    qk.trans_b = Trans::T;
    qk.m = L, qk.n = L, qk.k = dh, qk.alpha = scale;
    qk.a = q.data(), qk.lda = dh, qk.stride_a = L * dh;
    qk.b = kk.data(), qk.ldb = dh, qk.stride_b = L * dh;
    qk.c = S.data(), qk.ldc = L, qk.stride_c = L * L;
    qk.batch = BH;
    k.gemm(qk);
    if (causal) {
      for (i64 h = 0; h < BH; ++h)
        for (i64 i = 0; i < L; ++i)
          for (i64 j = i + 1; j < L; ++j)
            S[(h * L + i) * L + j] = -std::numeric_limits<double>::infinity();
    }
    std::vector<double> Pm(S.size()), logP(S.size());
    k.softmax_forward(S.data(), Pm.data(), BH * L, L, false);
    k.softmax_forward(S.data(), logP.data(), BH * L, L, true);
    // O = P V
    std::vector<double> expected(BH * L * dh);
    GemmArgs<double> pv;
    pv.m = L, pv.n = dh, pv.k = L;
    pv.a = Pm.data(), pv.lda = L, pv.stride_a = L * L;
    pv.b = v.data(), pv.ldb = dh, pv.stride_b = L * dh;
    pv.c = expected.data(), pv.ldc = dh, pv.stride_c = L * dh;
    pv.batch = BH;
    k.gemm(pv);
    check_all_close(out, expected, 1e-14, 1e-12, "attention out");

    // log_softmax = S - lse, so lse = S[i, 0] - log_softmax[i, 0] (column 0 is never masked)
    std::vector<double> expected_lse(BH * L);
    for (i64 row = 0; row < BH * L; ++row) expected_lse[row] = S[row * L] - logP[row * L];
    check_all_close(lse, expected_lse, 1e-13, 1e-13, "attention lse");
  }
}

TEST_CASE("ref plucker_mean_forward == mean over the valid offsets of plucker_forward") {
  const auto& k = ref_table_f64();
  const i64 B = 2, L = 6, r = 5, P = 10;
  const std::vector<int32_t> offsets = {1, 2, 4, 8};  // 8 > L: never valid
  const i64 m = 4;
  const auto z = random_vector(B * L * r, 10);
  const double eps = 1e-6;
  std::vector<double> each(B * L * m * P), norms(B * L * m);
  k.plucker_forward(z.data(), B, L, r, offsets.data(), m, eps, each.data(), norms.data());
  std::vector<double> expected(B * L * P, 0.0);
  for (i64 bt = 0; bt < B * L; ++bt) {
    const i64 t = bt % L;
    int valid = 0;
    for (i64 j = 0; j < m; ++j) valid += t >= offsets[j];
    for (i64 j = 0; j < m; ++j) {
      if (t < offsets[j]) continue;
      for (i64 p = 0; p < P; ++p) expected[bt * P + p] += each[(bt * m + j) * P + p] / valid;
    }
  }
  std::vector<double> mean(B * L * P), mean_norms(B * L * m);
  k.plucker_mean_forward(z.data(), B, L, r, offsets.data(), m, eps, mean.data(), mean_norms.data());
  check_all_close(mean, expected, 1e-15, 1e-13, "plucker mean");
  check_all_close(mean_norms, norms, 0, 0, "plucker norms");
  for (i64 p = 0; p < P; ++p) CHECK(mean[p] == 0.0);  // b = 0, t = 0: no valid offset

  SUBCASE("plucker_mean_backward == plucker_backward with gout / |valid| on each offset") {
    const auto gmean = random_vector(B * L * P, 11);
    std::vector<double> gz_mean(B * L * r);
    k.plucker_mean_backward(z.data(), B, L, r, offsets.data(), m, eps, norms.data(), gmean.data(),
                            gz_mean.data());
    std::vector<double> gout(B * L * m * P, 0.0);
    for (i64 bt = 0; bt < B * L; ++bt) {
      const i64 t = bt % L;
      int valid = 0;
      for (i64 j = 0; j < m; ++j) valid += t >= offsets[j];
      for (i64 j = 0; j < m; ++j)
        for (i64 p = 0; p < P; ++p)
          gout[(bt * m + j) * P + p] = t >= offsets[j] ? gmean[bt * P + p] / valid : 0.0;
    }
    std::vector<double> gz(B * L * r);
    k.plucker_backward(z.data(), B, L, r, offsets.data(), m, eps, each.data(), norms.data(),
                       gout.data(), gz.data());
    check_all_close(gz_mean, gz, 1e-14, 1e-12, "plucker mean backward");
  }
}

TEST_CASE("ref cross-entropy loss == -mean(log_softmax[target]) over counted rows") {
  const auto& k = ref_table_f32();
  const i64 rows = 7, V = 33;
  const auto logits64 = random_vector(rows * V, 20, -4, 4);
  const std::vector<float> logits(logits64.begin(), logits64.end());
  const std::vector<int32_t> targets = {0, 32, 7, 3, 3, 11, 5};
  const int32_t ignore = 3;  // rows 3 and 4 are ignored
  std::vector<float> lse(rows), logp(rows * V);
  float loss = 0, count = 0;
  k.cross_entropy_forward(logits.data(), targets.data(), rows, V, ignore, lse.data(), &loss,
                          &count);
  k.softmax_forward(logits.data(), logp.data(), rows, V, true);
  double expected = 0;
  for (i64 r = 0; r < rows; ++r)
    if (targets[r] != ignore) expected -= logp[r * V + targets[r]];
  expected /= 5;
  CHECK(count == 5.0f);
  CHECK(loss == doctest::Approx(expected).epsilon(1e-6));
  for (i64 r = 0; r < rows; ++r)  // log_softmax = x - lse
    CHECK(lse[r] == doctest::Approx(logits[r * V] - logp[r * V]).epsilon(1e-6));
}

TEST_CASE("ref dropout keeps about 1 - p, scales by 1/(1-p), backward reuses the mask") {
  const auto& k = ref_table_f32();
  const i64 n = 100000;
  const std::vector<float> x(n, 2.0f);
  std::vector<float> y(n), gx(n);
  const std::uint64_t seed = 42, offset = 1000;
  for (float p : {0.1f, 0.5f, 0.9f}) {
    CAPTURE(p);
    k.dropout_forward(x.data(), y.data(), n, p, seed, offset);
    const std::vector<float> ones(n, 1.0f);
    k.dropout_backward(ones.data(), gx.data(), n, p, seed, offset);
    i64 kept = 0;
    bool values_ok = true, same_mask = true, mask_is_philox = true;
    for (i64 i = 0; i < n; ++i) {
      const bool keep = y[i] != 0.0f;
      kept += keep;
      if (keep && std::fabs(y[i] - 2.0f / (1.0f - p)) > 1e-5f) values_ok = false;
      if (keep != (gx[i] != 0.0f)) same_mask = false;
      if (keep != (philox_uniform(seed, offset + std::uint64_t(i)) >= p)) mask_is_philox = false;
    }
    // binomial(n, 1-p): standard deviation <= 0.0016 of n, so 0.01 is > 6 sigma
    CHECK(std::fabs(double(kept) / n - (1.0 - p)) < 0.01);
    CHECK(values_ok);
    CHECK(same_mask);
    CHECK(mask_is_philox);
  }
  SUBCASE("the mask of element i depends only on (seed, offset + i)") {
    std::vector<float> shifted(n - 5);
    k.dropout_forward(x.data(), shifted.data(), n - 5, 0.5f, seed, offset + 5);
    k.dropout_forward(x.data(), y.data(), n, 0.5f, seed, offset);
    bool match = true;
    for (i64 i = 0; i < n - 5; ++i) match = match && shifted[i] == y[i + 5];
    CHECK(match);
  }
  SUBCASE("p = 1 drops everything without dividing by zero; p = 0 is the identity") {
    k.dropout_forward(x.data(), y.data(), n, 1.0f, seed, offset);
    bool all_zero = true;
    for (float v : y) all_zero = all_zero && v == 0.0f;  // also rules out NaN/inf
    CHECK(all_zero);
    k.dropout_forward(x.data(), y.data(), n, 0.0f, seed, offset);
    CHECK(y == x);
  }
}

// Two steps from p = 1 with g = 0.5 then g = -0.5. The hyper-parameters are exact binary
// fractions (lr 0.5, b1 0.5, b2 0.75, eps 0.25, wd 0.125) so that AdamParams' floats hold
// them exactly and the arithmetic below is exact. By hand:
// AdamW
//   t=1: m = 0.25, v = 0.0625; bc1 = 0.5, bc2 = 0.25 -> mhat 0.5, sqrt(vhat) 0.5
//        p = 1 - 0.5 (0.5 / 0.75 + 0.125) = 29/48
//   t=2: m = 0.125 - 0.25 = -0.125, v = 0.046875 + 0.0625 = 0.109375
//        bc1 = 0.75, bc2 = 0.4375 -> mhat -1/6, sqrt(vhat) 0.5
//        p = 29/48 - 0.5 ((-1/6) / 0.75 + 0.125 * 29/48) = 1561/2304
// Adam with the decay as L2 (g += wd p first, no decoupled term)
//   t=1: g = 0.625, m = 0.3125, v = 0.09765625 -> mhat 0.625, sqrt(vhat) 0.625
//        p = 1 - 0.5 (0.625 / 0.875) = 9/14
//   t=2: g = -0.5 + 0.125 * 9/14 = -47/112, m = 0.15625 - 47/224 = -3/56,
//        v = 0.0732421875 + 0.25 (47/112)^2 = 0.117267219387755
//        mhat = -1/14, sqrt(vhat) = sqrt(0.117267219387755 / 0.4375) = 0.517725178...
//        p = 9/14 + 0.5 (1/14) / (0.517725178 + 0.25) = 0.689376765760852
TEST_CASE("ref adam_update: two steps against hand-computed values") {
  auto run = [](auto zero, bool decoupled) {
    using T = decltype(zero);
    T p = 1, m = 0, v = 0;
    AdamParams hp{0.5f, 0.5f, 0.75f, 0.25f, 0.125f, 0, 0, decoupled};
    std::vector<double> trace;
    const T grads[2] = {T(0.5), T(-0.5)};
    for (int t = 1; t <= 2; ++t) {
      hp.bc1 = float(1 - std::pow(0.5, t));
      hp.bc2 = float(1 - std::pow(0.75, t));
      const T g = grads[t - 1];
      // The gradient arrives doubled and grad_scale halves it again: the same update.
      const T g2 = T(2) * g;
      hp.grad_scale = 0.5f;
      const AdamSegment<T> seg{&p, &g2, &m, &v, 1};
      if constexpr (std::is_same_v<T, float>) {
        ref_table_f32().adam_update(hp, &seg, 1);
      } else {
        ref_table_f64().adam_update(hp, &seg, 1);
      }
      trace.insert(trace.end(), {double(p), double(m), double(v)});
    }
    return trace;
  };
  const std::vector<double> adamw = {29.0 / 48, 0.25, 0.0625, 1561.0 / 2304, -0.125, 0.109375};
  const std::vector<double> adam_l2 = {9.0 / 14,          0.3125,    0.09765625,
                                       0.689376765760852, -3.0 / 56, 0.117267219387755};
  check_all_close(run(0.0, true), adamw, 0, 1e-14, "AdamW, double");
  check_all_close(run(0.0f, true), adamw, 0, 1e-6, "AdamW, float");
  check_all_close(run(0.0, false), adam_l2, 0, 1e-14, "Adam + L2, double");
  check_all_close(run(0.0f, false), adam_l2, 0, 1e-6, "Adam + L2, float");

  SUBCASE("over n elements, each updated independently") {
    std::vector<double> p = {1, -2, 1}, g = {0.5, 0.5, -0.5}, m(3, 0), v(3, 0);
    AdamParams hp{0.5f, 0.5f, 0.75f, 0.25f, 0.125f, 0.5f, 0.25f, true};
    // As three one-element tensors and an empty one, in one call.
    const AdamSegment<double> segs[4] = {{p.data(), g.data(), m.data(), v.data(), 1},
                                         {p.data() + 1, g.data() + 1, m.data() + 1, v.data() + 1, 1},
                                         {nullptr, nullptr, nullptr, nullptr, 0},
                                         {p.data() + 2, g.data() + 2, m.data() + 2, v.data() + 2, 1}};
    ref_table_f64().adam_update(hp, segs, 4);
    // p = p0 - 0.5 (sign(g) 2/3 + 0.125 p0)
    check_all_close(
        p,
        std::vector<double>{29.0 / 48, -2 - 0.5 * (2.0 / 3 - 0.25), 1 - 0.5 * (-2.0 / 3 + 0.125)},
        1e-15, 0, "n = 3");
  }
}

}  // namespace
}  // namespace wedge::kernels
