// Softmax, log-softmax and softmax cross-entropy over the last axis for CPUs with AVX2 but
// not AVX-512: softmax_avx512.cpp on 8 lanes, the same steps in the same order (subtract
// the row max, exponentiate, sum the exponentials in double so that a 30k-wide vocabulary
// row loses no precision), row tails through masked loads and stores.
//
// Each row is computed by one thread with a fixed order of operations, and the loss is
// summed over rows serially afterwards: results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx2.h"

namespace wedge::kernels::cpu::avx2 {
namespace {

// Rows per parallel chunk: enough elements that a chunk outweighs the hand-off.
i64 row_grain(i64 n) { return n >= 4096 ? 1 : 4096 / (n < 1 ? 1 : n) + 1; }

float row_max(const float* x, i64 n) {
  const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m = lowest;
  i64 j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
  if (j < n) m = _mm256_max_ps(m, _mm256_blendv_ps(lowest, load_first(x + j, n - j),
                                                    _mm256_castsi256_ps(first_lanes8(n - j))));
  return hmax8(m);
}

// Adds the 8 floats of e to the two double accumulators.
inline void add_in_double(__m256 e, __m256d& s0, __m256d& s1) {
  s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
  s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
}

// sum_j exp(x_j - max), in double; `next` (the next row, n long) is requested into L2
// meanwhile, as in the AVX-512 kernel.
double row_sum_exp(const float* x, i64 n, float max, const float* next = nullptr) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  i64 j = 0;
  for (; j + 8 <= n; j += 8) {
    if (next != nullptr && j % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T1);
    add_in_double(exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmax)), s0, s1);
  }
  if (j < n) {
    const __m256 valid = _mm256_castsi256_ps(first_lanes8(n - j));
    add_in_double(_mm256_and_ps(valid, exp8(_mm256_sub_ps(load_first(x + j, n - j), vmax))), s0, s1);
  }
  const __m256d s = _mm256_add_pd(s0, s1);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
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
      const __m256 vmax = _mm256_set1_ps(m);
      if (log) {
        // (x - m) - log s, not x - (m + log s): with large logits m + log s would be
        // rounded to the coarse float spacing near m.
        const __m256 log_s = _mm256_set1_ps(float(std::log(s)));
        for (i64 j = 0; j < n; j += 8) {
          const __m256 shifted = _mm256_sub_ps(load_first(xr + j, n - j), vmax);
          store_first(yr + j, n - j, _mm256_sub_ps(shifted, log_s));
        }
      } else {
        const __m256 inv = _mm256_set1_ps(float(1.0 / s));
        for (i64 j = 0; j < n; j += 8) {
          const __m256 e = exp8(_mm256_sub_ps(load_first(xr + j, n - j), vmax));
          store_first(yr + j, n - j, _mm256_mul_ps(e, inv));
        }
      }
    }
  });
}

void softmax_backward(const float* y, const float* gy, float* gx, i64 rows, i64 n, bool log) {
  parallel_for(0, rows, row_grain(n), [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const float* yr = y + r * n;
      const float* gyr = gy + r * n;
      float* gxr = gx + r * n;
      __m256 acc = _mm256_setzero_ps();
      for (i64 j = 0; j < n; j += 8) {
        const __m256 g = load_first(gyr + j, n - j);
        acc = log ? _mm256_add_ps(acc, g) : _mm256_fmadd_ps(g, load_first(yr + j, n - j), acc);
      }
      const __m256 sum = _mm256_set1_ps(hsum8(acc));
      for (i64 j = 0; j < n; j += 8) {
        const __m256 g = load_first(gyr + j, n - j);
        const __m256 yv = load_first(yr + j, n - j);
        const __m256 out = log ? _mm256_fnmadd_ps(exp8(yv), sum, g) : _mm256_mul_ps(yv, _mm256_sub_ps(g, sum));
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
      const __m256 vlse = _mm256_set1_ps(ignored ? 0.0f : lse[r]);
      const __m256 vscale = _mm256_set1_ps(ignored ? 0.0f : scale);
      // p * scale for elements [j, j + 8) (those past `valid` read as zero), the target's
      // lane replaced by its own gradient.
      auto chunk = [&](i64 j, i64 valid) {
        __m256 g = _mm256_setzero_ps();
        if (!ignored) g = _mm256_mul_ps(exp8(_mm256_sub_ps(load_first(row + j, valid), vlse)), vscale);
        if (t >= j && t < j + 8) {
          const __m256 at_target =
              _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                     _mm256_set1_epi32(static_cast<int>(t - j))));
          g = _mm256_blendv_ps(g, _mm256_set1_ps(target_grad), at_target);
        }
        return g;
      };
      i64 j = 0;
      if (stream) {
        // Up to the first 32-byte boundary with ordinary stores, then whole vectors.
        const i64 head = std::min<i64>(V, ((32 - reinterpret_cast<std::uintptr_t>(grow) % 32) % 32) / 4);
        if (head > 0) store_first(grow, head, chunk(0, head));
        for (j = head; j + 8 <= V; j += 8) _mm256_stream_ps(grow + j, chunk(j, 8));
      }
      for (; j < V; j += 8) store_first(grow + j, V - j, chunk(j, V - j));
    }
    if (stream) _mm_sfence();  // streaming stores are weakly ordered: publish them
  });
}

}  // namespace wedge::kernels::cpu::avx2
