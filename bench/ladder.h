// What every CPU teaching ladder (gemm_ladder, layer_norm_ladder, softmax_ladder,
// attention_ladder) does the same way: time a step, measure the ceiling it is held against,
// compare its output with the reference and print one checked row per step. A ladder
// exits non-zero when any step's check fails, so the `ladders` tests can run them at small,
// awkward sizes.
//
// Also here: the pieces of "plain float loops the compiler vectorises" that more than one
// ladder writes — the build of a step for AVX-512 and for AVX2 at -O3, and 16-lane
// reductions and an exp that vectorise without -ffast-math.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"

namespace wedge::ladder {

using i64 = std::int64_t;

inline bool has_avx512() { return std::string(kernels::cpu_isa_name()) == "avx512"; }
inline bool has_avx2() { return has_avx512() || std::string(kernels::cpu_isa_name()) == "avx2"; }

// ---- plain float loops, vectorised by the compiler ----------------------------------------------
// A step written as plain C++ is an always-inline function called from two: NAME_avx512,
// compiled for AVX-512, and NAME_avx2, compiled for AVX2; LADDER_PICK(NAME) chooses by the
// CPU at run time. Both, and every LADDER_INLINE function they call, are compiled at -O3
// (at the project's -O2, GCC 12 vectorises no loop whose trip count it does not know) with
// -fno-trapping-math (with trapping math a float comparison may raise an exception, so GCC
// keeps `a > b ? a : b` a branch, and a loop with a branch is not vectorised for AVX2;
// results do not change). The flags must be on the inlined functions themselves: GCC
// vectorises their loops under the flags they were compiled with, not their caller's. And
// functions compiled without the flags -- the standard library's: std::fabs, std::min,
// std::bit_cast, std::vector's operator[] -- are not inlined into them but called, so the
// loops use none of them. The gaps between such a step and wedge's kernels then come from
// the ideas, not from the instruction set or the flags.
//   LADDER_FLOAT_LOOPS(name, (parameters), call of the always-inline body with them)

#define LADDER_FLAGS optimize("O3", "no-trapping-math")
#define LADDER_INLINE [[gnu::always_inline]] inline __attribute__((LADDER_FLAGS))

#define LADDER_FLOAT_LOOPS(name, params, call)                                                               \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma"), LADDER_FLAGS)) void name##_avx512 \
      params {                                                                                          \
    call;                                                                                               \
  }                                                                                                     \
  __attribute__((target("avx2,fma"), LADDER_FLAGS)) void name##_avx2 params { call; }

// Steps built with LADDER_FLOAT_LOOPS need one of the two: without, a ladder says so and stops.
inline bool has_float_loops(const char* program) {
  if (has_avx2()) return true;
  std::fprintf(stderr, "%s needs a CPU with AVX2 and FMA\n", program);
  return false;
}

template <typename F>
F* ladder_pick(F* avx512, F* avx2) {
  return has_avx512() ? avx512 : avx2;
}
#define LADDER_PICK(name) ::wedge::ladder::ladder_pick(name##_avx512, name##_avx2)

// A float sum or maximum in one accumulator is a chain the compiler may not reorder (that
// would change the rounding), so it stays scalar. Sixteen independent accumulators, one per
// lane of a 512-bit vector, are sixteen chains it can run side by side; the lanes are
// combined once at the end.
constexpr int kLanes = 16;

LADDER_INLINE float lanes_max(const float* x, i64 n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<float>::infinity();
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
  for (; j < n; ++j) acc[0] = x[j] > acc[0] ? x[j] : acc[0];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

LADDER_INLINE float lanes_sum(const float* x, i64 n) {
  float acc[kLanes] = {};
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
  for (; j < n; ++j) acc[0] += x[j];
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// exp(x) in float arithmetic the compiler can vectorise: std::exp is a call into libm per
// element, which GCC only replaces by a vector routine under -ffast-math. The usual split
// x = n ln2 + r with |r| <= ln2 / 2: 2^n goes straight into the exponent bits, e^r is a
// degree-7 Taylor polynomial (relative error ~2e-7, an ulp or two). Below -87 (and for
// -inf, a masked score) it returns 0: e^-87 is 1.6e-38, next to float's smallest normal,
// and nothing next to the exp(0) = 1 term every softmax row has.
LADDER_INLINE float exp_float(float x) {
  // The clamps as selects, not std::min / std::max, which would be calls (see above).
  float xc = x > 88.0f ? 88.0f : x;
  xc = xc < -87.0f ? -87.0f : xc;
  // Adding 1.5 * 2^23 rounds to the nearest integer in the default rounding mode.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693145751953125f) - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // __builtin_bit_cast, not std::bit_cast, for the same reason.
  const float two_n = __builtin_bit_cast(float, (static_cast<std::int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * two_n;
}

// ---- timing ------------------------------------------------------------------------------------

// The best time of one run of f: at least three runs and 0.2 s in all (the first run warms
// caches and wakes the pool's threads), but no more once a second has gone by, so a slow
// step is timed once or twice.
inline double best_seconds(const std::function<void()>& f) {
  double best = 1e30, total = 0;
  for (int run = 0;; ++run) {
    const auto start = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s);
    total += s;
    if (total > 1.0 || (run >= 2 && total >= 0.2)) return best;
  }
}

// ---- ceilings ----------------------------------------------------------------------------------

// A measured ceiling on one thread and on all of them, and the line that states it.
struct Ceiling {
  double one = 0, all = 0;
  double at(int threads) const { return threads == 1 ? one : all; }
  void print(const char* what, const char* unit) const {
    std::printf("measured %s: %.1f %s on 1 thread, %.1f on %d threads\n", what, one, unit, all, num_threads());
  }
};

// Read + write bandwidth of a large copy on `threads` threads: the ceiling of a kernel that
// streams its operands once. 64 MB per buffer is twice the largest L3 of the machines
// this runs on, so the copy goes to memory.
inline double measured_copy_gbs(int threads) {
  const i64 n = i64{1} << 24;
  std::vector<float> src(static_cast<std::size_t>(n), 1.0f), dst(static_cast<std::size_t>(n), 0.0f);
  const int before = num_threads();
  set_num_threads(threads);
  const double s = best_seconds([&] {
    parallel_for(0, n, 1 << 20, [&](i64 b, i64 e) {
      std::memcpy(dst.data() + b, src.data() + b, static_cast<std::size_t>(e - b) * sizeof(float));
    });
  });
  set_num_threads(before);
  return 2.0 * double(n) * sizeof(float) / s / 1e9;
}

inline Ceiling copy_bandwidth() { return {measured_copy_gbs(1), measured_copy_gbs(num_threads())}; }
inline Ceiling fma_peak() {
  return {kernels::measured_fma_peak_gflops(1), kernels::measured_fma_peak_gflops(num_threads())};
}

// ---- checking ----------------------------------------------------------------------------------

// The largest difference from the reference, absolute and relative to the reference's
// largest magnitude (a per-element relative error would blow up where the reference
// crosses zero). A NaN counts as an infinite error.
struct Error {
  double abs = 0, rel = 0;
};

inline Error worst(Error a, Error b) { return {std::max(a.abs, b.abs), std::max(a.rel, b.rel)}; }

template <typename Want>
Error max_error(std::span<const float> got, std::span<const Want> want) {
  double diff = got.size() == want.size() ? 0 : INFINITY, scale = 0;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    diff = std::max(diff, std::isnan(d) ? INFINITY : d);
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return {diff, scale > 0 ? diff / scale : diff};
}
template <typename Want>
Error max_error(const std::vector<float>& got, const std::vector<Want>& want) {
  return max_error(std::span<const float>(got), std::span<const Want>(want));
}

// ---- the table ---------------------------------------------------------------------------------

// One direction (forward, backward, ...) of one step: its time, its rate (GB/s or GFLOP/s),
// the ceiling in the same unit, and its check.
struct Cell {
  double seconds = 0;  // 0: the step has no version of this direction (printed blank)
  double rate = 0;
  double ceiling = 1;
  Error error;
  bool ok = true;
};

// Times `run` on `threads` threads; `work` is the bytes or flops one run counts, in units
// of 1e9 per second of the rate printed. The caller checks the output and sets the error.
inline Cell timed(const std::function<void()>& run, double work, const Ceiling& ceiling, int threads) {
  set_num_threads(threads);
  Cell cell;
  cell.seconds = best_seconds(run);
  cell.rate = work / cell.seconds / 1e9;
  cell.ceiling = ceiling.at(threads);
  return cell;
}

// Rows of steps, each a group of columns per direction:
//   step  threads | <group> ms  <unit>  % <of>  abs err  rel err | ...
// Remembers whether every checked cell passed.
class Table {
 public:
  Table(std::vector<std::string> groups, std::string unit, std::string of)
      : groups_(std::move(groups)), unit_(std::move(unit)), of_("% " + std::move(of)) {}

  void header() const {
    std::printf("%-30s %7s", "step", "threads");
    for (const std::string& g : groups_)
      std::printf(" | %9s %8s %7s %9s %9s", (g + " ms").c_str(), unit_.c_str(), of_.c_str(), "abs err", "rel err");
    std::printf("\n");
  }

  void row(const std::string& step, int threads, const std::vector<Cell>& cells) {
    std::printf("%-30s %7d", step.c_str(), threads);
    bool ok = true;
    for (const Cell& c : cells) {
      if (c.seconds <= 0) {
        std::printf(" | %9s %8s %7s %9s %9s", "-", "", "", "", "");
        continue;
      }
      std::printf(" | %9.2f %8.1f %6.1f%% %9.1e %9.1e", c.seconds * 1e3, c.rate, 100 * c.rate / c.ceiling,
                  c.error.abs, c.error.rel);
      ok = ok && c.ok;
    }
    std::printf("%s\n", ok ? "" : "  <-- WRONG");
    all_ok_ = all_ok_ && ok;
  }

  void skipped(const std::string& step, const char* why) const { std::printf("%-30s   (%s)\n", step.c_str(), why); }

  bool all_ok() const { return all_ok_; }

 private:
  std::vector<std::string> groups_;
  std::string unit_, of_;
  bool all_ok_ = true;
};

// One step of a ladder with a forward and a backward kernel: its name in the table, the
// threads it runs on, and the two kernels.
template <typename Forward, typename Backward>
struct PairStep {
  const char* name;
  int threads;
  Forward forward;
  Backward backward;
};

}  // namespace wedge::ladder
