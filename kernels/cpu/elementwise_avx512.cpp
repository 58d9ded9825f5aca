// AVX-512 element-wise kernels, threaded over the elements: fill, the unary maps and
// their backward, and the broadcasting binary maps (declared in elementwise.h).
// Unary: the maps a training step leans on (GELU, exp, sigmoid, SiLU, softplus, relu,
// sqrt, scalar add/mul, neg, abs) are vectorised here; log, tanh and pow keep the reference loop (they
// are rare, and a vector version accurate enough to stand in for libm is not worth its
// length here). GELU is the exact one (gelu_ps in simd_avx512.h).
// Binary: equal to the reference bit for bit: +, -, *, / of two floats rounded once is
// what the reference's double arithmetic rounds to as well; max/min follow its NaN rule
// (a NaN operand gives NaN); pow keeps the reference loop (libm).
#include <algorithm>
#include <cmath>

#include "engine/thread_pool.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/nd_index.h"
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
    case UnaryOp::Silu:
      return silu_ps(x);
    case UnaryOp::Softplus:
      return softplus_ps(x);
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
    case UnaryOp::Silu:
      return silu_derivative_ps(x);
    case UnaryOp::Softplus:
      return sigmoid_ps(x);
    default:
      return one;  // not reached
  }
}

bool vectorised(UnaryOp op) {
  return op != UnaryOp::Log && op != UnaryOp::Tanh && op != UnaryOp::PowScalar;
}

// ---- binary ---------------------------------------------------------------------------------

inline __m512 binary_op(BinaryOp op, __m512 a, __m512 b) {
  switch (op) {
    case BinaryOp::Add:
      return _mm512_add_ps(a, b);
    case BinaryOp::Sub:
      return _mm512_sub_ps(a, b);
    case BinaryOp::Mul:
      return _mm512_mul_ps(a, b);
    case BinaryOp::Div:
      return _mm512_div_ps(a, b);
    case BinaryOp::Max:
    case BinaryOp::Min: {
      // vmaxps(a, b) is a > b ? a : b (b when equal, as the reference); a NaN operand
      // must give NaN, which vmaxps would not.
      __m512 r = op == BinaryOp::Max ? _mm512_max_ps(a, b) : _mm512_min_ps(a, b);
      const __mmask16 nan = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
      return _mm512_mask_add_ps(r, nan, a, b);
    }
    default:
      return a;  // Pow: not vectorised (see binary())
  }
}

// out[0, n) = a[i * sa] (op) b[i * sb] with sa, sb in {0, 1}.
void binary_row(BinaryOp op, const float* a, i64 sa, const float* b, i64 sb, float* out, i64 n) {
  const __m512 a_scalar = _mm512_set1_ps(*a), b_scalar = _mm512_set1_ps(*b);
  for (i64 i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
    const __m512 av = sa ? _mm512_maskz_loadu_ps(mask, a + i) : a_scalar;
    const __m512 bv = sb ? _mm512_maskz_loadu_ps(mask, b + i) : b_scalar;
    _mm512_mask_storeu_ps(out + i, mask, binary_op(op, av, bv));
  }
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

void binary(BinaryOp op, const BroadcastLayout& layout, const float* a, const float* b,
            float* out) {
  const int nd = layout.ndim;
  const i64 inner = nd > 0 ? layout.shape[nd - 1] : 1;
  const i64 sa = nd > 0 ? layout.stride_a[nd - 1] : 0, sb = nd > 0 ? layout.stride_b[nd - 1] : 0;
  if (op == BinaryOp::Pow || sa > 1 || sb > 1 || sa < 0 || sb < 0) {
    ref_table_f32().binary(op, layout, a, b, out);
    return;
  }
  i64 rows = 1;
  for (int d = 0; d + 1 < nd; ++d) rows *= layout.shape[d];
  if (rows * inner == 0) return;
  // Rows of the last axis; each thread finds the operand offsets of its first row once and
  // steps the outer axes as an odometer from there.
  parallel_for(0, rows, std::max<i64>(1, kGrain / std::max<i64>(inner, 1)), [&](i64 r0, i64 r1) {
    ref::StridedPairWalker walk(nd - 1, layout.shape, layout.stride_a, layout.stride_b);
    walk.seek(r0);
    for (i64 r = r0; r < r1; ++r, walk.next())
      binary_row(op, a + walk.first(), sa, b + walk.second(), sb, out + r * inner, inner);
  });
}

}  // namespace wedge::kernels::cpu::avx512
