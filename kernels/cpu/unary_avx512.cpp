// Fill, unary element-wise maps and their backward, AVX-512, threaded over the
// elements. The maps a training step leans on (GELU, exp, sigmoid, relu, sqrt, scalar
// add/mul, neg, abs) are vectorised here; log, tanh and pow keep the reference loop (they
// are rare, and a vector version accurate enough to stand in for libm is not worth its
// length here).
// GELU is the exact one (gelu_ps in simd_avx512.h).
#include <cmath>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/simd_avx512.h"

namespace wedge::kernels::cpu::avx512 {
namespace {

constexpr i64 kGrain = 1 << 14;

inline __m512 apply(UnaryOp op, __m512 x, __m512 param) {
  switch (op) {
    case UnaryOp::Neg:
      return _mm512_sub_ps(_mm512_setzero_ps(), x);
    case UnaryOp::Exp:
      return exp_ps(x);
    case UnaryOp::Sqrt:
      return _mm512_sqrt_ps(x);
    case UnaryOp::Sigmoid:
      return sigmoid_ps(x);
    case UnaryOp::Relu:  // NaN > 0 is false: NaN maps to 0, as in the reference
      return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), x);
    case UnaryOp::Gelu:
      return gelu_ps(x);
    case UnaryOp::AddScalar:
      return _mm512_add_ps(x, param);
    case UnaryOp::MulScalar:
      return _mm512_mul_ps(x, param);
    case UnaryOp::Abs:
      return _mm512_abs_ps(x);
    default:
      return x;  // not reached: see vectorised()
  }
}

// f'(x) given x and y = f(x).
inline __m512 derivative(UnaryOp op, __m512 x, __m512 y, __m512 param) {
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  switch (op) {
    case UnaryOp::Neg:
      return _mm512_set1_ps(-1.0f);
    case UnaryOp::Exp:
      return y;
    case UnaryOp::Sqrt:
      return _mm512_div_ps(_mm512_set1_ps(0.5f), y);
    case UnaryOp::Sigmoid:
      return _mm512_mul_ps(y, _mm512_sub_ps(one, y));
    case UnaryOp::Relu:
      return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), one);
    case UnaryOp::Gelu:
      return gelu_derivative_ps(x);
    case UnaryOp::AddScalar:
      return one;
    case UnaryOp::MulScalar:
      return param;
    case UnaryOp::Abs: {  // sign(x), 0 at 0 and for NaN
      const __m512 pos = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), one);
      return _mm512_mask_mov_ps(pos, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ),
                                _mm512_set1_ps(-1.0f));
    }
    default:
      return one;  // not reached
  }
}

bool vectorised(UnaryOp op) {
  return op != UnaryOp::Log && op != UnaryOp::Tanh && op != UnaryOp::PowScalar;
}

}  // namespace

void fill(float* y, float value, i64 n) {
  const __m512 v = _mm512_set1_ps(value);
  parallel_for(0, n, kGrain * 4, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) _mm512_mask_storeu_ps(y + i, first_lanes(i1 - i), v);
  });
}

void unary(UnaryOp op, float param, const float* x, float* y, i64 n) {
  if (!vectorised(op)) {
    ref_table_f32().unary(op, param, x, y, n);
    return;
  }
  const __m512 vparam = _mm512_set1_ps(param);
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) {
      const __mmask16 mask = first_lanes(i1 - i);
      _mm512_mask_storeu_ps(y + i, mask, apply(op, _mm512_maskz_loadu_ps(mask, x + i), vparam));
    }
  });
}

void unary_backward(UnaryOp op, float param, const float* x, const float* y, const float* gy,
                    float* gx, i64 n, bool accumulate) {
  if (!vectorised(op)) {
    ref_table_f32().unary_backward(op, param, x, y, gy, gx, n, accumulate);
    return;
  }
  const __m512 vparam = _mm512_set1_ps(param);
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) {
      const __mmask16 mask = first_lanes(i1 - i);
      // x or y may be unused by an op (and may then be null): load only what it reads.
      const bool needs_y = op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Sigmoid;
      const __m512 xv = needs_y ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, x + i);
      const __m512 yv = needs_y ? _mm512_maskz_loadu_ps(mask, y + i) : _mm512_setzero_ps();
      __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, gy + i), derivative(op, xv, yv, vparam));
      if (accumulate) g = _mm512_add_ps(g, _mm512_maskz_loadu_ps(mask, gx + i));
      _mm512_mask_storeu_ps(gx + i, mask, g);
    }
  });
}

// Gated fusion out = s x + (1 - s) y, s = sigmoid(a), written as y + s (x - y).
void gate_mix_forward(const float* a, const float* x, const float* y, float* out, i64 n) {
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) {
      const __mmask16 m = first_lanes(i1 - i);
      const __m512 s = sigmoid_ps(_mm512_maskz_loadu_ps(m, a + i));
      const __m512 vx = _mm512_maskz_loadu_ps(m, x + i), vy = _mm512_maskz_loadu_ps(m, y + i);
      _mm512_mask_storeu_ps(out + i, m, _mm512_fmadd_ps(s, _mm512_sub_ps(vx, vy), vy));
    }
  });
}

void gate_mix_backward(const float* a, const float* x, const float* y, const float* gout, float* ga, float* gx,
                       float* gy, i64 n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += 16) {
      const __mmask16 m = first_lanes(i1 - i);
      const __m512 s = sigmoid_ps(_mm512_maskz_loadu_ps(m, a + i));
      const __m512 g = _mm512_maskz_loadu_ps(m, gout + i);
      const __m512 diff = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
      const __m512 gs = _mm512_mul_ps(g, s), g_rest = _mm512_sub_ps(g, gs);  // g s, g (1 - s)
      _mm512_mask_storeu_ps(ga + i, m, _mm512_mul_ps(_mm512_mul_ps(gs, diff), _mm512_sub_ps(one, s)));
      _mm512_mask_storeu_ps(gx + i, m, gs);
      _mm512_mask_storeu_ps(gy + i, m, g_rest);
    }
  });
}

}  // namespace wedge::kernels::cpu::avx512
