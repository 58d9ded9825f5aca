// The element-wise kernels, threaded over the elements: fill, the unary maps and their
// backward, and the broadcasting binary maps; one source for both widths (simd.h).
// Unary: the maps a training step leans on (GELU, exp, sigmoid, SiLU, softplus, relu,
// sqrt, scalar add/mul, neg, abs) are vectorised here; log, tanh and pow keep the reference
// loop (they are rare, and a vector version accurate enough to stand in for libm is not
// worth its length here). GELU is the exact one (gelu in simd.h).
// Binary: equal to the reference bit for bit: +, -, *, / of two floats rounded once is
// what the reference's double arithmetic rounds to as well; max/min follow its NaN rule
// (a NaN operand gives NaN); pow keeps the reference loop (libm).
#include "kernels/cpu/simd.h"

#include <algorithm>

#include "engine/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/nd_index.h"

namespace wedge::kernels::cpu::WEDGE_SIMD_ISA {
namespace {

constexpr i64 kGrain = 1 << 14;

inline vf apply(UnaryOp op, vf x, vf param) {
  switch (op) {
    case UnaryOp::Neg:
      return sub(zero(), x);
    case UnaryOp::Exp:
      return exp(x);
    case UnaryOp::Sqrt:
      return sqrt(x);
    case UnaryOp::Sigmoid:
      return sigmoid(x);
    case UnaryOp::Relu:  // NaN > 0 is false: NaN maps to 0, as in the reference
      return keep(greater(x, zero()), x);
    case UnaryOp::Gelu:
      return gelu(x);
    case UnaryOp::AddScalar:
      return add(x, param);
    case UnaryOp::MulScalar:
      return mul(x, param);
    case UnaryOp::Abs:
      return abs(x);
    case UnaryOp::Silu:
      return silu(x);
    case UnaryOp::Softplus:
      return softplus(x);
    default:
      return x;  // not reached: see vectorised()
  }
}

// f'(x) given x and y = f(x).
inline vf derivative(UnaryOp op, vf x, vf y, vf param) {
  const vf one = set1(1.0f);
  switch (op) {
    case UnaryOp::Neg:
      return set1(-1.0f);
    case UnaryOp::Exp:
      return y;
    case UnaryOp::Sqrt:
      return div(set1(0.5f), y);
    case UnaryOp::Sigmoid:
      return mul(y, sub(one, y));
    case UnaryOp::Relu:
      return keep(greater(x, zero()), one);
    case UnaryOp::Gelu:
      return gelu_derivative(x);
    case UnaryOp::AddScalar:
      return one;
    case UnaryOp::MulScalar:
      return param;
    case UnaryOp::Abs:  // sign(x), 0 at 0 and for NaN
      return select(less(x, zero()), set1(-1.0f), keep(greater(x, zero()), one));
    case UnaryOp::Silu:
      return silu_derivative(x);
    case UnaryOp::Softplus:
      return sigmoid(x);
    default:
      return one;  // not reached
  }
}

bool vectorised(UnaryOp op) { return op != UnaryOp::Log && op != UnaryOp::Tanh && op != UnaryOp::PowScalar; }

// ---- binary ---------------------------------------------------------------------------------

inline vf binary_op(BinaryOp op, vf a, vf b) {
  switch (op) {
    case BinaryOp::Add:
      return add(a, b);
    case BinaryOp::Sub:
      return sub(a, b);
    case BinaryOp::Mul:
      return mul(a, b);
    case BinaryOp::Div:
      return div(a, b);
    case BinaryOp::Max:
    case BinaryOp::Min: {
      // max(a, b) is a > b ? a : b (b when equal, as the reference); a NaN operand must
      // give NaN, which the max instruction alone would not.
      const vf r = op == BinaryOp::Max ? max(a, b) : min(a, b);
      return select(unordered(a, b), add(a, b), r);
    }
    default:
      return a;  // Pow: not vectorised (see binary())
  }
}

// out[0, n) = a[i * sa] (op) b[i * sb] with sa, sb in {0, 1}.
void binary_row(BinaryOp op, const float* a, i64 sa, const float* b, i64 sb, float* out, i64 n) {
  const vf a_scalar = set1(*a), b_scalar = set1(*b);
  for (i64 i = 0; i < n; i += kLanes) {
    const vf av = sa ? load_first(a + i, n - i) : a_scalar;
    const vf bv = sb ? load_first(b + i, n - i) : b_scalar;
    store_first(out + i, n - i, binary_op(op, av, bv));
  }
}

}  // namespace

void fill(float* y, float value, i64 n) {
  const vf v = set1(value);
  parallel_for(0, n, kGrain * 4, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += kLanes) store_first(y + i, i1 - i, v);
  });
}

void unary(UnaryOp op, float param, const float* x, float* y, i64 n) {
  if (!vectorised(op)) {
    ref_table_f32().unary(op, param, x, y, n);
    return;
  }
  const vf vparam = set1(param);
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += kLanes) store_first(y + i, i1 - i, apply(op, load_first(x + i, i1 - i), vparam));
  });
}

void unary_backward(UnaryOp op, float param, const float* x, const float* y, const float* gy, float* gx, i64 n,
                    bool accumulate) {
  if (!vectorised(op)) {
    ref_table_f32().unary_backward(op, param, x, y, gy, gx, n, accumulate);
    return;
  }
  const vf vparam = set1(param);
  parallel_for(0, n, kGrain, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; i += kLanes) {
      const i64 m = i1 - i;
      // x or y may be unused by an op (and may then be null): load only what it reads.
      const bool needs_y = op == UnaryOp::Exp || op == UnaryOp::Sqrt || op == UnaryOp::Sigmoid;
      const vf xv = needs_y ? zero() : load_first(x + i, m);
      const vf yv = needs_y ? load_first(y + i, m) : zero();
      vf g = mul(load_first(gy + i, m), derivative(op, xv, yv, vparam));
      if (accumulate) g = add(g, load_first(gx + i, m));
      store_first(gx + i, m, g);
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
  if (rows == 1) {
    // One row (every contiguous operand pair coalesces to one): the threads split it.
    parallel_for(0, inner, kGrain, [&](i64 i0, i64 i1) {
      binary_row(op, a + i0 * sa, sa, b + i0 * sb, sb, out + i0, i1 - i0);
    });
    return;
  }
  // Rows of the last axis; each thread finds the operand offsets of its first row once and
  // steps the outer axes as an odometer from there.
  parallel_for(0, rows, std::max<i64>(1, kGrain / std::max<i64>(inner, 1)), [&](i64 r0, i64 r1) {
    ref::StridedPairWalker walk(nd - 1, layout.shape, layout.stride_a, layout.stride_b);
    walk.seek(r0);
    for (i64 r = r0; r < r1; ++r, walk.next())
      binary_row(op, a + walk.first(), sa, b + walk.second(), sb, out + r * inner, inner);
  });
}

}  // namespace wedge::kernels::cpu::WEDGE_SIMD_ISA
