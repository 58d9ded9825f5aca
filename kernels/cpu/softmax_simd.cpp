// Softmax, log-softmax and softmax cross-entropy over the last axis, threaded over rows;
// one source for both widths (simd.h). Same math as kernels/ref/softmax.cpp: subtract the
// row max, exponentiate, sum. Sums of exponentials are accumulated in double (two widenings
// and adds per vector, cheap next to the exp) so a 30k-wide vocabulary row loses no
// precision. Row tails go through masked loads and stores.
//
// Each row is computed by one thread with a fixed order of operations, and the loss is
// summed over rows serially afterwards: results do not depend on the thread count.
#include "kernels/cpu/simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {

// Rows per parallel chunk: enough elements that a chunk outweighs the hand-off.
i64 row_grain(i64 n) { return n >= 4096 ? 1 : 4096 / (n < 1 ? 1 : n) + 1; }

// Floats per 64-byte cache line, the unit of row_sum_exp's prefetches.
constexpr i64 kLineFloats = 64 / sizeof(float);

// m lane by lane with max(m, x) over the row's last count < kLanes elements at x (the
// tail); the lanes past the row keep m as it is (a NaN there stays a NaN).
inline vf max_tail(vf m, const float* x, i64 count) {
  return select(first_lanes(count), max(m, load_first(x, count)), m);
}

float row_max(const float* x, i64 n) {
  vf m = set1(-std::numeric_limits<float>::infinity());
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes) m = max(m, load(x + j));
  if (j < n) m = max_tail(m, x + j, n - j);
  return hmax(m);
}

// Adds the floats of e to the two double accumulators (lower and upper halves).
inline void add_in_double(vf e, vd& s0, vd& s1) {
  s0 = add(s0, widen_lo(e));
  s1 = add(s1, widen_hi(e));
}

// sum_j exp(x_j - max), in double. The row was just read by row_max, so it comes from
// cache and this loop is bound by the exps; when `next` is given (the next row, n long)
// it is requested into L2 meanwhile, one prefetch per cache line, so that row_max of the
// next row does not wait for memory.
double row_sum_exp(const float* x, i64 n, float max, const float* next = nullptr) {
  const vf vmax = set1(max);
  vd s0 = zero_d(), s1 = zero_d();
  i64 j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    if (next != nullptr && (kLanes >= kLineFloats || j % kLineFloats == 0))
      _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T1);
    add_in_double(exp(sub(load(x + j), vmax)), s0, s1);
  }
  if (j < n) {
    const vmask valid = first_lanes(n - j);
    add_in_double(keep(valid, exp(sub(load_first(x + j, n - j), vmax))), s0, s1);
  }
  return hsum(add(s0, s1));
}

// A row whose max is -inf (all -inf) or NaN has no finite shift; fall back to the plain
// definition so the result matches the reference (NaN or a uniform / -inf pattern).
bool finite_max(float m) { return std::isfinite(m); }

}  // namespace

void softmax_forward(const float* x, float* y, i64 rows, i64 n, bool log) {
  parallel_for(0, rows, row_grain(n), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      const float m = row_max(xr, n);
      const double s = row_sum_exp(xr, n, m);
      if (!finite_max(m)) {
        for (i64 j = 0; j < n; ++j) {
          const double shifted = double(xr[j]) - m;
          yr[j] = float(log ? shifted - std::log(s) : std::exp(shifted) / s);
        }
        continue;
      }
      const vf vmax = set1(m);
      if (log) {
        // (x - m) - log s, not x - (m + log s): with large logits m + log s would be
        // rounded to the coarse float spacing near m.
        const vf log_s = set1(float(std::log(s)));
        for (i64 j = 0; j < n; j += kLanes) {
          const vf shifted = sub(load_first(xr + j, n - j), vmax);
          store_first(yr + j, n - j, sub(shifted, log_s));
        }
      } else {
        const vf inv = set1(float(1.0 / s));
        for (i64 j = 0; j < n; j += kLanes) {
          const vf e = exp(sub(load_first(xr + j, n - j), vmax));
          store_first(yr + j, n - j, mul(e, inv));
        }
      }
    }
  });
}

// gx = y (gy - sum(gy y)) for softmax, gy - e^y sum(gy) for log-softmax. The row sum is
// kept in kLanes float partials, added by hsum at the end, so it depends on the width.
void softmax_backward(const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log) {
  parallel_for(0, rows, row_grain(n), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* yr = y + r * n;
      const float* gyr = gy + r * n;
      float* gxr = gx + r * n;
      vf acc = zero();
      for (i64 j = 0; j < n; j += kLanes) {
        const vf g = load_first(gyr + j, n - j);
        acc = log ? add(acc, g) : fmadd(g, load_first(yr + j, n - j), acc);
      }
      const vf sum = set1(hsum(acc));
      for (i64 j = 0; j < n; j += kLanes) {
        const vf g = load_first(gyr + j, n - j);
        const vf yv = load_first(yr + j, n - j);
        const vf out = log ? fnmadd(exp(yv), sum, g) : mul(yv, sub(g, sum));
        store_first(gxr + j, n - j, out);
      }
    }
  });
}

void cross_entropy_forward(const float* logits, const std::int32_t* targets, i64 rows, i64 V,
                           std::int32_t ignore_index, float* lse, float* loss, float* count) {
  parallel_for(0, rows, row_grain(V), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* row = logits + r * V;
      const float m = row_max(row, V);
      if (!finite_max(m)) {  // all -inf or NaN somewhere: defer to the definition
        double s = 0;
        for (i64 j = 0; j < V; ++j) s += std::exp(double(row[j]) - m);
        lse[r] = float(m + std::log(s));
        continue;
      }
      lse[r] = float(double(m) + std::log(row_sum_exp(row, V, m, r + 1 < r1 ? row + V : nullptr)));
    }
  });
  // Serial and in row order: the loss is the same whatever the thread count.
  double total = 0;
  i64 counted = 0;
  for (i64 r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index) continue;
    total += double(lse[r]) - double(logits[r * V + targets[r]]);
    ++counted;
  }
  *loss = counted > 0 ? float(total / double(counted)) : 0.0f;
  *count = float(counted);
}

void cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* lse,
                            const float* count, const float* gloss, i64 rows, i64 V,
                            std::int32_t ignore_index, float* glogits) {
  const float scale = *count > 0.0f ? float(double(*gloss) / double(*count)) : 0.0f;
  // A gradient larger than the caches (4096 x 30522 floats is 0.5 GB) goes to memory
  // anyway: write it with streaming stores, which skip reading each line first.
  const bool stream = rows * V * i64{sizeof(float)} > (i64{32} << 20);
  constexpr i64 kVectorBytes = kLanes * i64{sizeof(float)};
  parallel_for(0, rows, row_grain(V), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* row = logits + r * V;
      float* grow = glogits + r * V;
      const bool ignored = targets[r] == ignore_index;
      const i64 t = ignored ? -1 : targets[r];
      // The target's entry, (p - 1) * scale, in double; read before anything is written
      // (glogits may be the logits buffer).
      const float target_grad =
          ignored ? 0.0f : float((std::exp(double(row[t]) - double(lse[r])) - 1.0) * scale);
      const vf vlse = set1(ignored ? 0.0f : lse[r]);
      const vf vscale = set1(ignored ? 0.0f : scale);
      // p * scale for elements [j, j + kLanes) (those past `valid` read as zero), the
      // target's lane replaced by its own gradient.
      auto chunk = [&](i64 j, i64 valid) {
        vf g = zero();
        if (!ignored) g = mul(exp(sub(load_first(row + j, valid), vlse)), vscale);
        if (t >= j && t < j + kLanes) {
          const vmask at_target = mask_and_not(first_lanes(t - j + 1), first_lanes(t - j));
          g = select(at_target, set1(target_grad), g);
        }
        return g;
      };
      i64 j = 0;
      if (stream) {
        // Up to the first vector-aligned address with ordinary stores, then whole vectors.
        const i64 head = std::min<i64>(
            V, ((kVectorBytes - reinterpret_cast<std::uintptr_t>(grow) % kVectorBytes) % kVectorBytes) / 4);
        if (head > 0) store_first(grow, head, chunk(0, head));
        for (j = head; j + kLanes <= V; j += kLanes) store_stream(grow + j, chunk(j, kLanes));
      }
      for (; j < V; j += kLanes) store_first(grow + j, V - j, chunk(j, V - j));
    }
    if (stream) stream_fence();  // streaming stores are weakly ordered: publish them
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
