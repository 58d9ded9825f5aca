// The small-m GEMM (kernels/cpu/gemv.h): every instruction set's column kernel this CPU can
// run (AVX-512 and AVX2, each called directly, not only the one sgemm_wedge picks) against
// the reference GEMM on awkward shapes -- every transpose, alpha, beta, padded leading
// dimensions, batches with strides and shared operands, the epilogue -- and bit for bit
// against the packed GEMM on the same instruction set's micro-kernel; a row's bits the same
// in a GEMM of 1 to 8 rows as in one of 20 (the packed path); the same bits on any number of
// threads; and, through the CPU table, that a GEMM of up to 8 rows packs nothing (a bf16 one
// too, where the AVX-512-BF16 micro-kernel would run it: the bf16 small-m kernel gives its
// bits; on AMX tiles it still packs), and OpenBLAS's one-row path (cblas_sgemv).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend_harness.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::harness {
namespace {

// Each instruction set's small-m kernel with the packed GEMM's micro-kernel whose bits it
// gives, and the precision of the products (the reference rounds the operands for BF16).
struct Tier {
  const cpu::SgemvKernel* gemv;
  const cpu::SgemmMicroKernel* packed;
  Precision precision = Precision::F32;
};
std::vector<Tier> gemv_tiers() {
  std::vector<Tier> tiers;
  if (avx512_available()) tiers.push_back({&cpu::sgemv_avx512_kernel(), &cpu::sgemm_avx512_microkernel()});
  if (avx512_available() && cpu::has_avx512_bf16()) {
    tiers.push_back({&cpu::sgemv_avx512bf16_kernel(), &cpu::bf16_avx512_microkernel(), Precision::BF16});
  } else {
    MESSAGE("this CPU has no AVX-512-BF16: the bf16 small-m kernel's tests skipped");
  }
  if (cpu::has_avx2()) {
    tiers.push_back({&cpu::sgemv_avx2_kernel(), &cpu::sgemm_avx2_microkernel()});
  } else {
    MESSAGE("this CPU has no AVX2: the AVX2 small-m kernel's tests skipped");
  }
  return tiers;
}

// The packed GEMM on one thread (more could split k), with the blocking sgemm_wedge uses.
void packed_gemm(const cpu::SgemmMicroKernel& mk, const GemmArgs<float>& g) {
  cpu::sgemm_packed(mk, cpu::default_blocking(mk), g, 1);
}

// How a shape is called: batch and padding (leading dimensions longer than the rows, and the
// matrices of a batch that far apart too), alpha and beta (beta 0: C starts as NaN, which
// must not leak), an operand shared by the batch (stride 0), the epilogue.
struct Variant {
  i64 batch = 1, pad = 0;
  float alpha = 1, beta = 0;
  bool broadcast_a = false, broadcast_b = false;
  bool bias = false, gelu = false;
  std::string name() const {
    return "batch " + std::to_string(batch) + " pad " + std::to_string(pad) + " alpha " + std::to_string(alpha) +
           " beta " + std::to_string(beta) + (broadcast_a ? " A shared" : "") + (broadcast_b ? " B shared" : "") +
           (bias ? " bias" : "") + (gelu ? " gelu" : "");
  }
};

struct Problem {
  GemmArgs<float> args;  // operand pointers set per run
  std::vector<float> a, b, c0, bias;
  bool gelu = false;
};

Problem make_problem(GemmShape sh, Trans ta, Trans tb, const Variant& v, std::uint64_t seed,
                     Precision precision = Precision::F32) {
  Problem p;
  const GemmLayout l = gemm_layout(ta, tb, sh, v.batch, v.pad);
  p.args = l.args;
  p.args.alpha = v.alpha;
  p.args.beta = v.beta;
  p.args.precision = precision;
  if (v.broadcast_a) p.args.stride_a = 0;
  if (v.broadcast_b) p.args.stride_b = 0;
  p.a = random_floats(std::size_t(std::max<i64>(1, l.a_size * (v.broadcast_a ? 1 : v.batch))), seed);
  p.b = random_floats(std::size_t(std::max<i64>(1, l.b_size * (v.broadcast_b ? 1 : v.batch))), seed + 1);
  const std::size_t c_count = std::size_t(l.c_size * v.batch);
  p.c0 = v.beta == 0.0f ? nans(c_count) : random_floats(c_count, seed + 2);
  if (v.bias) p.bias = random_floats(std::size_t(sh.n), seed + 3);
  p.gelu = v.gelu;
  if (v.gelu) p.args.act = Activation::Gelu;
  return p;
}

// C and (under GELU) aux after `gemm` on a fresh copy of the problem's C.
struct Outputs {
  std::vector<float> c, aux;
};
template <typename F>
Outputs outputs(const Problem& p, F&& gemm) {
  Outputs o{p.c0, p.gelu ? nans(p.c0.size()) : std::vector<float>{}};
  GemmArgs<float> g = p.args;
  g.a = p.a.data(), g.b = p.b.data(), g.c = o.c.data();
  g.bias = p.bias.empty() ? nullptr : p.bias.data();
  g.aux = p.gelu ? o.aux.data() : nullptr;
  gemm(g);
  return o;
}

Outputs reference(const Problem& p) {
  return outputs(p, [](const GemmArgs<float>& g) { ref_table_f32().gemm(g); });
}

// The harness's GEMM tolerances (backend_harness.cpp): float sums over k terms of size <= 1.
void expect_gemm_close(const Outputs& got, const Outputs& want, const Problem& p, const std::string& what) {
  const double k = double(p.args.k);
  if (p.gelu) {
    expect_close(got.aux, want.aux, 2e-6 + 1e-6 * k, 1e-5, what + " aux");
    expect_close(got.c, want.c, 3.4e-6 + 1.2e-6 * k, 2e-5, what + " C");
  } else {
    expect_close(got.c, want.c, (p.bias.empty() ? 1e-6 : 2e-6) + 1e-6 * k, 1e-5, what + " C");
  }
}

std::string shape_name(GemmShape sh, Trans ta, Trans tb) {
  return "m,n,k=" + std::to_string(sh.m) + "," + std::to_string(sh.n) + "," + std::to_string(sh.k) +
         " ta=" + std::to_string(int(ta)) + " tb=" + std::to_string(int(tb));
}

}  // namespace

TEST_CASE("cpu gemv: every instruction set's small-m kernel matches the reference, with the packed GEMM's bits") {
  const auto tiers = gemv_tiers();
  std::uint64_t seed = 1000;
  // k = 800: three of the fp32 GEMM's slices of k (384, 384, 32), two of the bf16 one's
  // (768, 32); odd k: a last pair of k with one value
  for (i64 m : {1, 2, 3, 5, 8})
    for (i64 n : {1, 7, 17, 33, 769})
      for (i64 k : {1, 5, 16, 31, 257, 800})
        for (Trans ta : {Trans::N, Trans::T})
          for (Trans tb : {Trans::N, Trans::T}) {
            const bool odd = (m + n + k) % 2 == 1;
            const Variant variants[] = {
                {},                                                  // plain, C NaN
                {3, 3, -0.7f, 0.5f, false, false, true, true},       // a batch, alpha, beta, bias + GELU
                {3, 5, 1.5f, 0.0f, !odd, odd, true, false},          // a shared operand, bias alone
                {1, 1, 2.0f, -1.0f, false, false, false, true},      // GELU without bias
                {2, 0, 1.0f, 1.0f, false, false, false, false},      // beta 1 (C += A B)
            };
            for (const Variant& v : variants) {
              const GemmShape sh{m, n, k};
              seed += 4;
              for (const Tier& tier : tiers) {
                const Problem p = make_problem(sh, ta, tb, v, seed, tier.precision);
                const Outputs want = reference(p);
                const std::string what =
                    std::string("gemv ") + tier.gemv->name + " " + shape_name(sh, ta, tb) + " " + v.name();
                const Outputs got = outputs(p, [&](const GemmArgs<float>& g) { cpu::sgemv(*tier.gemv, g, 2); });
                expect_gemm_close(got, want, p, what);
                const Outputs packed = outputs(p, [&](const GemmArgs<float>& g) { packed_gemm(*tier.packed, g); });
                CHECK_MESSAGE(bitwise_equal(got.c, packed.c), what << ": C differs from the packed GEMM's bits");
                CHECK_MESSAGE(bitwise_equal(got.aux, packed.aux), what << ": aux differs from the packed GEMM's bits");
              }
            }
          }
}

TEST_CASE("cpu gemv: k = 0 and alpha = 0 give beta C (zeros for beta 0), then the epilogue") {
  for (const Tier& tier : gemv_tiers())
    for (float beta : {0.0f, 0.5f, 1.0f})
      for (const GemmShape sh : {GemmShape{3, 21, 0}, GemmShape{5, 40, 17}}) {
        Variant v{2, 3, sh.k == 0 ? 1.0f : 0.0f, beta, false, false, true, true};
        const Problem p = make_problem(sh, Trans::N, Trans::T, v, 77, tier.precision);
        const std::string what =
            std::string("gemv ") + tier.gemv->name + " " + shape_name(sh, Trans::N, Trans::T) + " " + v.name();
        const Outputs got = outputs(p, [&](const GemmArgs<float>& g) { cpu::sgemv(*tier.gemv, g, 0); });
        expect_gemm_close(got, reference(p), p, what);
        const Outputs packed = outputs(p, [&](const GemmArgs<float>& g) { packed_gemm(*tier.packed, g); });
        CHECK_MESSAGE(bitwise_equal(got.c, packed.c), what);
        CHECK_MESSAGE(bitwise_equal(got.aux, packed.aux), what);
      }
}

TEST_CASE("cpu gemv: a row's bits do not depend on how many rows the GEMM has") {
  // Tokens routed to an expert make m depend on the data (SheafStateLM): the same row of A
  // must give the same bits in a GEMM of 1 to 8 rows (the small-m path) as in one of 20 (the
  // packed path), or later tokens could change earlier outputs.
  if (cpu::best_sgemv_kernel() == nullptr) {
    MESSAGE("this CPU has no AVX2: the reference GEMM runs, nothing to check");
    return;
  }
  const GemmBackend saved = gemm_backend();
  set_gemm_backend(GemmBackend::Wedge);
  // BF16 as well where the AVX-512-BF16 micro-kernel runs it (the bf16 small-m kernel).
  std::vector<Precision> precisions = {Precision::F32};
  if (bf16_path() == Bf16Path::Avx512Bf16) precisions.push_back(Precision::BF16);
  for (Precision precision : precisions)
  for (Trans ta : {Trans::N, Trans::T})
    for (Trans tb : {Trans::N, Trans::T})
      for (bool epilogue : {false, true}) {
        const GemmShape all{20, 77, 1601};  // three slices of either kc, the last one odd
        const Variant v{1, 2, 0.75f, epilogue ? 0.0f : 0.5f, false, false, epilogue, epilogue};
        const Problem p = make_problem(all, ta, tb, v, 55, precision);
        const Outputs whole = outputs(p, [](const GemmArgs<float>& g) { cpu_table_f32().gemm(g); });
        for (i64 first : {0, 5, 13})
          for (i64 rows : {1, 3, 7}) {
            // rows [first, first + rows) of the same product, as a GEMM of their own
            GemmArgs<float> g = p.args;
            g.m = rows;
            Outputs part{whole.c, whole.aux};  // C as the whole GEMM found it, then overwritten
            std::copy(p.c0.begin(), p.c0.end(), part.c.begin());
            const i64 a_offset = ta == Trans::N ? first * g.lda : first;
            g.a = p.a.data() + a_offset, g.b = p.b.data(), g.c = part.c.data() + first * g.ldc;
            g.bias = p.bias.empty() ? nullptr : p.bias.data();
            g.aux = p.gelu ? part.aux.data() + first * g.ldc : nullptr;
            cpu_table_f32().gemm(g);
            INFO(shape_name(all, ta, tb) << " rows " << first << ".." << first + rows << (epilogue ? " with epilogue" : "")
                                         << (precision == Precision::BF16 ? " bf16" : ""));
            const auto row_range = [&](const std::vector<float>& x) {
              return std::vector<float>(x.begin() + first * g.ldc, x.begin() + (first + rows) * g.ldc);
            };
            CHECK(bitwise_equal(row_range(part.c), row_range(whole.c)));
            if (p.gelu) CHECK(bitwise_equal(row_range(part.aux), row_range(whole.aux)));
          }
      }
  set_gemm_backend(saved);
}

TEST_CASE("cpu gemv: the same bits on 1, 2 and 3 threads") {
  for (const Tier& tier : gemv_tiers())
    for (i64 m : {1, 3, 8})
      for (Trans tb : {Trans::N, Trans::T})
        for (bool epilogue : {false, true}) {
          // 4099 columns over k = 257: hundreds of units of 16 columns, cut differently for
          // each thread count (and the batch dealt out across matrices).
          const GemmShape sh{m, 4099, 257};
          Variant v{3, 2, 0.9f, epilogue ? 0.0f : 0.5f, false, false, epilogue, epilogue};
          const Problem p = make_problem(sh, Trans::N, tb, v, 99, tier.precision);
          auto run = [&](int threads) {
            Outputs o;
            with_threads(threads, [&] {
              o = outputs(p, [&](const GemmArgs<float>& g) { cpu::sgemv(*tier.gemv, g, 0); });
            });
            return o;
          };
          INFO(tier.gemv->name << " " << shape_name(sh, Trans::N, tb) << " " << v.name());
          const Outputs one = run(1), two = run(2), three = run(3);
          CHECK(bitwise_equal(two.c, one.c));
          CHECK(bitwise_equal(three.c, one.c));
          CHECK(bitwise_equal(two.aux, one.aux));
          CHECK(bitwise_equal(three.aux, one.aux));
          // and the thread cap of sgemm_wedge's `threads` argument
          Outputs capped;
          with_threads(3, [&] {
            capped = outputs(p, [&](const GemmArgs<float>& g) { cpu::sgemv(*tier.gemv, g, 2); });
          });
          CHECK(bitwise_equal(capped.c, one.c));
        }
}

TEST_CASE("cpu gemv: through the CPU table a GEMM of up to 8 rows packs nothing, and runs the small-m kernel") {
  const cpu::SgemvKernel* tier = cpu::best_sgemv_kernel();
  if (tier == nullptr) {
    MESSAGE("this CPU has no AVX2: the reference GEMM runs, nothing to check");
    return;
  }
  const GemmBackend saved = gemm_backend();
  set_gemm_backend(GemmBackend::Wedge);
  for (Trans tb : {Trans::N, Trans::T})
    for (i64 m : {1, 8, 9}) {
      // The LM head's shape, x (m, 256) times E^T with E (30522, 256)... at a quarter of
      // the vocabulary; m = 9 is the packed GEMM again.
      const GemmShape sh{m, 7630, 256};
      const Variant v{1, 0, 1.0f, 0.0f, false, false, false, true};
      const Problem p = make_problem(sh, Trans::N, tb, v, 31);
      const i64 before = cpu::b_packings();
      const Outputs got = outputs(p, [](const GemmArgs<float>& g) { cpu_table_f32().gemm(g); });
      INFO(shape_name(sh, Trans::N, tb));
      if (m <= cpu::kGemvMaxRows) {
        CHECK(cpu::b_packings() == before);  // op(B) never packed
        const Outputs direct = outputs(p, [&](const GemmArgs<float>& g) { cpu::sgemv(*tier, g, 0); });
        CHECK(bitwise_equal(got.c, direct.c));
        CHECK(bitwise_equal(got.aux, direct.aux));
      } else {
        CHECK(cpu::b_packings() > before);  // the counter does see the packed GEMM
      }
      expect_gemm_close(got, reference(p), p, "cpu table gemm " + shape_name(sh, Trans::N, tb));
    }
  // Precision::BF16: the fp32 product where no bf16 micro-kernel runs, the bf16 small-m
  // kernel where the AVX-512-BF16 one would (both pack nothing), the packed path on AMX.
  for (const Bf16Path path : {Bf16Path::Fp32, Bf16Path::Avx512Bf16, bf16_path()}) {
    const Bf16Path saved_path = bf16_path();
    set_bf16_path(path);
    const GemmShape sh{1, 700, 256};
    const Variant v{1, 0, 1.0f, 0.0f, false, false, true, true};
    const Problem p = make_problem(sh, Trans::N, Trans::T, v, 41, Precision::BF16);
    const i64 before = cpu::b_packings();
    const Outputs got = outputs(p, [](const GemmArgs<float>& g) { cpu_table_f32().gemm(g); });
    INFO("bf16 path " << bf16_path_name(bf16_path()));
    if (bf16_path() == Bf16Path::Fp32) {
      CHECK(cpu::b_packings() == before);
      Problem fp32 = p;
      fp32.args.precision = Precision::F32;
      expect_gemm_close(got, reference(fp32), p, "cpu table gemm bf16 as fp32");
    } else if (bf16_path() == Bf16Path::Avx512Bf16) {
      CHECK(cpu::b_packings() == before);
      const Outputs direct = outputs(p, [](const GemmArgs<float>& g) { cpu::sgemv(cpu::sgemv_avx512bf16_kernel(), g, 0); });
      CHECK(bitwise_equal(got.c, direct.c));
      CHECK(bitwise_equal(got.aux, direct.aux));
      expect_gemm_close(got, reference(p), p, "cpu table gemm bf16 (small-m kernel)");
    } else {
      CHECK(cpu::b_packings() > before);
      expect_gemm_close(got, reference(p), p, "cpu table gemm bf16");
    }
    set_bf16_path(saved_path);
  }
  set_gemm_backend(saved);
}

TEST_CASE("cpu gemv: OpenBLAS's one-row path (cblas_sgemv) agrees with the reference") {
  const GemmBackend saved = gemm_backend();
  set_gemm_backend(GemmBackend::OpenBLAS);
  {
    HostMemory host;
    // every transpose, batches with shared operands, alpha and beta, NaN in C under beta 0,
    // and the epilogue pass after it
    run_gemm_checks(cpu_backend(host), {{1, 769, 257}, {1, 7, 5}, {1, 1, 1}, {1, 33, 31}});
  }
  set_gemm_backend(saved);
}

}  // namespace wedge::kernels::harness
