// Mixed precision on the CPU: the bf16 rounding rules (kernels/ref/bf16.h), the bf16 GEMM
// micro-kernels (AVX-512-BF16; AMX on emulated tiles, and on the hardware where present)
// against the reference on awkward shapes, every transpose case, the driver's
// cache blocks and thread splits, and against the fp32 product under a bound derived from
// bf16's 8-bit significand; the path switch and its fallback.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend_harness.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/bf16.h"

namespace wedge::kernels::harness {

using ref::bf16_round;
using ref::bf16_to_float;
using ref::float_bits;
using ref::float_from_bits;
using ref::float_to_bf16;
using ref::float_to_bf16_stochastic;

TEST_CASE("bf16 rounding: nearest even, subnormals flushed, NaN and infinity kept") {
  CHECK(bf16_round(1.0f) == 1.0f);
  CHECK(bf16_round(-2.5f) == -2.5f);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: the tie goes to the even 1.
  CHECK(bf16_round(1.0f + std::ldexp(1.0f, -8)) == 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(bf16_round(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));
  // just above the tie rounds up, just below rounds down
  CHECK(bf16_round(float_from_bits(float_bits(1.0f + std::ldexp(1.0f, -8)) + 1)) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(bf16_round(float_from_bits(float_bits(1.0f + std::ldexp(1.0f, -8)) - 1)) == 1.0f);
  // 1/3 = 0x3EAAAAAB -> 0x3EAB (the dropped 0xAAAB is above half)
  CHECK(float_to_bf16(1.0f / 3.0f) == 0x3EAB);
  // subnormals become zeros of their sign
  CHECK(float_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(float_to_bf16(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  // the largest float rounds to infinity; infinities and NaN stay
  CHECK(std::isinf(bf16_round(std::numeric_limits<float>::max())));
  CHECK(bf16_round(-std::numeric_limits<float>::infinity()) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(bf16_round(std::numeric_limits<float>::quiet_NaN())));
  // a signalling NaN whose payload lives only in the low bits must not become infinity
  CHECK(std::isnan(bf16_round(float_from_bits(0x7f800001u))));
  // relative error of a normal value: at most 2^-8
  for (float x : {0.1f, 3.14159265f, -1234.5678f, 6.1e-5f, 1e30f}) {
    CHECK(std::fabs(bf16_round(x) - x) <= std::ldexp(std::fabs(x), -8));
  }
}

TEST_CASE("bf16 stochastic rounding: the two neighbours, in proportion, the same for the same bits") {
  const float x = 1.0f + 0.3f * std::ldexp(1.0f, -7);  // 30 % of the way from 1 to the next bf16
  const float down = 1.0f, up = 1.0f + std::ldexp(1.0f, -7);
  double sum = 0;
  int ups = 0;
  const int n = 65536;
  for (int r = 0; r < n; ++r) {
    const float y = bf16_to_float(float_to_bf16_stochastic(x, std::uint32_t(r)));
    REQUIRE((y == down || y == up));
    ups += y == up;
    sum += y;
  }
  // r runs over every 16-bit value once: exactly the share of r >= 2^16 - low rounds up
  const std::uint32_t low = float_bits(x) & 0xffffu;
  CHECK(ups == int(low));
  CHECK(std::fabs(sum / n - double(x)) < 1e-6);
  CHECK(float_to_bf16_stochastic(x, 12345) == float_to_bf16_stochastic(x, 12345));
  // exact bf16 values never move; the largest finite value stays finite
  CHECK(bf16_to_float(float_to_bf16_stochastic(1.5f, 0xffffu)) == 1.5f);
  CHECK(std::isfinite(bf16_to_float(float_to_bf16_stochastic(std::numeric_limits<float>::max(), 0xffffu))));
}

namespace {

bool bf16_kernel_available() {
  if (cpu::has_avx512_bf16()) return true;
  MESSAGE("this CPU has no AVX-512-BF16: the bf16 micro-kernel's tests skipped");
  return false;
}

// A bf16 micro-kernel through the packed driver with a given blocking and thread count.
const cpu::SgemmMicroKernel* g_kernel = nullptr;
cpu::GemmBlocking g_blocking;
int g_threads = 0;
void bf16_path_gemm(const GemmArgs<float>& g) { cpu::sgemm_packed(*g_kernel, g_blocking, g, g_threads); }

void check_bf16_path(const cpu::GemmBlocking& blocking, int threads, const std::vector<GemmShape>& shapes,
                     const std::string& name, const cpu::SgemmMicroKernel& mk = cpu::bf16_avx512_microkernel(),
                     Sizes sizes = Sizes::large) {
  g_kernel = &mk;
  g_blocking = blocking;
  g_threads = threads;
  KernelTable<float> table = cpu_table_f32();
  table.gemm = bf16_path_gemm;
  HostMemory host;
  run_gemm_checks(Backend<float>{name, Family::cpu, &table, &cpu_memory_table(), &host, sizes}, shapes,
                  Precision::BF16);
  CHECK(host.bytes_in_use() == 0);
}

}  // namespace

TEST_CASE("bf16 gemm: the micro-kernel matches the bf16 reference on the harness's shapes") {
  if (!bf16_kernel_available()) return;
  // every transpose pair, alpha/beta, batches with broadcast operands, k = 0, the epilogue
  check_bf16_path(cpu::default_blocking(cpu::bf16_avx512_microkernel()), 0, {}, "cpu bf16 gemm");
}

TEST_CASE("bf16 gemm: awkward sizes in each of m, n, k, odd depths, tiny cache blocks, 1 and 2 threads") {
  if (!bf16_kernel_available()) return;
  const cpu::SgemmMicroKernel& mk = cpu::bf16_avx512_microkernel();
  const std::vector<GemmShape> shapes = {{1, 15, 17},   {15, 17, 31},  {17, 31, 33},  {31, 33, 1},
                                         {33, 1, 15},   {1033, 17, 31}, {15, 1031, 33}, {17, 33, 1029},
                                         {129, 95, 71}, {2, 3, 3}};
  check_bf16_path(cpu::default_blocking(mk), 1, shapes, "cpu bf16 gemm, 1 thread");
  check_bf16_path(cpu::default_blocking(mk), 2, shapes, "cpu bf16 gemm, 2 threads");
  // kc = 21 (odd: every k slice ends in a half-empty slot), mc and nc a few panels:
  // several A blocks, k slices and B blocks per matrix, with edge panels in each
  check_bf16_path({mk.mr * 2, 21, mk.nr * 2}, 2, {{101, 150, 77}, {3, 333, 41}, {333, 5, 41}},
                  "cpu bf16 gemm, tiny blocks");
}

TEST_CASE("bf16 gemm, AMX kernel on emulated tiles: the harness's shapes, awkward sizes, odd and tiny blocks") {
  if (!bf16_kernel_available()) return;
  // The AMX micro-kernel's own code (tile loads, the 32 x 32 register tile, its row-major A
  // blocks, depths padded to 16 slots, the edge corners) on a C++ model of the tile
  // instructions: this runs wherever the packers do, AMX or not.
  const cpu::SgemmMicroKernel& mk = cpu::bf16_amx_emulated_microkernel();
  check_bf16_path(cpu::default_blocking(mk), 0, {}, "cpu amx (emulated tiles)", mk, Sizes::reduced);
  check_bf16_path(cpu::default_blocking(mk), 2, {{1, 15, 17}, {33, 31, 1}, {17, 33, 1029}, {65, 64, 96}, {31, 1, 33}},
                  "cpu amx (emulated tiles), awkward sizes", mk);
  // kc = 21: 11 slots of data in a 16-slot tile step; several blocks of every kind
  check_bf16_path({mk.mr * 2, 21, mk.nr * 2}, 2, {{101, 150, 77}, {3, 333, 41}}, "cpu amx (emulated tiles), tiny blocks",
                  mk);
}

TEST_CASE("bf16 gemm, AMX kernel on the hardware: the reference on the harness's shapes and awkward sizes") {
  if (!cpu::amx_usable()) {
    MESSAGE("this CPU has no AMX (or Linux refused the tile state): the AMX hardware tests skipped; the kernel's code "
            "is tested on emulated tiles");
    return;
  }
  const cpu::SgemmMicroKernel& mk = cpu::bf16_amx_microkernel();
  check_bf16_path(cpu::default_blocking(mk), 0, {}, "cpu amx", mk);
  check_bf16_path(cpu::default_blocking(mk), 1, {{1033, 17, 31}, {15, 1031, 33}, {17, 33, 1029}}, "cpu amx, 1 thread",
                  mk);
  // after the peak loop ran tiles on this thread, the kernel still finds its configuration
  CHECK(measured_amx_peak_gflops(1, 100'000) > 0);
  check_bf16_path(cpu::default_blocking(mk), 1, {{65, 64, 96}}, "cpu amx, after the peak loop", mk);
}

TEST_CASE("bf16 gemm: a product with the identity returns each operand rounded to bf16, bit for bit") {
  if (!bf16_kernel_available()) return;
  // C = A I (and I B) exposes the packers' rounding exactly: one nonzero product per sum.
  // Values cover ties, subnormals and large magnitudes.
  const i64 m = 19, k = 37;
  std::vector<float> a = random_floats(std::size_t(m * k), 7, -4.0f, 4.0f);
  a[0] = 1.0f + std::ldexp(1.0f, -8);
  a[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  a[2] = std::numeric_limits<float>::denorm_min();
  a[3] = -3e38f;
  a[4] = 1.0f / 3.0f;
  std::vector<float> eye(std::size_t(k * k), 0.0f);
  for (i64 i = 0; i < k; ++i) eye[std::size_t(i * k + i)] = 1.0f;
  for (Trans ta : {Trans::N, Trans::T}) {
    for (bool a_left : {true, false}) {
      INFO("op(A) " << (ta == Trans::N ? "N" : "T") << (a_left ? ", A I" : ", I A^T"));
      // A stored m x k (N) or k x m (T); op(A) is m x k either way.
      std::vector<float> stored(a.size());
      for (i64 i = 0; i < m; ++i)
        for (i64 p = 0; p < k; ++p) stored[std::size_t(ta == Trans::N ? i * k + p : p * m + i)] = a[std::size_t(i * k + p)];
      GemmArgs<float> g;
      g.precision = Precision::BF16;
      std::vector<float> c;
      if (a_left) {  // C (m x k) = op(A) I
        g.trans_a = ta;
        g.m = m, g.n = k, g.k = k;
        g.a = stored.data(), g.lda = ta == Trans::N ? k : m;
        g.b = eye.data(), g.ldb = k;
        c.assign(std::size_t(m * k), 0.0f);
        g.ldc = k;
      } else {  // C (k x m) = I op(A)^T, op(A)^T read through op(B)
        g.trans_b = ta == Trans::N ? Trans::T : Trans::N;
        g.m = k, g.n = m, g.k = k;
        g.a = eye.data(), g.lda = k;
        g.b = stored.data(), g.ldb = ta == Trans::N ? k : m;
        c.assign(std::size_t(k * m), 0.0f);
        g.ldc = m;
      }
      g.c = c.data();
      sgemm_wedge(g, 1);
      for (i64 i = 0; i < m; ++i) {
        for (i64 p = 0; p < k; ++p) {
          const float want = bf16_round(a[std::size_t(i * k + p)]);
          const float got = a_left ? c[std::size_t(i * k + p)] : c[std::size_t(p * m + i)];
          REQUIRE_MESSAGE(float_bits(got) == float_bits(want == 0.0f ? 0.0f : want),
                          "element (" << i << ", " << p << "): " << got << " != bf16 " << want);
        }
      }
    }
  }
}

TEST_CASE("bf16 gemm: within bf16's rounding bound of the fp32 product, on the model's shapes") {
  if (!bf16_kernel_available()) return;
  // Each operand moves by at most 2^-8 relative, so each product by at most
  // 2 * 2^-8 + 2^-16 relative; the sum of k of them is off by at most
  // (2^-7 + 2^-16) * sum_p |a_ip b_pj| plus fp32 accumulation (k * 2^-24 of the same sum).
  struct Shape { i64 m, n, k; Trans ta, tb; const char* what; };
  for (const Shape& sh : {Shape{256, 1024, 256, Trans::N, Trans::T, "FFN up, forward (x W^T)"},
                          Shape{256, 256, 1024, Trans::N, Trans::N, "FFN down, dX (dY W)"},
                          Shape{1024, 256, 256, Trans::T, Trans::N, "FFN up, dW (dY^T X)"},
                          Shape{128, 3001, 256, Trans::N, Trans::T, "tied head, forward"},
                          Shape{33, 65, 1100, Trans::T, Trans::T, "both transposed"}}) {
    INFO(sh.what);
    const i64 a_size = sh.m * sh.k, b_size = sh.k * sh.n;
    const auto a = random_floats(std::size_t(a_size), 21);
    const auto b = random_floats(std::size_t(b_size), 22);
    GemmArgs<float> g;
    g.trans_a = sh.ta, g.trans_b = sh.tb;
    g.m = sh.m, g.n = sh.n, g.k = sh.k;
    g.a = a.data(), g.lda = sh.ta == Trans::N ? sh.k : sh.m;
    g.b = b.data(), g.ldb = sh.tb == Trans::N ? sh.n : sh.k;
    std::vector<float> c(std::size_t(sh.m * sh.n));
    g.c = c.data(), g.ldc = sh.n;
    g.precision = Precision::BF16;
    sgemm_wedge(g);
    auto a_at = [&](i64 i, i64 p) { return double(sh.ta == Trans::N ? a[std::size_t(i * sh.k + p)] : a[std::size_t(p * sh.m + i)]); };
    auto b_at = [&](i64 p, i64 j) { return double(sh.tb == Trans::N ? b[std::size_t(p * sh.n + j)] : b[std::size_t(j * sh.k + p)]); };
    const double rel = std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + double(sh.k) * std::ldexp(1.0, -24);
    double worst = 0;
    for (i64 i = 0; i < sh.m; i += 7) {
      for (i64 j = 0; j < sh.n; j += 5) {
        double exact = 0, magnitude = 0;
        for (i64 p = 0; p < sh.k; ++p) {
          exact += a_at(i, p) * b_at(p, j);
          magnitude += std::fabs(a_at(i, p) * b_at(p, j));
        }
        const double err = std::fabs(double(c[std::size_t(i * sh.n + j)]) - exact);
        REQUIRE_MESSAGE(err <= rel * magnitude, "C(" << i << ", " << j << ") off by " << err << ", bound "
                                                   << rel * magnitude);
        worst = std::max(worst, err / magnitude);
      }
    }
    // and the rounding really happened: a bf16 product is not the fp32 one
    CHECK(worst > 1e-5);
  }
}

TEST_CASE("bf16 gemm: the path switch, its fallback to fp32, and the names it reports") {
  CHECK(parse_bf16_path("AMX") == Bf16Path::Amx);
  CHECK(parse_bf16_path("AVX512-BF16") == Bf16Path::Avx512Bf16);
  CHECK(parse_bf16_path("fp32") == Bf16Path::Fp32);
  CHECK_THROWS_AS(parse_bf16_path("amx-fp8"), std::invalid_argument);
  const Bf16Path saved = bf16_path();
  const i64 m = 45, n = 70, k = 130;
  const auto a = random_floats(std::size_t(m * k), 31), b = random_floats(std::size_t(k * n), 32);
  auto run = [&](Precision precision) {
    std::vector<float> c(std::size_t(m * n));
    GemmArgs<float> g;
    g.m = m, g.n = n, g.k = k;
    g.a = a.data(), g.lda = k, g.b = b.data(), g.ldb = n, g.c = c.data(), g.ldc = n;
    g.precision = precision;
    cpu_table_f32().gemm(g);  // through the table, as the ops call it
    return c;
  };
  // forced down to fp32, a BF16 GEMM is the fp32 GEMM, bit for bit
  set_bf16_path(Bf16Path::Fp32);
  CHECK(bf16_path() == Bf16Path::Fp32);
  CHECK(std::string(bf16_gemm_description()).rfind("fp32", 0) == 0);
  CHECK(bitwise_equal(run(Precision::BF16), run(Precision::F32)));
  // asked for AMX, a CPU without it falls back to AVX-512-BF16 (and below)
  set_bf16_path(Bf16Path::Amx);
  CHECK(bf16_path() == (cpu::amx_usable() ? Bf16Path::Amx : cpu::has_avx512_bf16() ? Bf16Path::Avx512Bf16 : Bf16Path::Fp32));
  // asked for, the bf16 kernel runs where the CPU has it and the request falls back where not
  set_bf16_path(Bf16Path::Avx512Bf16);
  if (cpu::has_avx512_bf16()) {
    CHECK(bf16_path() == Bf16Path::Avx512Bf16);
    CHECK(std::string(bf16_gemm_description()).find("vdpbf16ps") != std::string::npos);
    CHECK_FALSE(bitwise_equal(run(Precision::BF16), run(Precision::F32)));
  } else {
    CHECK(bf16_path() == Bf16Path::Fp32);
  }
  // the OpenBLAS backend is fp32: a BF16 GEMM still takes the bf16 path
  const GemmBackend backend = gemm_backend();
  set_gemm_backend(GemmBackend::OpenBLAS);
  const auto with_openblas = run(Precision::BF16);
  set_gemm_backend(GemmBackend::Wedge);
  CHECK(bitwise_equal(with_openblas, run(Precision::BF16)));
  set_gemm_backend(backend);
  set_bf16_path(saved);
}

}  // namespace wedge::kernels::harness
