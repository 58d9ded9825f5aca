// Inverted dropout: y_i = x_i * keep_i / (1 - p), keep_i = [philox_uniform(seed, offset + i) >= p].
// The mask is a pure function of (seed, offset + i), so backward recomputes it rather
// than storing it, and every device draws the same mask.
#include "engine/philox.h"
#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

namespace {

bool keep_element(float p, std::uint64_t seed, std::uint64_t index) {
  return philox_uniform(seed, index) >= p;
}

// 1 / (1 - p); with p == 1 nothing is kept, so the scale is never used and is set to 0
// rather than dividing by zero.
acc_t keep_scale(float p) { return p < 1.0f ? 1.0 / (1.0 - acc_t(p)) : 0.0; }

}  // namespace

template <typename T>
void dropout_forward(const T* x, T* y, i64 n, float p, std::uint64_t seed, std::uint64_t offset) {
  const acc_t scale = keep_scale(p);
  for (i64 i = 0; i < n; ++i) {
    y[i] = keep_element(p, seed, offset + std::uint64_t(i)) ? T(acc_t(x[i]) * scale) : T(0);
  }
}

// The map is linear in x with the same mask, so gx_i = gy_i * keep_i / (1 - p).
template <typename T>
void dropout_backward(const T* gy, T* gx, i64 n, float p, std::uint64_t seed,
                      std::uint64_t offset) {
  dropout_forward(gy, gx, n, p, seed, offset);
}

#define WEDGE_REF_INSTANTIATE(T)                                                            \
  template void dropout_forward<T>(const T*, T*, i64, float, std::uint64_t, std::uint64_t); \
  template void dropout_backward<T>(const T*, T*, i64, float, std::uint64_t, std::uint64_t);
WEDGE_REF_INSTANTIATE(float)
WEDGE_REF_INSTANTIATE(double)
#undef WEDGE_REF_INSTANTIATE

}  // namespace wedge::kernels::ref
