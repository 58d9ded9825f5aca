// Softmax, log-softmax and softmax cross-entropy over the last axis, AVX-512, threaded
// over rows. Same math as kernels/ref/softmax.cpp: subtract the row max, exponentiate,
// sum. Sums of exponentials are accumulated in double (two converts and adds per 16
// elements, cheap next to the exp) so a 30k-wide vocabulary row loses no precision.
//
// Each row is computed by one thread with a fixed order of operations, and the loss is
// summed over rows serially afterwards: results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

// Rows per parallel chunk: enough elements that a chunk outweighs the hand-off.
i64 row_grain(i64 n) { return n >= 4096 ? 1 : 4096 / (n < 1 ? 1 : n) + 1; }

float row_max(const float* x, i64 n) {
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  i64 j = 0;
  for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + j));
  if (j < n)
    m = _mm512_mask_max_ps(m, first_lanes(n - j), m,
                           _mm512_maskz_loadu_ps(first_lanes(n - j), x + j));
  return hmax(m);
}

// sum_j exp(x_j - max), in double. The row was just read by row_max, so it comes from
// cache and this loop is bound by the exps; when `next` is given (the next row, n long)
// it is requested into L2 meanwhile, so that row_max of the next row does not wait for
// memory.
double row_sum_exp(const float* x, i64 n, float max, const float* next = nullptr) {
  const __m512 vmax = _mm512_set1_ps(max);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  i64 j = 0;
  for (; j + 16 <= n; j += 16) {
    if (next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next + j), _MM_HINT_T1);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vmax));
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(
        s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  if (j < n) {
    const __mmask16 mask = first_lanes(n - j);
    const __m512 e =
        _mm512_maskz_mov_ps(mask, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + j), vmax)));
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(
        s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
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
      const __m512 vmax = _mm512_set1_ps(m);
      if (log) {
        // (x - m) - log s, not x - (m + log s): with large logits m + log s would be
        // rounded to the coarse float spacing near m.
        const __m512 log_s = _mm512_set1_ps(float(std::log(s)));
        for (i64 j = 0; j < n; j += 16) {
          const __mmask16 mask = first_lanes(n - j);
          const __m512 shifted = _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, xr + j), vmax);
          _mm512_mask_storeu_ps(yr + j, mask, _mm512_sub_ps(shifted, log_s));
        }
      } else {
        const __m512 inv = _mm512_set1_ps(float(1.0 / s));
        for (i64 j = 0; j < n; j += 16) {
          const __mmask16 mask = first_lanes(n - j);
          const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, xr + j), vmax));
          _mm512_mask_storeu_ps(yr + j, mask, _mm512_mul_ps(e, inv));
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
      __m512 acc = _mm512_setzero_ps();
      for (i64 j = 0; j < n; j += 16) {
        const __mmask16 mask = first_lanes(n - j);
        const __m512 g = _mm512_maskz_loadu_ps(mask, gyr + j);
        acc = log ? _mm512_add_ps(acc, g)
                  : _mm512_fmadd_ps(g, _mm512_maskz_loadu_ps(mask, yr + j), acc);
      }
      const __m512 sum = _mm512_set1_ps(hsum(acc));
      for (i64 j = 0; j < n; j += 16) {
        const __mmask16 mask = first_lanes(n - j);
        const __m512 g = _mm512_maskz_loadu_ps(mask, gyr + j);
        const __m512 yv = _mm512_maskz_loadu_ps(mask, yr + j);
        const __m512 out =
            log ? _mm512_fnmadd_ps(exp_ps(yv), sum, g) : _mm512_mul_ps(yv, _mm512_sub_ps(g, sum));
        _mm512_mask_storeu_ps(gxr + j, mask, out);
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
      const __m512 vlse = _mm512_set1_ps(ignored ? 0.0f : lse[r]);
      const __m512 vscale = _mm512_set1_ps(ignored ? 0.0f : scale);
      auto chunk = [&](i64 j, __mmask16 mask) {
        __m512 g = _mm512_setzero_ps();
        if (!ignored)
          g = _mm512_mul_ps(exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, row + j), vlse)),
                            vscale);
        if (t >= j && t < j + 16)
          g = _mm512_mask_mov_ps(g, static_cast<__mmask16>(1u << (t - j)),
                                 _mm512_set1_ps(target_grad));
        return g;
      };
      i64 j = 0;
      if (stream) {
        // Up to the first 64-byte boundary with ordinary stores, then whole lines.
        const i64 head =
            std::min<i64>(V, ((64 - reinterpret_cast<std::uintptr_t>(grow) % 64) % 64) / 4);
        if (head > 0) _mm512_mask_storeu_ps(grow, first_lanes(head), chunk(0, first_lanes(head)));
        for (j = head; j + 16 <= V; j += 16) _mm512_stream_ps(grow + j, chunk(j, 0xFFFF));
      }
      for (; j < V; j += 16) {
        const __mmask16 mask = first_lanes(V - j);
        _mm512_mask_storeu_ps(grow + j, mask, chunk(j, mask));
      }
    }
    if (stream) _mm_sfence();  // streaming stores are weakly ordered: publish them
  });
}

}  // namespace wedge::kernels::cpu::avx512
