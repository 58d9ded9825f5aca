// The backend harness: every kernel of the contract (engine/kernels.def), on every backend
// present, against the reference kernels on awkward shapes, with the tolerance of each
// kernel written once (backend_harness.cpp). The backends and the case list are in
// backend_cases.h; this header is what the other test files call, plus the comparison
// helpers they share.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend_cases.h"
#include "engine/thread_pool.h"

namespace wedge::kernels::harness {

// Every check of the harness on `backend` (the memory checks only when it has memory
// kernels); then every buffer it allocated must be back.
template <typename T>
void run_backend_harness(const Backend<T>& backend);

// Only the checks that cover `kernels` (each check once, as the full run orders them): for a
// table the full run does not reach, such as the AVX2 kernels on a CPU that has AVX-512.
template <typename T>
void run_kernel_checks(const Backend<T>& backend, const std::vector<KernelId>& kernels);

// Only the GEMM checks (plain and with the epilogue), on the harness's shapes, or on
// `shapes` (m, n, k) when given: for a GEMM path the full run does not reach (the CUDA
// unfused epilogue, a CPU micro-kernel or cache blocking, OpenBLAS).
struct GemmShape {
  i64 m, n, k;
};
// In Precision::BF16 the reference rounds the operands as the backend must, so the same
// fp32-accumulation tolerance applies.
template <typename T>
void run_gemm_checks(const Backend<T>& backend, const std::vector<GemmShape>& shapes = {},
                     Precision precision = Precision::F32);

// A GEMM's sizes and row-major layout: leading dimensions padded by `pad`, one whole
// matrix per batch entry (a caller that broadcasts an operand sets its stride to 0). The
// operand pointers are left for the caller.
struct GemmLayout {
  GemmArgs<float> args;
  i64 a_size, b_size, c_size;  // elements of one matrix of A, B, C
};
GemmLayout gemm_layout(Trans ta, Trans tb, const GemmShape& shape, i64 batch, i64 pad);

// A fingerprint of every output the checks compare, per kernel (FNV-1a over the outputs'
// bytes in the order the checks produce them): what a CPU tier computes on the harness's
// shapes, so a change that should not alter a kernel's results (a rewrite of its source)
// can be shown not to. Between record_outputs(&d) and record_outputs(nullptr), every
// output a check compares with the reference is folded into d under its kernel's name.
struct OutputDigests {
  std::map<std::string, std::uint64_t> by_kernel;
  void add(const std::string& kernel, const void* data, std::size_t bytes);
};
void record_outputs(OutputDigests* digests);

// |actual - expected| <= atol + rtol |expected| everywhere (NaN only where expected is NaN,
// infinities must match); reports the worst element.
template <typename T>
void expect_close(const std::vector<T>& actual, const std::vector<T>& expected, double atol, double rtol,
                  const std::string& what);

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Runs f() with the global pool resized to `threads`, restoring the size afterwards.
template <typename F>
void with_threads(int threads, F&& f) {
  const int saved = num_threads();
  set_num_threads(threads);
  f();
  set_num_threads(saved);
}

// The AVX-512 kernels exist only on CPUs that have it; a test that needs them says it was
// skipped instead of passing silently.
bool avx512_available();

// The CPU backend (cpu_table_f32 with its AVX-512 / AVX2 kernels) in counted host memory.
Backend<float> cpu_backend(HostMemory& memory, Sizes sizes = Sizes::large);

}  // namespace wedge::kernels::harness
