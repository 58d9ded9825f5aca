// What the CPU backend promises beyond matching the reference, which the backend harness
// checks on every kernel (backend_harness.cpp): the same bits whatever the thread count,
// its AVX-512 kernels installed where the CPU has them (the reference where it does not),
// sums in the reference's order, in-place use, and the GEMM's own machinery: both
// micro-kernels (AVX-512, and AVX2 as the fallback), cache blockings that put every block
// edge inside small matrices, the thread counts that pick each path of the driver, and
// the OpenBLAS backend.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend_harness.h"
#include "engine/device.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::harness {
namespace {

// The case list's call of a kernel on its representative shape, on the CPU table with
// `threads` threads: every output's bytes.
std::vector<std::vector<std::uint8_t>> cpu_outputs(const KernelCase& c, int threads) {
  std::vector<std::vector<std::uint8_t>> out;
  with_threads(threads, [&] {
    // the engine's CPU allocator: its cached blocks spare the runs after the first the
    // page faults of fresh memory
    Call call(cpu_table_f32(), cpu_memory_table(), allocator_for(Device::cpu()));
    c.prepare(call);
    call.run();
    out = call.outputs();
  });
  return out;
}

}  // namespace

TEST_CASE("cpu kernels give the same bits on 1, 2 and 3 threads") {
  const std::size_t in_use = allocator_for(Device::cpu()).bytes_in_use();
  for (const KernelCase& c : kernel_cases) {
    INFO(kernel_name(c.kernel) << " on " << c.shape);
    const auto one = cpu_outputs(c, 1);
    CHECK_FALSE(one.empty());
    CHECK(cpu_outputs(c, 2) == one);
    CHECK(cpu_outputs(c, 3) == one);
  }
  CHECK(allocator_for(Device::cpu()).bytes_in_use() == in_use);
}

TEST_CASE("cpu table: the entries engine/kernels.def marks simd are the kernels of the best instruction set the CPU has") {
  const KernelTable<float>& t = cpu_table_f32();
  const KernelTable<float>& r = ref_table_f32();
  const bool avx512 = avx512_available();  // without: the reference, checked the same way
  const bool avx2 = !avx512 && cpu::has_avx2();
  int optimized = 0;
  // (bool: doctest cannot print function pointers)
#define WEDGE_CPU_EXPECT_ref(name) CHECK_MESSAGE(bool(t.name == r.name), #name " is not the reference's");
#define WEDGE_CPU_EXPECT_own(name) \
  CHECK_MESSAGE(bool(t.name == &cpu::sgemm_selected), #name " is not the selected GEMM");
#define WEDGE_CPU_EXPECT_simd(name)                                                          \
  ++optimized;                                                                               \
  CHECK_MESSAGE(bool(t.name == (avx512 ? &cpu::avx512::name : avx2 ? &cpu::avx2::name : r.name)), \
                #name " is not the kernel for this CPU");
#define WEDGE_KERNEL(name, cpu, params) WEDGE_CPU_EXPECT_##cpu(name)
#include "engine/kernels.def"
#undef WEDGE_KERNEL
#undef WEDGE_CPU_EXPECT_simd
#undef WEDGE_CPU_EXPECT_own
#undef WEDGE_CPU_EXPECT_ref
  CHECK(optimized > 10);
}

namespace {

// One SIMD tier of the CPU table: the reference with the kernels of one instruction set
// written over the entries engine/kernels.def gives that set, and the list of those
// entries. The GEMM is the CPU table's own (its micro-kernels are checked below).
struct CpuTier {
  const char* name;
  KernelTable<float> table;
  std::vector<KernelId> kernels;
};

// The tiers this CPU can execute, each table built in one pass over the kernel list.
std::vector<CpuTier> executable_tiers() {
  CpuTier avx2{"avx2", ref_table_f32(), {}}, avx512{"avx512", ref_table_f32(), {}};
#define WEDGE_CPU_TIER_ref(name)
#define WEDGE_CPU_TIER_own(name)
#define WEDGE_CPU_TIER_simd(name)              \
  avx2.table.name = &cpu::avx2::name;          \
  avx512.table.name = &cpu::avx512::name;      \
  avx2.kernels.push_back(KernelId::name);      \
  avx512.kernels.push_back(KernelId::name);
#define WEDGE_KERNEL(name, cpu, params) WEDGE_CPU_TIER_##cpu(name)
#include "engine/kernels.def"
#undef WEDGE_KERNEL
#undef WEDGE_CPU_TIER_simd
#undef WEDGE_CPU_TIER_own
#undef WEDGE_CPU_TIER_ref
  avx2.table.gemm = avx512.table.gemm = cpu_table_f32().gemm;
  std::vector<CpuTier> tiers;
  if (cpu::has_avx2()) tiers.push_back(std::move(avx2));
  else MESSAGE("this CPU has no AVX2: the AVX2 kernels' tests skipped");
  if (cpu::has_avx512()) tiers.push_back(std::move(avx512));
  else MESSAGE("this CPU has no AVX-512: the AVX-512 kernels' tests skipped");
  return tiers;
}

}  // namespace

// Every tier the CPU can execute is checked here, not only the one the CPU table picks:
// on a CPU with AVX-512 the AVX2 kernels would otherwise run only on other machines. (The
// bf16 GEMM paths, AVX-512-BF16 and AMX, are checked tier by tier in test_cpu_bf16.cpp.)
// With WEDGE_TIER_DIGESTS=FILE the outputs of each tier's kernels are fingerprinted
// (OutputDigests) and written to FILE, one "tier kernel digest" line each: a rewrite of a
// kernel's source that must not change its results is checked by comparing two such files.
TEST_CASE("cpu: every SIMD tier this CPU can execute matches the reference on awkward shapes") {
  const std::vector<CpuTier> tiers = executable_tiers();
  const char* digest_file = std::getenv("WEDGE_TIER_DIGESTS");
  std::ostringstream digests;
  for (const CpuTier& tier : tiers) {
    CHECK(tier.kernels.size() > 10);
    OutputDigests d;
    record_outputs(&d);
    HostMemory host;
    run_kernel_checks(Backend<float>{std::string("CPU (") + tier.name + " kernels)", Family::cpu, &tier.table,
                                     &cpu_memory_table(), &host, Sizes::large},
                      tier.kernels);
    record_outputs(nullptr);
    for (const auto& [kernel, digest] : d.by_kernel) {
      digests << tier.name << " " << kernel << " " << std::hex << std::setw(16) << std::setfill('0') << digest
              << std::dec << "\n";
    }
  }
  if (digest_file != nullptr) {
    std::ofstream out(digest_file);
    out << digests.str();
    REQUIRE_MESSAGE(out.good(), "WEDGE_TIER_DIGESTS: cannot write " << digest_file);
  }
}

TEST_CASE("cpu axis sums equal the reference bit for bit (the same order of additions)") {
  if (!avx512_available()) return;
  struct Shape { i64 outer, n, inner; };
  for (const Shape& s : {Shape{1, 4096, 256}, {3, 7, 9}, {1, 1, 33}, {2, 1000, 17}, {5, 3, 1}, {1, 77, 8}}) {
    INFO(s.outer << "x" << s.n << "x" << s.inner);
    const auto x = random_floats(std::size_t(s.outer * s.n * s.inner), 3, -2.0f, 2.0f);
    std::vector<float> want(std::size_t(s.outer * s.inner)), got = nans(want.size());
    ref_table_f32().reduce(ReduceOp::Sum, x.data(), want.data(), nullptr, s.outer, s.n, s.inner);
    cpu_table_f32().reduce(ReduceOp::Sum, x.data(), got.data(), nullptr, s.outer, s.n, s.inner);
    CHECK(bitwise_equal(got, want));
  }
}

TEST_CASE("cpu softmax and cross-entropy backward may write over their input") {
  if (!avx512_available() && !cpu::has_avx2()) return;  // the reference's own check covers it
  const KernelTable<float>& t = cpu_table_f32();
  struct Shape { i64 rows, n; };
  for (const Shape& s : {Shape{3, 7}, {65, 129}, {2, 30522}}) {
    INFO(s.rows << "x" << s.n);
    const std::size_t size = std::size_t(s.rows * s.n);
    const auto x = random_floats(size, 5, -6.0f, 6.0f);
    for (bool log : {false, true}) {
      std::vector<float> y(size), inplace = x;
      t.softmax_forward(x.data(), y.data(), s.rows, s.n, log);
      t.softmax_forward(inplace.data(), inplace.data(), s.rows, s.n, log);
      CHECK(bitwise_equal(inplace, y));
    }
    std::vector<std::int32_t> targets(std::size_t(s.rows));
    for (i64 r = 0; r < s.rows; ++r) targets[std::size_t(r)] = std::int32_t((r * 7919) % s.n);
    std::vector<float> lse(std::size_t(s.rows)), g(size), inplace = x;
    float loss = 0, count = 0;
    const float gloss = 0.75f;
    t.cross_entropy_forward(x.data(), targets.data(), s.rows, s.n, -100, lse.data(), &loss, &count);
    t.cross_entropy_backward(x.data(), targets.data(), lse.data(), &count, &gloss, s.rows, s.n, -100, g.data());
    t.cross_entropy_backward(inplace.data(), targets.data(), lse.data(), &count, &gloss, s.rows, s.n, -100,
                             inplace.data());
    CHECK(bitwise_equal(inplace, g));
  }
}

// ---- the GEMM's machinery -------------------------------------------------------------------

namespace {

// One way through the CPU GEMM: a micro-kernel with a cache blocking (null: wedge's GEMM as
// the table calls it), on `threads` threads (0: the pool's).
struct GemmPath {
  const cpu::SgemmMicroKernel* mk;
  cpu::GemmBlocking blocking;
  int threads;
};
GemmPath g_path;

void path_gemm(const GemmArgs<float>& g) {
  if (g_path.mk == nullptr) {
    sgemm_wedge(g, g_path.threads);
  } else {
    cpu::sgemm_packed(*g_path.mk, g_path.blocking, g, g_path.threads);
  }
}

// The harness's GEMM checks (plain and with the epilogue) on `shapes`, through `path`.
void check_gemm_path(const GemmPath& path, const std::vector<GemmShape>& shapes, const std::string& name) {
  g_path = path;
  KernelTable<float> table = cpu_table_f32();
  table.gemm = path_gemm;
  HostMemory host;
  run_gemm_checks(Backend<float>{name, Family::cpu, &table, &cpu_memory_table(), &host, Sizes::large}, shapes);
  CHECK(host.bytes_in_use() == 0);
}

// C (and, with the epilogue, aux after it) of the product `g` on a, b through the packed
// driver: C starts as c0; beta 0.5 without the epilogue, bias and GELU with it (beta 0).
std::vector<float> packed_product(const cpu::SgemmMicroKernel& mk, const cpu::GemmBlocking& blk, GemmArgs<float> g,
                                  const float* a, const float* b, const std::vector<float>& c0,
                                  const std::vector<float>& bias, bool epilogue, int threads) {
  std::vector<float> out = c0, aux(out.size(), 0.0f);
  g.beta = epilogue ? 0.0f : 0.5f;
  g.a = a, g.b = b, g.c = out.data();
  if (epilogue) g.bias = bias.data(), g.act = Activation::Gelu, g.aux = aux.data();
  cpu::sgemm_packed(mk, blk, g, threads);
  out.insert(out.end(), aux.begin(), aux.end());
  return out;
}

std::vector<const cpu::SgemmMicroKernel*> micro_kernels() {
  std::vector<const cpu::SgemmMicroKernel*> kernels;
  if (avx512_available()) kernels.push_back(&cpu::sgemm_avx512_microkernel());
  if (cpu::has_avx2()) {
    kernels.push_back(&cpu::sgemm_avx2_microkernel());
  } else {
    MESSAGE("this CPU has no AVX2: the AVX2 micro-kernel's tests skipped");
  }
  return kernels;
}

}  // namespace

TEST_CASE("cpu gemm: tiny cache blocks put every block edge inside the matrix, both micro-kernels") {
  // mc, kc, nc far below the defaults: several A blocks, k slices (beta applied once) and
  // B blocks per matrix, with edge panels in each.
  for (const cpu::SgemmMicroKernel* mk : micro_kernels()) {
    for (int threads : {1, 2}) {
      check_gemm_path({mk, {mk->mr * 2, 20, mk->nr * 2}, threads}, {{101, 150, 77}, {3, 333, 41}, {333, 5, 41}},
                      std::string("cpu gemm ") + mk->name + ", tiny blocks, " + std::to_string(threads) + " thread(s)");
    }
  }
}

TEST_CASE("cpu gemm: the AVX2 micro-kernel with its default blocking, the fallback without AVX-512") {
  if (!cpu::has_avx2()) {
    MESSAGE("this CPU has no AVX2: skipped");
    return;
  }
  const cpu::SgemmMicroKernel& mk = cpu::sgemm_avx2_microkernel();
  check_gemm_path({&mk, cpu::default_blocking(mk), 0}, {{61, 47, 390}, {30, 1029, 66}}, "cpu gemm avx2");
}

TEST_CASE("cpu gemm: one thread, and three threads splitting k") {
  // The harness runs the pool's thread count; these are the driver's other paths: one
  // thread, and a small C over a long k split three ways.
  for (int threads : {1, 3}) {
    check_gemm_path({nullptr, {}, threads}, {{30, 1029, 66}, {45, 70, 3500}},
                    "cpu gemm, " + std::to_string(threads) + " thread(s)");
  }
}

TEST_CASE("cpu gemm: bit-identical results across runs and thread counts") {
  struct Case { GemmShape shape; Trans ta, tb; i64 batch; float alpha, beta; bool same_threads_only; };
  // The last one splits k on two threads: the same bits run to run, though not across
  // thread counts (the split depends on them).
  for (const Case& c : {Case{{1000, 200, 500}, Trans::N, Trans::T, 1, 1.0f, 0.0f, false},
                        Case{{64, 900, 800}, Trans::T, Trans::N, 1, 1.0f, 0.0f, false},
                        Case{{300, 300, 64}, Trans::N, Trans::N, 6, 1.0f, 0.0f, false},
                        Case{{40, 33, 5000}, Trans::T, Trans::N, 1, 1.5f, 0.25f, true}}) {
    INFO(c.shape.m << "x" << c.shape.n << "x" << c.shape.k << " batch " << c.batch);
    const GemmLayout l = gemm_layout(c.ta, c.tb, c.shape, c.batch, 0);
    const auto a = random_floats(std::size_t(l.a_size * c.batch), 11);
    const auto b = random_floats(std::size_t(l.b_size * c.batch), 12);
    const auto c0 = random_floats(std::size_t(l.c_size * c.batch), 13);
    auto run = [&](int threads) {
      std::vector<float> out = c0;
      GemmArgs<float> g = l.args;
      g.alpha = c.alpha, g.beta = c.beta;
      g.a = a.data(), g.b = b.data(), g.c = out.data();
      sgemm_wedge(g, threads);
      return out;
    };
    const auto two = run(2);
    CHECK(bitwise_equal(run(2), two));
    if (!c.same_threads_only) CHECK(bitwise_equal(run(1), two));
  }
}

TEST_CASE("cpu gemm: B packed once up front gives the bits of B packed block by block") {
  // Shapes and thread counts that take each path of the driver that packs all of op(B)
  // once: one thread over several blocks of rows, threads splitting rows (each would pack
  // B itself; with every column in one B block and op(A) contiguous in k the rows are
  // streamed), threads splitting columns over several blocks of rows, and a batch sharing
  // one B.
  struct Case { GemmShape shape; i64 batch; bool shared_b; int threads; };
  const Case cases[] = {{{101, 150, 77}, 1, false, 1},  {{333, 47, 41}, 1, false, 2}, {{333, 150, 77}, 1, false, 2},
                        {{101, 333, 41}, 1, false, 3},  {{101, 333, 41}, 1, false, 2}, {{37, 70, 50}, 5, true, 2},
                        {{37, 70, 50}, 2, true, 1},     {{130, 61, 100}, 1, false, 2}};
  for (const cpu::SgemmMicroKernel* mk : micro_kernels()) {
    // Blocks small enough to cut these shapes into several blocks of rows, k slices and B blocks.
    cpu::GemmBlocking once{mk->mr * 4, 24, mk->nr * 3};
    cpu::GemmBlocking per_block = once;
    per_block.pack_b_once = false;
    for (const Case& c : cases)
      for (Trans ta : {Trans::N, Trans::T})
        for (Trans tb : {Trans::N, Trans::T})
          for (bool epilogue : {false, true}) {
            INFO(mk->name << " " << c.shape.m << "x" << c.shape.n << "x" << c.shape.k << " batch " << c.batch
                          << (c.shared_b ? " (one B)" : "") << " threads " << c.threads << " trans "
                          << int(ta) << int(tb) << (epilogue ? " with bias and GELU" : ""));
            GemmLayout l = gemm_layout(ta, tb, c.shape, c.batch, 3);
            if (c.shared_b) l.args.stride_b = 0;
            const auto a = random_floats(std::size_t(l.a_size * c.batch), 21);
            const auto b = random_floats(std::size_t(l.b_size * c.batch), 22);
            const auto bias = random_floats(std::size_t(c.shape.n), 23);
            const auto c0 = random_floats(std::size_t(l.c_size * c.batch), 24);
            auto run = [&](const cpu::GemmBlocking& blk) {
              return packed_product(*mk, blk, l.args, a.data(), b.data(), c0, bias, epilogue, c.threads);
            };
            const i64 before = cpu::whole_b_packings();
            const auto packed_once = run(once);
            CHECK(cpu::whole_b_packings() > before);  // the path under test ran
            const i64 after = cpu::whole_b_packings();
            CHECK(bitwise_equal(run(per_block), packed_once));
            CHECK(cpu::whole_b_packings() == after);
          }
  }
  // One thread, every column in one B block, several blocks of rows: op(A) = A^T goes
  // block by block (it is not streamed), so B is packed once up front for all the blocks.
  for (const cpu::SgemmMicroKernel* mk : micro_kernels()) {
    const GemmShape shape{333, std::min<i64>(47, mk->nr * 3), 41};
    const GemmLayout l = gemm_layout(Trans::T, Trans::N, shape, 1, 1);
    const auto a = random_floats(std::size_t(l.a_size), 25), b = random_floats(std::size_t(l.b_size), 26);
    const auto bias = random_floats(std::size_t(shape.n), 27), c0 = random_floats(std::size_t(l.c_size), 28);
    cpu::GemmBlocking once{mk->mr * 4, 24, mk->nr * 3};
    cpu::GemmBlocking per_block = once;
    per_block.pack_b_once = false;
    INFO(mk->name);
    const i64 before = cpu::whole_b_packings();
    const auto packed_once = packed_product(*mk, once, l.args, a.data(), b.data(), c0, bias, false, 1);
    CHECK(cpu::whole_b_packings() == before + 1);
    CHECK(bitwise_equal(packed_product(*mk, per_block, l.args, a.data(), b.data(), c0, bias, false, 1), packed_once));
  }
  // B packed once in a single block of rows per thread, or with every column in one B block
  // and op(A) streamed on one thread, would gain nothing: the driver packs as before.
  const cpu::SgemmMicroKernel& mk = *micro_kernels().front();
  for (GemmShape shape : {GemmShape{20, 50, 30}, GemmShape{1000, 20, 30}}) {
    const GemmLayout l = gemm_layout(Trans::N, Trans::N, shape, 1, 0);
    std::vector<float> a(std::size_t(l.a_size), 1.0f), b(std::size_t(l.b_size), 1.0f), out(std::size_t(l.c_size));
    GemmArgs<float> g = l.args;
    g.a = a.data(), g.b = b.data(), g.c = out.data();
    const i64 before = cpu::whole_b_packings();
    cpu::sgemm_packed(mk, {mk.mr * 1000, 24, mk.nr * 4}, g, 1);
    CHECK(cpu::whole_b_packings() == before);
    CHECK(out[0] == float(shape.k));
  }
}

TEST_CASE("cpu gemm: an operand stored transposed gives the bits of the same operand stored as it is used") {
  // The packers read op(A) and op(B) along k or across it, and the driver routes the two
  // layouts differently (rows of A contiguous in k stream panel by panel through L1 when
  // every column fits one B block; A^T is packed a block at a time, its source rows read
  // front to back). The panels hold the same values either way, so every transpose pair
  // must give the bits of the untransposed product. Shapes and thread counts that take the
  // driver's paths for single matrices: split rows with every column in one B block, split
  // columns, split k (fp32: the bf16 kernels' deeper k slices keep 5,000 in split rows),
  // one thread over several row blocks (small blocking), with beta and with the epilogue.
  std::vector<const cpu::SgemmMicroKernel*> kernels = micro_kernels();
  if (cpu::has_avx512_bf16()) {
    kernels.push_back(&cpu::bf16_avx512_microkernel());
    kernels.push_back(&cpu::bf16_amx_emulated_microkernel());
  }
  if (cpu::amx_usable()) kernels.push_back(&cpu::bf16_amx_microkernel());
  struct Case { GemmShape shape; int threads; bool small_blocks; };
  const Case cases[] = {{{700, 60, 300}, 2, false}, {{1000, 200, 70}, 2, false}, {{64, 900, 800}, 2, false},
                        {{40, 33, 5000}, 2, false}, {{333, 47, 77}, 1, true},   {{101, 150, 77}, 2, true},
                        {{29, 1, 45}, 1, false}};
  for (const cpu::SgemmMicroKernel* mk : kernels)
    for (const Case& c : cases)
      for (bool epilogue : {false, true}) {
        const GemmShape& sh = c.shape;
        const cpu::GemmBlocking blk = c.small_blocks ? cpu::GemmBlocking{mk->mr * 4, 24 * mk->k_per_slot, mk->nr * 3}
                                                     : cpu::default_blocking(*mk);
        const auto op_a = random_floats(std::size_t(sh.m * sh.k), 31);  // op(A)(i, p) at i * k + p
        const auto op_b = random_floats(std::size_t(sh.k * sh.n), 32);  // op(B)(p, j) at p * n + j
        const auto bias = random_floats(std::size_t(sh.n), 33);
        const auto c0 = random_floats(std::size_t(sh.m * (sh.n + 2)), 34);
        auto run = [&](Trans ta, Trans tb) {
          const GemmLayout l = gemm_layout(ta, tb, sh, 1, 2);
          std::vector<float> a(std::size_t(l.a_size), 0.0f), b(std::size_t(l.b_size), 0.0f);
          for (i64 i = 0; i < sh.m; ++i)
            for (i64 p = 0; p < sh.k; ++p)
              a[std::size_t(ta == Trans::N ? i * l.args.lda + p : p * l.args.lda + i)] = op_a[std::size_t(i * sh.k + p)];
          for (i64 p = 0; p < sh.k; ++p)
            for (i64 j = 0; j < sh.n; ++j)
              b[std::size_t(tb == Trans::N ? p * l.args.ldb + j : j * l.args.ldb + p)] = op_b[std::size_t(p * sh.n + j)];
          return packed_product(*mk, blk, l.args, a.data(), b.data(), c0, bias, epilogue, c.threads);
        };
        const auto as_used = run(Trans::N, Trans::N);
        for (Trans ta : {Trans::N, Trans::T})
          for (Trans tb : {Trans::N, Trans::T}) {
            INFO(mk->name << " " << sh.m << "x" << sh.n << "x" << sh.k << " threads " << c.threads
                          << (c.small_blocks ? " small blocks" : "") << " trans " << int(ta) << int(tb)
                          << (epilogue ? " with bias and GELU" : ""));
            CHECK(bitwise_equal(run(ta, tb), as_used));
          }
      }
}

TEST_CASE("cpu gemm: the table entry follows the backend switch; OpenBLAS agrees with the reference") {
  const GemmBackend saved = gemm_backend();
  set_gemm_backend(GemmBackend::OpenBLAS);
  CHECK(std::string(cpu_backend_name()).find("openblas") != std::string::npos);
  {
    HostMemory host;
    // NaN-filled C (beta 0) must not leak through OpenBLAS either; it finishes with the
    // same epilogue
    run_gemm_checks(cpu_backend(host), {{45, 77, 130}, {20, 30, 40}, {9, 21, 0}});
  }
  set_gemm_backend(GemmBackend::Wedge);
  CHECK(std::string(cpu_backend_name()).find("wedge") != std::string::npos);
  set_gemm_backend(saved);

  CHECK(parse_gemm_backend("OpenBLAS") == GemmBackend::OpenBLAS);
  CHECK(parse_gemm_backend("wedge") == GemmBackend::Wedge);
  CHECK_THROWS_AS(parse_gemm_backend("mkl"), std::invalid_argument);
}

}  // namespace wedge::kernels::harness
