// The softmax teaching ladder: softmax and the LM head's fused cross-entropy, forward and
// backward, from the reference loops to wedge's AVX-512 kernels on every thread, each step
// checked against the float64 reference and timed as GB/s and % of this machine's measured
// memory bandwidth. A row of logits is read, exponentiated and summed: a few flops per byte,
// so the ceiling is streaming the operands once, and the question each step answers is how
// many times it reads each row and how fast it turns a float into its exponential.
//
//   build/bench/softmax_ladder [rows] [V]    (default 1024 x 30522: the BERT vocabulary of
//                                             the paper models' tied head, 125 MB per tensor,
//                                             beyond the caches)
//
// The steps:
//   1. reference     kernels/ref/softmax.cpp: each row's max, then its sum of exp, then the
//                    output, one element at a time in double with libm's exp.
//   2. float loops   the same three passes (max, sum of exp, normalise) in float, written so
//                    the compiler vectorises them: 16 independent partial maxima and sums
//                    (one chain would have to stay scalar) and an exp in plain float
//                    arithmetic (a call to libm's expf cannot be vectorised without
//                    -ffast-math). Compiled for AVX-512 (AVX2 without it) at -O3.
//   3. online        the max and the sum in one pass (Milakov & Gimelshein, "Online
//                    normalizer calculation for softmax", 2018): keep the running max m and
//                    s = sum exp(x - m); a new maximum rescales s by exp(m_old - m_new).
//                    Of exp(x - m) and exp(m - x) only the one with a non-positive exponent
//                    is needed, so each element still costs one exp: exp(-|x - m|) is either
//                    the term to add or the rescaling factor. Cross-entropy forward becomes
//                    one read of the logits; softmax forward two (the output needs the
//                    final sum). The backward passes have no max to find: no new step.
//   4. avx512        wedge's kernels (kernels/cpu/softmax_simd.cpp at 16 lanes) on one thread: the
//                    three passes with 16-lane intrinsics, a vector exp, masked tails, sums
//                    of exponentials in double, the next row prefetched while one is summed,
//                    and the cross-entropy gradient written with streaming stores.
//   5. + threads     the same on all pool threads, rows split between them.
// Bytes counted are the minimum each direction must move, per element: softmax forward
// reads x and writes y (8), backward reads y and gy and writes gx (12); cross-entropy
// forward reads the logits (4: its outputs are one float per row), backward reads the
// logits and writes their gradient (8).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/thread_pool.h"
#include "kernels/cpu/cpu.h"
#include "kernels/tables.h"
#include "ladder.h"

using namespace wedge;
using namespace wedge::kernels;
using namespace wedge::ladder;

namespace {

constexpr std::int32_t kIgnore = -100;  // the ignore_index of the models' loss

// ---- steps 2 and 3: plain float loops --------------------------------------------------------

// Pass "normalise" of softmax: y = exp(x - m) / s (log: (x - m) - log s), given the row's
// max and sum of exponentials.
LADDER_INLINE void normalise_row(const float* x, float* y, i64 n, float m, float s, bool log) {
  if (log) {
    const float log_s = std::log(s);
    for (i64 j = 0; j < n; ++j) y[j] = (x[j] - m) - log_s;
  } else {
    const float inv = 1.0f / s;
    for (i64 j = 0; j < n; ++j) y[j] = exp_float(x[j] - m) * inv;
  }
}

// Pass "sum of exp": sum_j exp(x_j - m), in 16 partial sums.
LADDER_INLINE float sum_exp(const float* x, i64 n, float m) {
  float acc[kLanes] = {};
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += exp_float(x[j + l] - m);
  for (; j < n; ++j) acc[0] += exp_float(x[j] - m);
  return lanes_sum(acc, kLanes);
}

struct RowStats {
  float max, sum_exp;
};

// One element of the online pass: t = exp(-|x - m|); if x > m, s = s t + 1 and m = x (the
// old terms rescaled, the new one exp(0)), else s += t.
LADDER_INLINE void online_update(float& m, float& s, float x) {
  const bool grew = x > m;
  const float t = exp_float(grew ? m - x : x - m);
  s = grew ? s * t + 1.0f : s + t;
  m = grew ? x : m;
}

// One pass: the running (max, sum of exp) of 16 interleaved sub-rows, merged at the end.
LADDER_INLINE RowStats online_stats(const float* x, i64 n) {
  float m[kLanes], s[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) m[l] = -INFINITY;  // the first update: t = exp(-inf) = 0, s = 1
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) online_update(m[l], s[l], x[j + l]);
  for (; j < n; ++j) online_update(m[0], s[0], x[j]);
  const float max = lanes_max(m, kLanes);
  float sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += s[l] * exp_float(m[l] - max);  // lanes never updated add 0
  return {max, sum};
}

LADDER_INLINE void three_pass_softmax_body(const float* x, float* y, i64 rows, i64 n, bool log) {
  for (i64 r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float m = lanes_max(xr, n);
    normalise_row(xr, y + r * n, n, m, sum_exp(xr, n, m), log);
  }
}

LADDER_INLINE void online_softmax_body(const float* x, float* y, i64 rows, i64 n, bool log) {
  for (i64 r = 0; r < rows; ++r) {
    const RowStats st = online_stats(x + r * n, n);
    normalise_row(x + r * n, y + r * n, n, st.max, st.sum_exp, log);
  }
}

//   softmax:     gx = y (gy - sum(gy y));   log_softmax: gx = gy - exp(y) sum(gy)
LADDER_INLINE void float_softmax_backward_body(const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log) {
  for (i64 r = 0; r < rows; ++r) {
    const float *yr = y + r * n, *gyr = gy + r * n;
    float* gxr = gx + r * n;
    float acc[kLanes] = {};
    i64 j = 0;
    for (; j + kLanes <= n; j += kLanes)
      for (int l = 0; l < kLanes; ++l) acc[l] += log ? gyr[j + l] : gyr[j + l] * yr[j + l];
    for (; j < n; ++j) acc[0] += log ? gyr[j] : gyr[j] * yr[j];
    const float sum = lanes_sum(acc, kLanes);
    if (log) {
      for (j = 0; j < n; ++j) gxr[j] = gyr[j] - exp_float(yr[j]) * sum;
    } else {
      for (j = 0; j < n; ++j) gxr[j] = yr[j] * (gyr[j] - sum);
    }
  }
}

// lse per row (from the three-pass or the online statistics), then the mean of
// lse - logit[target] over the counted rows.
template <bool Online>
LADDER_INLINE void cross_entropy_forward_body(const float* logits, const std::int32_t* targets, i64 rows,
                                              i64 V, std::int32_t ignore_index, float* lse, float* loss,
                                              float* count) {
  float total = 0;
  i64 counted = 0;
  for (i64 r = 0; r < rows; ++r) {
    const float* row = logits + r * V;
    RowStats st;
    if constexpr (Online) {
      st = online_stats(row, V);
    } else {
      st.max = lanes_max(row, V);
      st.sum_exp = sum_exp(row, V, st.max);
    }
    lse[r] = st.max + std::log(st.sum_exp);
    if (targets[r] == ignore_index) continue;
    total += lse[r] - logits[r * V + targets[r]];
    ++counted;
  }
  *loss = counted > 0 ? total / float(counted) : 0.0f;
  *count = float(counted);
}

// glogits = (exp(logits - lse) - onehot(target)) gloss / count, zero on ignored rows.
LADDER_INLINE void float_cross_entropy_backward_body(const float* logits, const std::int32_t* targets,
                                                     const float* lse, const float* count, const float* gloss,
                                                     i64 rows, i64 V, std::int32_t ignore_index, float* glogits) {
  const float scale = *count > 0.0f ? *gloss / *count : 0.0f;
  for (i64 r = 0; r < rows; ++r) {
    const float* row = logits + r * V;
    float* grow = glogits + r * V;
    if (targets[r] == ignore_index) {
      for (i64 j = 0; j < V; ++j) grow[j] = 0.0f;
      continue;
    }
    const float row_lse = lse[r];
    for (i64 j = 0; j < V; ++j) grow[j] = exp_float(row[j] - row_lse) * scale;
    grow[targets[r]] -= scale;
  }
}

LADDER_FLOAT_LOOPS(three_pass_softmax, (const float* x, float* y, i64 rows, i64 n, bool log),
                   three_pass_softmax_body(x, y, rows, n, log))
LADDER_FLOAT_LOOPS(online_softmax, (const float* x, float* y, i64 rows, i64 n, bool log),
                   online_softmax_body(x, y, rows, n, log))
LADDER_FLOAT_LOOPS(float_softmax_backward, (const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log),
                   float_softmax_backward_body(y, gy, gx, rows, n, log))
#define LADDER_CE_FORWARD_PARAMS                                                                                \
  (const float* logits, const std::int32_t* targets, i64 rows, i64 V, std::int32_t ignore_index, float* lse, \
   float* loss, float* count)
LADDER_FLOAT_LOOPS(two_pass_cross_entropy, LADDER_CE_FORWARD_PARAMS,
                   cross_entropy_forward_body<false>(logits, targets, rows, V, ignore_index, lse, loss, count))
LADDER_FLOAT_LOOPS(online_cross_entropy, LADDER_CE_FORWARD_PARAMS,
                   cross_entropy_forward_body<true>(logits, targets, rows, V, ignore_index, lse, loss, count))
LADDER_FLOAT_LOOPS(float_cross_entropy_backward,
                   (const float* logits, const std::int32_t* targets, const float* lse, const float* count,
                    const float* gloss, i64 rows, i64 V, std::int32_t ignore_index, float* glogits),
                   float_cross_entropy_backward_body(logits, targets, lse, count, gloss, rows, V, ignore_index,
                                                     glogits))

using SoftmaxForward = decltype(KernelTable<float>::softmax_forward);
using SoftmaxBackward = decltype(KernelTable<float>::softmax_backward);
using CrossEntropyForward = decltype(KernelTable<float>::cross_entropy_forward);
using CrossEntropyBackward = decltype(KernelTable<float>::cross_entropy_backward);

// One rung; a null entry has nothing new in that direction (printed blank).
struct Step {
  const char* name;
  int threads;
  SoftmaxForward softmax_forward;
  SoftmaxBackward softmax_backward;
  CrossEntropyForward ce_forward;
  CrossEntropyBackward ce_backward;
};

// float32 against float64, relative to the output's largest magnitude: every float step
// lands near 1e-6 (exp within a few ulp, float sums over a row); a wrong tail, a missing
// max shift or a lost rescaling is off by far more.
constexpr double kTolerance = 1e-4;

}  // namespace

int main(int argc, char** argv) {
  const i64 rows = argc > 1 ? std::atoll(argv[1]) : 1024, V = argc > 2 ? std::atoll(argv[2]) : 30522;
  if (rows <= 0 || V <= 0) {
    std::fprintf(stderr, "usage: softmax_ladder [rows > 0] [V > 0]\n");
    return 1;
  }
  if (!has_float_loops("softmax_ladder")) return 1;
  const int threads = num_threads();
  const Ceiling bw = copy_bandwidth();
  std::printf("softmax and cross-entropy over (%lld, %lld), fp32.  %s\n", static_cast<long long>(rows),
              static_cast<long long>(V), cpu_backend_name());
  bw.print("copy bandwidth (read + write)", "GB/s");
  std::printf("\n");

  const auto n = static_cast<std::size_t>(rows * V);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n), gy(n);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (i64 r = 0; r < rows; ++r) {
    // Logits spread like a trained head's, around a per-row offset the max shift removes.
    const float offset = 20.0f * dist(gen);
    for (i64 j = 0; j < V; ++j) x[static_cast<std::size_t>(r * V + j)] = offset + 6.0f * dist(gen);
    targets[static_cast<std::size_t>(r)] =
        r % 13 == 12 ? kIgnore : static_cast<std::int32_t>(std::uniform_int_distribution<i64>(0, V - 1)(gen));
  }
  for (float& v : gy) v = dist(gen);

  // The oracle: the reference in float64. The backward steps read the reference's forward
  // results (y, lse, count), so each direction's error is its own.
  std::vector<double> y_ref(n), gx_ref(n), gl_ref(n), lse_ref(static_cast<std::size_t>(rows));
  double loss_ref = 0, count_ref = 0;
  {
    const std::vector<double> xd(x.begin(), x.end()), gyd(gy.begin(), gy.end());
    const double gloss = 1.0;
    ref_table_f64().softmax_forward(xd.data(), y_ref.data(), rows, V, false);
    ref_table_f64().softmax_backward(y_ref.data(), gyd.data(), gx_ref.data(), rows, V, false);
    ref_table_f64().cross_entropy_forward(xd.data(), targets.data(), rows, V, kIgnore, lse_ref.data(), &loss_ref,
                                          &count_ref);
    ref_table_f64().cross_entropy_backward(xd.data(), targets.data(), lse_ref.data(), &count_ref, &gloss, rows, V,
                                           kIgnore, gl_ref.data());
  }
  const std::vector<float> y_in(y_ref.begin(), y_ref.end()), lse_in(lse_ref.begin(), lse_ref.end());
  const float count_in = float(count_ref), gloss_in = 1.0f;

  std::vector<Step> steps = {
      {"1 reference (double, scalar)", 1, ref_table_f32().softmax_forward, ref_table_f32().softmax_backward,
       ref_table_f32().cross_entropy_forward, ref_table_f32().cross_entropy_backward},
      {"2 float loops, pass by pass", 1, LADDER_PICK(three_pass_softmax), LADDER_PICK(float_softmax_backward),
       LADDER_PICK(two_pass_cross_entropy), LADDER_PICK(float_cross_entropy_backward)},
      {"3 online max + sum", 1, LADDER_PICK(online_softmax), nullptr, LADDER_PICK(online_cross_entropy), nullptr},
  };
  if (has_avx512()) {
    const KernelTable<float>& cpu = cpu_table_f32();
    steps.push_back({"4 avx512 kernel", 1, cpu.softmax_forward, cpu.softmax_backward, cpu.cross_entropy_forward,
                     cpu.cross_entropy_backward});
    steps.push_back({"5 + all threads", threads, cpu.softmax_forward, cpu.softmax_backward, cpu.cross_entropy_forward,
                     cpu.cross_entropy_backward});
  } else {
    std::printf("(no AVX-512 on this CPU: steps 4-5 skipped)\n");
  }

  std::vector<float> y(n), gx(n), lse(static_cast<std::size_t>(rows));
  float loss = 0, count = 0;
  std::vector<std::vector<Cell>> softmax_cells, ce_cells;
  for (const Step& st : steps) {
    Cell fwd, bwd, ce_fwd, ce_bwd;
    const double elems = double(n);
    if (st.softmax_forward) {
      fwd = timed([&] { st.softmax_forward(x.data(), y.data(), rows, V, false); }, 8 * elems, bw, st.threads);
      fwd.error = max_error(y, y_ref);
    }
    if (st.softmax_backward) {
      bwd = timed([&] { st.softmax_backward(y_in.data(), gy.data(), gx.data(), rows, V, false); }, 12 * elems, bw,
                  st.threads);
      bwd.error = max_error(gx, gx_ref);
    }
    if (st.ce_forward) {
      ce_fwd = timed(
          [&] { st.ce_forward(x.data(), targets.data(), rows, V, kIgnore, lse.data(), &loss, &count); }, 4 * elems,
          bw, st.threads);
      ce_fwd.error = worst(max_error(lse, lse_ref),
                           worst(max_error(std::vector<float>{loss}, std::vector<double>{loss_ref}),
                                 max_error(std::vector<float>{count}, std::vector<double>{count_ref})));
    }
    if (st.ce_backward) {
      ce_bwd = timed(
          [&] {
            st.ce_backward(x.data(), targets.data(), lse_in.data(), &count_in, &gloss_in, rows, V, kIgnore, gx.data());
          },
          8 * elems, bw, st.threads);
      ce_bwd.error = max_error(gx, gl_ref);
    }
    for (Cell* c : {&fwd, &bwd, &ce_fwd, &ce_bwd}) c->ok = c->error.rel < kTolerance;
    softmax_cells.push_back({fwd, bwd});
    ce_cells.push_back({ce_fwd, ce_bwd});
  }
  set_num_threads(threads);

  // One table per operation, printed once every step has run.
  bool all_ok = true;
  for (const auto& [title, cells] : {std::pair{"softmax (log = false)", &softmax_cells},
                                     std::pair{"cross-entropy (fused with its softmax: lse per row, no probabilities)",
                                               &ce_cells}}) {
    std::printf("%s\n", title);
    Table table({"fwd", "bwd"}, "GB/s", "bw");
    table.header();
    for (std::size_t i = 0; i < steps.size(); ++i) table.row(steps[i].name, steps[i].threads, (*cells)[i]);
    std::printf("\n");
    all_ok = all_ok && table.all_ok();
  }
  return all_ok ? 0 : 1;
}
