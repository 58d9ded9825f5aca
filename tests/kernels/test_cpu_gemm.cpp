// The optimized CPU GEMM (kernels/cpu) against the reference triple loop (kernels/ref):
// awkward shapes, every transpose case, alpha/beta (beta == 0 never reads C), padded
// leading dimensions, batches with broadcast operands, tiny cache blocks that put every
// block edge inside small matrices, both micro-kernels, and determinism across thread
// counts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/tables.h"

namespace wedge::kernels {
namespace {

struct Case {
  i64 m, n, k;
  Trans ta = Trans::N, tb = Trans::N;
  float alpha = 1.0f, beta = 0.0f;
  i64 pad = 0;  // extra elements per row of A, B and C (leading dimension > width)
  i64 batch = 1;
  bool broadcast_a = false, broadcast_b = false;  // stride 0 over the batch
};

std::string describe(const Case& c) {
  return std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
         (c.ta == Trans::T ? " T" : " N") + (c.tb == Trans::T ? "T" : "N") +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta) +
         " pad=" + std::to_string(c.pad) + " batch=" + std::to_string(c.batch) +
         (c.broadcast_a ? " bcastA" : "") + (c.broadcast_b ? " bcastB" : "");
}

// Operands and an initial C laid out as a Case describes.
struct Problem {
  Case c;
  std::vector<float> a, b, c0;
  GemmArgs<float> args;  // pointers filled by bind()

  explicit Problem(const Case& cs, std::uint64_t seed) : c(cs) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    args.trans_a = cs.ta;
    args.trans_b = cs.tb;
    args.m = cs.m;
    args.n = cs.n;
    args.k = cs.k;
    args.alpha = cs.alpha;
    args.beta = cs.beta;
    const i64 a_rows = cs.ta == Trans::N ? cs.m : cs.k, a_cols = cs.ta == Trans::N ? cs.k : cs.m;
    const i64 b_rows = cs.tb == Trans::N ? cs.k : cs.n, b_cols = cs.tb == Trans::N ? cs.n : cs.k;
    args.lda = a_cols + cs.pad;
    args.ldb = b_cols + cs.pad;
    args.ldc = cs.n + cs.pad;
    args.stride_a = cs.broadcast_a ? 0 : a_rows * args.lda;
    args.stride_b = cs.broadcast_b ? 0 : b_rows * args.ldb;
    args.stride_c = cs.m * args.ldc;
    args.batch = cs.batch;
    a.resize(static_cast<std::size_t>((cs.broadcast_a ? 1 : cs.batch) * a_rows * args.lda));
    b.resize(static_cast<std::size_t>((cs.broadcast_b ? 1 : cs.batch) * b_rows * args.ldb));
    c0.resize(static_cast<std::size_t>(cs.batch * args.stride_c));
    for (float& x : a) x = dist(gen);
    for (float& x : b) x = dist(gen);
    // beta == 0 promises C is never read: fill it with NaN so a read would show.
    for (float& x : c0) x = cs.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(gen);
  }

  GemmArgs<float> bind(std::vector<float>& out) const {
    GemmArgs<float> g = args;
    g.a = a.data();
    g.b = b.data();
    g.c = out.data();
    return g;
  }
};

// Runs `gemm` and the reference on the same problem and checks every element of C
// (padding included: it must be untouched) within the float error bound of a k-term dot
// product, (k + 2) eps (|alpha| sum |a||b| + |beta c0|), computed by the reference on
// absolute values.
template <typename Gemm>
void check_against_reference(const Case& cs, Gemm gemm, std::uint64_t seed = 7) {
  INFO(describe(cs));
  const Problem p(cs, seed);
  std::vector<float> got = p.c0, want = p.c0;
  gemm(p.bind(got));
  ref_table_f32().gemm(p.bind(want));

  Problem abs_p = p;
  for (float& x : abs_p.a) x = std::fabs(x);
  for (float& x : abs_p.b) x = std::fabs(x);
  std::vector<float> bound(p.c0.size());
  for (std::size_t i = 0; i < bound.size(); ++i)
    bound[i] = std::isnan(p.c0[i]) ? 0.0f : std::fabs(p.c0[i]);
  GemmArgs<float> gb = abs_p.bind(bound);
  gb.alpha = std::fabs(cs.alpha);
  gb.beta = std::fabs(cs.beta);
  ref_table_f32().gemm(gb);

  const double eps = std::numeric_limits<float>::epsilon();
  int bad = 0;
  for (i64 bi = 0; bi < cs.batch; ++bi) {
    for (i64 i = 0; i < cs.m; ++i) {
      for (i64 j = 0; j < cs.n + cs.pad; ++j) {
        const std::size_t at = static_cast<std::size_t>(bi * p.args.stride_c + i * p.args.ldc + j);
        const bool padding = j >= cs.n;
        const double g = got[at], w = want[at];
        bool ok;
        if (padding) {
          ok = std::memcmp(&got[at], &p.c0[at], sizeof(float)) == 0;
        } else {
          const double tol = (cs.k + 2) * eps * bound[at] + 1e-30;
          ok = std::isfinite(g) && std::fabs(g - w) <= tol;
        }
        if (!ok && bad++ < 5) {
          INFO("batch " << bi << " C[" << i << "," << j << "]" << (padding ? " (padding)" : "")
                        << ": got " << g << ", reference " << w);
          CHECK(ok);
        }
      }
    }
  }
  CHECK_MESSAGE(bad == 0, bad << " element(s) wrong");
}

std::vector<Case> with_all_transposes(Case base) {
  std::vector<Case> out;
  for (Trans ta : {Trans::N, Trans::T}) {
    for (Trans tb : {Trans::N, Trans::T}) {
      base.ta = ta;
      base.tb = tb;
      out.push_back(base);
    }
  }
  return out;
}

void gemm_wedge(const GemmArgs<float>& g) { sgemm_wedge(g); }

}  // namespace

TEST_CASE("cpu gemm: awkward shapes, all transposes, against the reference") {
  const i64 shapes[][3] = {{1, 1, 1},       {1, 7, 33},     {7, 1, 33},     {7, 7, 7},
                           {33, 33, 33},    {15, 31, 17},   {14, 32, 1},    {29, 65, 100},
                           {100, 129, 385}, {1037, 45, 70}, {13, 1029, 66}, {47, 39, 1100},
                           {130, 97, 413},  {3100, 9, 5},   {2, 500, 769}};
  for (const auto& s : shapes) {
    for (const Case& c : with_all_transposes({s[0], s[1], s[2]}))
      check_against_reference(c, gemm_wedge);
  }
}

TEST_CASE("cpu gemm: alpha, beta and padded leading dimensions") {
  struct AB {
    float alpha, beta;
  };
  for (AB ab : {AB{1, 0}, AB{0.5f, 0}, AB{1, 1}, AB{-1.5f, 0.25f}, AB{2, -1}}) {
    for (Case c : with_all_transposes({37, 70, 129})) {
      c.alpha = ab.alpha;
      c.beta = ab.beta;
      c.pad = 5;
      check_against_reference(c, gemm_wedge);
    }
  }
}

TEST_CASE("cpu gemm: alpha == 0 and k == 0 leave beta * C (zeros when beta == 0)") {
  for (float beta : {0.0f, 0.5f}) {
    Case c{9, 21, 0};
    c.beta = beta;
    c.pad = 3;
    check_against_reference(c, gemm_wedge);
    Case z{9, 21, 40};
    z.alpha = 0;
    z.beta = beta;
    check_against_reference(z, gemm_wedge);
  }
}

TEST_CASE("cpu gemm: batches, including stride-0 broadcast of A or B") {
  for (Case c : with_all_transposes({35, 40, 64})) {  // many small matrices: spread over threads
    c.batch = 9;
    check_against_reference(c, gemm_wedge);
    c.broadcast_a = true;
    check_against_reference(c, gemm_wedge);
    c.broadcast_a = false;
    c.broadcast_b = true;
    c.beta = 0.5f;
    check_against_reference(c, gemm_wedge);
  }
  Case big{700, 300, 90};  // matrices large enough to be split one after another
  big.batch = 3;
  big.broadcast_b = true;
  big.tb = Trans::T;
  check_against_reference(big, gemm_wedge);
}

TEST_CASE("cpu gemm: tiny cache blocks put every block edge inside the matrix") {
  // mc, kc, nc far below the defaults: several A blocks, k slices (beta applied once) and
  // B blocks per matrix, with edge panels in each.
  const cpu::GemmBlocking small{28, 20, 64};
  std::vector<const cpu::SgemmMicroKernel*> kernels;
  if (cpu::has_avx512()) kernels.push_back(&cpu::sgemm_avx512_microkernel());
  if (cpu::has_avx2()) kernels.push_back(&cpu::sgemm_avx2_microkernel());
  for (const cpu::SgemmMicroKernel* mk : kernels) {
    INFO(mk->name);
    cpu::GemmBlocking blk = small;
    blk.mc = mk->mr * 2;
    blk.nc = mk->nr * 2;
    for (int threads : {1, 2}) {
      auto run = [&](const GemmArgs<float>& g) { cpu::sgemm_packed(*mk, blk, g, threads); };
      for (Case c : with_all_transposes({101, 150, 77})) {
        c.beta = 0.75f;
        c.pad = 2;
        check_against_reference(c, run);
      }
      for (Case c : with_all_transposes({3, 333, 41})) check_against_reference(c, run);
      for (Case c : with_all_transposes({333, 5, 41})) check_against_reference(c, run);
    }
  }
}

TEST_CASE("cpu gemm: the AVX2 micro-kernel with default blocking") {
  if (!cpu::has_avx2()) return;
  const cpu::SgemmMicroKernel& mk = cpu::sgemm_avx2_microkernel();
  auto run = [&](const GemmArgs<float>& g) { cpu::sgemm_packed(mk, cpu::default_blocking(mk), g); };
  for (Case c : with_all_transposes({61, 47, 390})) {
    c.alpha = 0.5f;
    c.beta = 0.0f;
    c.pad = 1;
    check_against_reference(c, run);
  }
}

TEST_CASE("cpu gemm: bit-identical results across runs and thread counts") {
  for (Case c : {Case{1000, 200, 500, Trans::N, Trans::T}, Case{64, 900, 800, Trans::T, Trans::N},
                 Case{300, 300, 64, Trans::N, Trans::N, 1, 0, 0, 6}}) {
    INFO(describe(c));
    const Problem p(c, 11);
    std::vector<float> one = p.c0, two = p.c0, again = p.c0;
    sgemm_wedge(p.bind(one), 1);
    sgemm_wedge(p.bind(two), 2);
    sgemm_wedge(p.bind(again), 2);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(two.data(), again.data(), two.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cpu gemm: small C over a long k (split over k when threaded)") {
  // k >= 4 slices per thread with a C of a few thousand elements takes the split-k path
  // on two or more threads: check it against the reference and run to run.
  for (Case c : with_all_transposes({45, 70, 3500})) {
    c.beta = 0.5f;
    check_against_reference(c, [](const GemmArgs<float>& g) { sgemm_wedge(g, 2); });
    c.beta = 0.0f;
    check_against_reference(c, [](const GemmArgs<float>& g) { sgemm_wedge(g, 3); });
  }
  const Problem p(Case{40, 33, 5000, Trans::T, Trans::N, 1.5f, 0.25f}, 13);
  std::vector<float> first = p.c0, second = p.c0;
  sgemm_wedge(p.bind(first), 2);
  sgemm_wedge(p.bind(second), 2);
  CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
}

TEST_CASE("cpu gemm: the table entry follows the backend switch; OpenBLAS agrees") {
  const GemmBackend saved = gemm_backend();
  set_gemm_backend(GemmBackend::OpenBLAS);
  CHECK(std::string(cpu_backend_name()).find("openblas") != std::string::npos);
  for (Case c : with_all_transposes({45, 77, 130})) {
    c.beta = 0.0f;  // NaN-filled C must not leak through OpenBLAS either
    check_against_reference(c, cpu_table_f32().gemm);
  }
  Case batched{20, 30, 40};
  batched.batch = 3;
  batched.broadcast_a = true;
  batched.beta = 1.0f;
  check_against_reference(batched, cpu_table_f32().gemm);

  set_gemm_backend(GemmBackend::Wedge);
  CHECK(std::string(cpu_backend_name()).find("wedge") != std::string::npos);
  check_against_reference(batched, cpu_table_f32().gemm);
  set_gemm_backend(saved);

  CHECK(parse_gemm_backend("OpenBLAS") == GemmBackend::OpenBLAS);
  CHECK(parse_gemm_backend("wedge") == GemmBackend::Wedge);
  CHECK_THROWS_AS(parse_gemm_backend("mkl"), std::invalid_argument);
}

TEST_CASE("cpu gemm: the float64 table (OpenBLAS dgemm) against the reference") {
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (Trans ta : {Trans::N, Trans::T}) {
    for (Trans tb : {Trans::N, Trans::T}) {
      const i64 m = 17, n = 23, k = 31, batch = 2;
      std::vector<double> a(batch * m * k), b(k * n), c1(batch * m * n, std::nan("")), c2 = c1;
      for (double& x : a) x = dist(gen);
      for (double& x : b) x = dist(gen);
      GemmArgs<double> g;
      g.trans_a = ta;
      g.trans_b = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.alpha = 1.5;
      g.beta = 0;
      g.a = a.data();
      g.lda = ta == Trans::N ? k : m;
      g.stride_a = m * k;
      g.b = b.data();
      g.ldb = tb == Trans::N ? n : k;
      g.stride_b = 0;
      g.c = c1.data();
      g.ldc = n;
      g.stride_c = m * n;
      g.batch = batch;
      cpu_table_f64().gemm(g);
      g.c = c2.data();
      ref_table_f64().gemm(g);
      for (std::size_t i = 0; i < c1.size(); ++i)
        REQUIRE(c1[i] == doctest::Approx(c2[i]).epsilon(1e-12));
    }
  }
}

}  // namespace wedge::kernels
