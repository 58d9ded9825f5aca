// The CUDA kernels' own source, compiled for the host and run on the fiber emulation of
// kernels/cuda/host_emulation.h, through the same backend harness as the GPU
// (backend_harness.cpp). This is how the kernels' index arithmetic, tiling, shared
// memory use and barrier placement are tested on machines without a GPU: every thread
// of every block really runs, and barriers really separate them. The suite runs twice,
// with the threads of a block scheduled first-to-last and last-to-first, so a read of
// shared memory that is not ordered after its write by a barrier fails one of them.
//
// What the emulation cannot check (timing, warp-level hardware behaviour, the CUDA math
// library's last bits, cuBLAS itself) is listed in kernels/cuda/README.md.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend_harness.h"
#include "kernels/ref/bf16.h"

#define WEDGE_CUDA_EMULATE 1
// Every kernels/cuda/*.cu file, listed by CMake when it configures (a new kernel file is
// compiled here without touching this file).
#include "cuda_emulated_sources.inc"

namespace {

namespace harness = wedge::kernels::harness;

void run_emulated_suite(bool reverse_order) {
  namespace emulated = wedge::kernels::cuda_emulated;
  const wedge::kernels::KernelTable<float> table = emulated::make_table_f32();
  const wedge::kernels::MemoryTable memory = emulated::make_memory_table();
  harness::HostMemory host;
  wedge::emu::g_reverse_order = reverse_order;
  const char* order = reverse_order ? "last-to-first" : "first-to-last";
  harness::run_backend_harness(harness::Backend<float>{std::string("CUDA host emulation, threads ") + order,
                                                       harness::Family::cuda, &table, &memory, &host,
                                                       harness::Sizes::reduced});
  wedge::emu::g_reverse_order = false;
}

// Kernels that break the rules on purpose, to show the emulation catches them.
namespace broken {
using wedge::kernels::i64;

// Each thread writes its slot, then reads its neighbour's WITHOUT a barrier between.
// (`salt` differs per launch, so values left in shared memory by an earlier launch
// cannot pass for this one's.)
__global__ void missing_barrier_kernel(float* out, float salt) {
  __shared__ float slots[64];
  slots[threadIdx.x] = float(threadIdx.x) + salt;
  out[threadIdx.x] = slots[(threadIdx.x + 1) % 64];
}

// The same with the barrier: correct.
__global__ void with_barrier_kernel(float* out, float salt) {
  __shared__ float slots[64];
  slots[threadIdx.x] = float(threadIdx.x) + salt;
  __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % 64];
}

// A barrier only half the block reaches: hangs a GPU, an error here.
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void warp_sum_kernel(float* out) {
  out[threadIdx.x] = wedge::kernels::cuda_emulated::warp_sum(float(threadIdx.x % 32));
}

// One thread throws between two barriers (as an unsolved exercise of the course does).
__global__ void throwing_kernel(float* out) {
  __syncthreads();
  if (threadIdx.x == 5) throw std::logic_error("thread 5 gives up");
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}
}  // namespace broken

}  // namespace

TEST_CASE("host emulation runs every CUDA kernel against the reference (threads first-to-last)") {
  run_emulated_suite(false);
}

TEST_CASE("host emulation runs every CUDA kernel against the reference (threads last-to-first)") {
  run_emulated_suite(true);
}

// The GPU takes the unfused path (plain GEMM, then the epilogue kernel adds the bias and
// applies the GELU) where cuBLASLt offers no algorithm; the fused path above never reaches
// it, so it is checked here on its own.
TEST_CASE("host emulation: the unfused GEMM epilogue matches the reference") {
  namespace emulated = wedge::kernels::cuda_emulated;
  wedge::kernels::KernelTable<float> table = emulated::make_table_f32();
  table.gemm = emulated::gemm_unfused;
  const wedge::kernels::MemoryTable memory = emulated::make_memory_table();
  harness::HostMemory host;
  harness::run_gemm_checks(
      harness::Backend<float>{"CUDA host emulation, unfused epilogue", harness::Family::cuda, &table, &memory, &host,
                              harness::Sizes::reduced});
  CHECK(host.bytes_in_use() == 0);
}

// Precision::BF16 on the CUDA backend: bf16.cu rounds op(A) and op(B) into bf16 copies,
// the product (cuBLAS on the GPU, column_major_gemm_host here) multiplies the copies. The
// reference rounds as it reads, so the fp32 tolerance applies; every transpose pair,
// padded leading dimensions, batches, stride-0 broadcasts and the epilogue, fused and
// unfused.
TEST_CASE("host emulation: the CUDA GEMM in bf16 matches the reference (fused and unfused epilogue)") {
  namespace emulated = wedge::kernels::cuda_emulated;
  const wedge::kernels::MemoryTable memory = emulated::make_memory_table();
  harness::HostMemory host;
  wedge::kernels::KernelTable<float> table = emulated::make_table_f32();
  harness::run_gemm_checks(harness::Backend<float>{"CUDA host emulation, bf16", harness::Family::cuda, &table, &memory,
                                                   &host, harness::Sizes::reduced},
                           {}, wedge::kernels::Precision::BF16);
  table.gemm = emulated::gemm_unfused;
  harness::run_gemm_checks(harness::Backend<float>{"CUDA host emulation, bf16, unfused epilogue", harness::Family::cuda,
                                                   &table, &memory, &host, harness::Sizes::reduced},
                           {}, wedge::kernels::Precision::BF16);
  CHECK(host.bytes_in_use() == 0);
}

// The conversion kernel gives the reference's bits (kernels/ref/bf16.h float_to_bf16) for
// every input class: zeros and subnormals (flushed), ties either way, the carry into the
// exponent, the largest floats (to infinity), infinities, quiet and signalling NaNs of
// either sign; then every bf16 value's neighbourhood (each top half with the low halves
// that decide the rounding) and a million random bit patterns.
TEST_CASE("host emulation: the CUDA bf16 conversion kernel rounds as the reference, bit for bit") {
  namespace emulated = wedge::kernels::cuda_emulated;
  using wedge::kernels::i64;
  std::vector<std::uint32_t> bits = {
      0x00000000u, 0x80000000u,                            // zeros
      0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,  // subnormals, the smallest and largest
      0x00800000u, 0x80800000u, 0x00808000u, 0x00818000u,  // the smallest normal, ties just above it
      0x3f800000u, 0x3f808000u, 0x3f818000u,               // 1, a tie down to even, a tie up to even
      0x3f807fffu, 0x3f808001u, 0xbf808000u, 0xbf818000u,  // either side of a tie, negative ties
      0x3eaaaaabu, 0x40490fdbu, 0x3fffffffu, 0x3fff8000u,  // 1/3, pi, carries into the exponent
      0x7f7f7fffu, 0x7f7f8000u, 0x7f7fffffu, 0xff7fffffu,  // the largest bf16, a tie past it, max float
      0x7f800000u, 0xff800000u,                            // infinities
      0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,  // quiet and signalling NaNs
      0x7fbfffffu, 0x7fffffffu, 0xffffffffu, 0x7f80ffffu};
  for (std::uint32_t top = 0; top <= 0xffffu; ++top) {
    for (std::uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) bits.push_back(top << 16 | low);
  }
  std::mt19937 rng(20260302);
  for (int i = 0; i < (1 << 20); ++i) bits.push_back(static_cast<std::uint32_t>(rng()));

  std::vector<float> x(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) x[i] = wedge::kernels::ref::float_from_bits(bits[i]);
  std::vector<std::uint16_t> y(bits.size(), 0x1234u);
  emulated::round_to_bf16(x.data(), y.data(), i64(x.size()));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const std::uint16_t expected = wedge::kernels::ref::float_to_bf16(x[i]);
    if (y[i] != expected && wrong++ < 10) {
      char message[96];
      std::snprintf(message, sizeof message, "bf16 of 0x%08x: got 0x%04x, expected 0x%04x", unsigned(bits[i]),
                    unsigned(y[i]), unsigned(expected));
      FAIL_CHECK(message);
    }
  }
  CHECK(wrong == 0);

  // The strided form, as the GEMM copies an operand: (batch, cols, rows) read through a
  // padded leading dimension and batch stride, written densely with another padding, which
  // stays untouched.
  const i64 batch = 3, cols = 5, rows = 7, src_ld = 9, src_stride = 50, dst_ld = 8, dst_stride = 41;
  std::vector<float> src(std::size_t(batch * src_stride));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = x[i * 7919 % x.size()];
  std::vector<std::uint16_t> dst(std::size_t(batch * dst_stride), 0xabcdu);
  wedge::kernels::CopyLayout l;
  l.ndim = 3;
  l.shape[0] = batch, l.shape[1] = cols, l.shape[2] = rows;
  l.stride_src[0] = src_stride, l.stride_src[1] = src_ld, l.stride_src[2] = 1;
  l.stride_dst[0] = dst_stride, l.stride_dst[1] = dst_ld, l.stride_dst[2] = 1;
  emulated::round_to_bf16(l, src.data(), dst.data());
  std::vector<std::uint16_t> expected(dst.size(), 0xabcdu);
  for (i64 b = 0; b < batch; ++b) {
    for (i64 c = 0; c < cols; ++c) {
      for (i64 r = 0; r < rows; ++r) {
        expected[std::size_t(b * dst_stride + c * dst_ld + r)] =
            wedge::kernels::ref::float_to_bf16(src[std::size_t(b * src_stride + c * src_ld + r)]);
      }
    }
  }
  CHECK(harness::bitwise_equal(dst, expected));
}

// The Adam chunks hand every element of every tensor to exactly one thread: each element
// is touched once per update (a second touch would apply the step twice).
TEST_CASE("host emulation: one Adam update touches each element of every tensor once") {
  namespace emulated = wedge::kernels::cuda_emulated;
  using wedge::kernels::AdamSegment;
  using wedge::kernels::i64;
  std::vector<i64> sizes;
  for (int i = 0; i < 70; ++i) sizes.push_back(i % 9 == 4 ? 0 : (i * 53) % 300 + 1);
  sizes.push_back(3000);
  // lr 1, no decay, beta1 = beta2 = 0, bias corrections 1, eps 0: m = g, v = g^2,
  // p -= g / |g| = sign(g). With g = 1 everywhere, each touch lowers p by exactly 1.
  wedge::kernels::AdamParams hp{1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, true, 1.0f};
  std::vector<std::vector<float>> p(sizes.size()), g(sizes.size()), m(sizes.size()), v(sizes.size());
  std::vector<AdamSegment<float>> segments(sizes.size());
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    const std::size_t n = std::size_t(sizes[t]);
    p[t].assign(n, 10.0f);
    g[t].assign(n, 1.0f);
    m[t].assign(n, 0.0f);
    v[t].assign(n, 0.0f);
    segments[t] = {p[t].data(), g[t].data(), m[t].data(), v[t].data(), sizes[t]};
  }
  emulated::adam_update(hp, segments.data(), i64(segments.size()));
  std::size_t wrong = 0;
  for (const auto& tensor : p) {
    for (float x : tensor) wrong += x == 9.0f ? 0 : 1;
  }
  CHECK(wrong == 0);
}

// The selective scan supports any P, N, D and L; what it refuses (before touching memory)
// is a size no kernel can have and a grid beyond CUDA's 2^31 - 1 blocks.
TEST_CASE("host emulation: the selective scan refuses shapes it cannot run") {
  namespace emulated = wedge::kernels::cuda_emulated;
  wedge::kernels::ScanArgs<float> args;
  args.batch = 1;
  args.L = 5;
  args.D = 3;
  args.N = 2;
  args.P = 0;  // tokens but no segment length
  float* none = nullptr;
  CHECK_THROWS_AS(emulated::selective_scan_forward(args, none, none, none), std::invalid_argument);
  CHECK_THROWS_AS(emulated::selective_scan_backward(args, none, none, none, {}), std::invalid_argument);
  args.P = 1;
  args.N = -1;
  CHECK_THROWS_AS(emulated::selective_scan_forward(args, none, none, none), std::invalid_argument);
  args.N = 2;
  args.batch = wedge::kernels::i64(1) << 31;  // 2^31 segments of one token
  CHECK_THROWS_AS(emulated::selective_scan_forward(args, none, none, none), std::invalid_argument);
  CHECK_THROWS_AS(emulated::selective_scan_backward(args, none, none, none, {}), std::invalid_argument);
}

TEST_CASE("host emulation catches missing and divergent barriers, and kernels that throw") {
  using wedge::emu::dim3;
  std::vector<float> out(64, -1.0f);
  auto expected_neighbour = [](unsigned t, float salt) { return float((t + 1) % 64) + salt; };

  for (bool reverse : {false, true}) {
    wedge::emu::g_reverse_order = reverse;
    const float salt = reverse ? 1000.0f : 2000.0f;
    WEDGE_LAUNCH(dim3(1), dim3(64), 0, broken::with_barrier_kernel)(out.data(), salt);
    for (unsigned t = 0; t < 64; ++t) CHECK(out[t] == expected_neighbour(t, salt));

    // Without the barrier, the first thread scheduled runs to its end before its
    // neighbour has written anything.
    std::fill(out.begin(), out.end(), -1.0f);
    WEDGE_LAUNCH(dim3(1), dim3(64), 0, broken::missing_barrier_kernel)(out.data(), salt + 1.0f);
    int wrong = 0;
    for (unsigned t = 0; t < 64; ++t) wrong += out[t] != expected_neighbour(t, salt + 1.0f) ? 1 : 0;
    CHECK(wrong > 0);
    wedge::emu::g_reverse_order = false;
  }

  CHECK_THROWS_AS(WEDGE_LAUNCH(dim3(1), dim3(64), 0, broken::divergent_barrier_kernel)(out.data()), std::logic_error);

  // A kernel that throws fails its launch with the message, and the next launch, on the
  // same fiber stacks, runs normally.
  CHECK_THROWS_WITH_AS(WEDGE_LAUNCH(dim3(2), dim3(64), 0, broken::throwing_kernel)(out.data()),
                       doctest::Contains("a thread threw: thread 5 gives up"), std::logic_error);

  // a warp butterfly gives every lane the sum 0 + 1 + ... + 31
  WEDGE_LAUNCH(dim3(1), dim3(64), 0, broken::warp_sum_kernel)(out.data());
  for (unsigned t = 0; t < 64; ++t) CHECK(out[t] == 496.0f);
}
