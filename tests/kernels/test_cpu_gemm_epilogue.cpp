// The GEMM epilogue (bias + GELU fused into the packed GEMM, kernels/cpu/gemm.cpp) and its
// backward (bias_act_backward, kernels/cpu/gemm_epilogue_avx512.cpp) against the
// reference, on shapes that drive every path of the GEMM driver: one thread, rows
// streamed, rows blocked, columns split, k split, a batch spread over threads, tiny cache
// blocks, k = 0, both micro-kernels and the OpenBLAS backend (which finishes with a
// separate pass).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/tables.h"
#include "test_cpu_helpers.h"

namespace wedge::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;
using testing::with_threads;

struct EpilogueCase {
  i64 m, n, k;
  Trans tb = Trans::T;  // a linear layer's weight is (out, in): op(B) = W^T
  i64 batch = 1;
  float beta = 0.0f;
  bool bias = true;
  Activation act = Activation::Gelu;
};

std::string describe(const EpilogueCase& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + " batch " +
         std::to_string(c.batch) + " beta " + std::to_string(c.beta) + (c.bias ? " bias" : "") +
         (c.act == Activation::Gelu ? " gelu" : "");
}

using GemmFn = std::function<void(const GemmArgs<float>&)>;

// C (and aux under GELU) from `gemm` against the reference. The product's rounding is
// bounded as in test_cpu_gemm.cpp; GELU's slope is at most 1.13 and the vector erfc adds
// at most ~1e-7 relative, hence the tolerance.
void check_epilogue(const EpilogueCase& cs, const GemmFn& gemm) {
  INFO(describe(cs));
  const i64 ldc = cs.n + 3;  // padded: the padding must stay untouched
  const std::vector<float> a = random_floats(static_cast<std::size_t>(cs.batch * cs.m * cs.k), 1, -1.0f, 1.0f);
  const std::vector<float> b = random_floats(static_cast<std::size_t>(cs.batch * cs.k * cs.n), 2, -1.0f, 1.0f);
  const std::vector<float> bias = random_floats(static_cast<std::size_t>(cs.n), 3, -2.0f, 2.0f);
  std::vector<float> c0 = random_floats(static_cast<std::size_t>(cs.batch * cs.m * ldc), 4);
  if (cs.beta == 0.0f)
    for (float& x : c0) x = std::numeric_limits<float>::quiet_NaN();
  GemmArgs<float> g;
  g.trans_b = cs.tb;
  g.m = cs.m;
  g.n = cs.n;
  g.k = cs.k;
  g.beta = cs.beta;
  g.a = a.data();
  g.lda = std::max<i64>(cs.k, 1);
  g.stride_a = cs.m * cs.k;
  g.b = b.data();
  g.ldb = cs.tb == Trans::T ? std::max<i64>(cs.k, 1) : cs.n;
  g.stride_b = cs.k * cs.n;
  g.ldc = ldc;
  g.stride_c = cs.m * ldc;
  g.batch = cs.batch;
  g.bias = cs.bias ? bias.data() : nullptr;
  g.act = cs.act;
  std::vector<float> got = c0, want = c0, aux_got = c0, aux_want = c0;
  GemmArgs<float> mine = g, ref = g;
  mine.c = got.data();
  mine.aux = aux_got.data();
  ref.c = want.data();
  ref.aux = aux_want.data();
  gemm(mine);
  ref_table_f32().gemm(ref);
  const double tol = 1.2 * (cs.k + 2) * std::numeric_limits<float>::epsilon() * (cs.k + 3.0) + 1e-6;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool padding = static_cast<i64>(i) % ldc >= cs.n;
    bool ok;
    if (padding) {
      ok = std::memcmp(&got[i], &c0[i], sizeof(float)) == 0 &&
           (cs.act != Activation::Gelu || std::memcmp(&aux_got[i], &c0[i], sizeof(float)) == 0);
    } else {
      ok = std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i]));
      if (cs.act == Activation::Gelu) ok = ok && std::fabs(aux_got[i] - aux_want[i]) <= tol * (1 + std::fabs(aux_want[i]));
    }
    if (!ok && bad++ < 5) {
      INFO("element " << i << (padding ? " (padding)" : "") << ": C " << got[i] << " vs " << want[i] << ", aux "
                      << aux_got[i] << " vs " << aux_want[i]);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(bad == 0, bad << " element(s) wrong");
}

void wedge_gemm(const GemmArgs<float>& g) { sgemm_wedge(g); }

}  // namespace

TEST_CASE("cpu gemm epilogue: bias and bias+GELU on every path of the driver") {
  const std::vector<EpilogueCase> cases = {
      {1, 1, 1},            // one element
      {7, 33, 5},           // edge tiles in both directions
      {900, 257, 70},       // rows split, all columns in one B block (streamed A panels)
      {1000, 1000, 40},     // rows split, several B blocks
      {30, 1029, 66},       // columns split, shared A block
      {45, 70, 3500},       // small C over a long k: split k on two threads
      {35, 40, 64, Trans::T, 9},        // a batch spread over the threads
      {35, 40, 64, Trans::N, 3, 0.5f},  // beta = 1/2 reads C first
      {9, 21, 0},                       // k = 0: C = bias (+ GELU)
      {50, 70, 30, Trans::T, 1, 0.0f, false},                    // GELU without bias
      {50, 70, 30, Trans::T, 1, 0.0f, true, Activation::None},   // bias only
  };
  for (const EpilogueCase& c : cases) {
    for (int threads : {1, 2}) {
      INFO(threads << " thread(s)");
      with_threads(threads, [&] { check_epilogue(c, wedge_gemm); });
    }
  }
}

TEST_CASE("cpu gemm epilogue: tiny cache blocks, both micro-kernels") {
  std::vector<const cpu::SgemmMicroKernel*> kernels;
  if (cpu::has_avx512()) kernels.push_back(&cpu::sgemm_avx512_microkernel());
  if (cpu::has_avx2()) kernels.push_back(&cpu::sgemm_avx2_microkernel());
  for (const cpu::SgemmMicroKernel* mk : kernels) {
    INFO(mk->name);
    cpu::GemmBlocking blk{mk->mr * 2, 20, mk->nr * 2};
    for (int threads : {1, 2}) {
      auto run = [&](const GemmArgs<float>& g) { cpu::sgemm_packed(*mk, blk, g, threads); };
      check_epilogue({101, 150, 77}, run);
      check_epilogue({333, 5, 41, Trans::N, 1, 0.75f}, run);
      check_epilogue({3, 333, 41}, run);
    }
  }
}

TEST_CASE("cpu gemm epilogue: the OpenBLAS backend finishes with the same epilogue") {
  const GemmBackend saved = gemm_backend();
  set_gemm_backend(GemmBackend::OpenBLAS);
  check_epilogue({45, 77, 130}, cpu_table_f32().gemm);
  check_epilogue({20, 30, 40, Trans::N, 3, 1.0f}, cpu_table_f32().gemm);
  check_epilogue({9, 21, 0}, cpu_table_f32().gemm);
  set_gemm_backend(saved);
}

TEST_CASE("cpu bias_act_backward matches the reference and does not depend on the thread count") {
  if (!testing::avx512_available()) return;
  for (auto [rows, n] : {std::pair<i64, i64>{1, 1}, {7, 33}, {4096, 1024}, {130, 257}, {3, 129}, {0, 17}}) {
    for (Activation act : {Activation::None, Activation::Gelu}) {
      for (bool with_bias : {true, false}) {
        if (act == Activation::None && !with_bias) continue;  // nothing to do
        INFO(rows << "x" << n << (act == Activation::Gelu ? " gelu" : " none") << (with_bias ? " bias" : ""));
        const std::size_t size = static_cast<std::size_t>(rows * n);
        const std::vector<float> h = random_floats(size, 5, -4.0f, 4.0f), gy = random_floats(size, 6);
        std::vector<float> gh(size, -7.0f), gh_ref(size, -7.0f), gb(static_cast<std::size_t>(n), -7.0f),
            gb_ref = gb;
        float* gh_out = act == Activation::Gelu ? gh.data() : nullptr;
        cpu::avx512::bias_act_backward(act, h.data(), gy.data(), rows, n, gh_out, with_bias ? gb.data() : nullptr);
        ref_table_f32().bias_act_backward(act, h.data(), gy.data(), rows, n,
                                          act == Activation::Gelu ? gh_ref.data() : nullptr,
                                          with_bias ? gb_ref.data() : nullptr);
        expect_close(gh, gh_ref, 1e-6, 1e-5, "gh");
        // A column sum of `rows` terms of size <= ~1.1 each, added in float.
        expect_close(gb, gb_ref, 1e-6 * (static_cast<double>(rows) + 1), 1e-5, "gbias");
        if (act == Activation::Gelu && with_bias) {
          std::vector<float> gb1(static_cast<std::size_t>(n)), gb2 = gb1, gh1(size), gh2(size);
          with_threads(1, [&] { cpu::avx512::bias_act_backward(act, h.data(), gy.data(), rows, n, gh1.data(), gb1.data()); });
          with_threads(2, [&] { cpu::avx512::bias_act_backward(act, h.data(), gy.data(), rows, n, gh2.data(), gb2.data()); });
          CHECK(bitwise_equal(gb1, gb2));
          CHECK(bitwise_equal(gh1, gh2));
          // gh may alias gy.
          std::vector<float> inplace = gy;
          cpu::avx512::bias_act_backward(act, h.data(), inplace.data(), rows, n, inplace.data(), nullptr);
          CHECK(bitwise_equal(inplace, gh1));
        }
      }
    }
  }
}

}  // namespace wedge::kernels
