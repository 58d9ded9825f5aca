// Type-blind memory movement: strided copy and dtype conversion.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/ref/nd_index.h"
#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

// dst[idx . stride_dst] = src[idx . stride_src] for every idx of the shape, moving
// elem_size bytes per element. A transpose, a slice, making a view contiguous: all are
// this one loop with different strides.
void strided_copy(const CopyLayout& layout, const void* src, void* dst, int elem_size) {
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  const i64 size = index_space_size(layout.ndim, layout.shape);
  StridedPairWalker walk(layout.ndim, layout.shape, layout.stride_src, layout.stride_dst);
  for (i64 i = 0; i < size; ++i, walk.next()) {
    std::memcpy(to + walk.second() * elem_size, from + walk.first() * elem_size,
                std::size_t(elem_size));
  }
}

namespace {

// dtype codes of engine/dtype.h
constexpr int kF32 = 0, kF64 = 1, kI32 = 2;

// Every f32 and i32 value is exactly representable in double, so reading through double
// loses nothing and needs one conversion per source type instead of one per pair.
double read_as_double(const void* src, int dtype, i64 i) {
  switch (dtype) {
    case kF32: return static_cast<const float*>(src)[i];
    case kF64: return static_cast<const double*>(src)[i];
    case kI32: return static_cast<const std::int32_t*>(src)[i];
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Float to int truncates toward zero (as C does); out-of-range values saturate and NaN
// becomes 0, which is what CUDA's conversion instructions do, so both devices agree.
std::int32_t to_int32(double x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483647.0) return std::numeric_limits<std::int32_t>::max();
  if (x <= -2147483648.0) return std::numeric_limits<std::int32_t>::min();
  return static_cast<std::int32_t>(x);
}

}  // namespace

void cast(const void* src, int src_dtype, void* dst, int dst_dtype, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    const double x = read_as_double(src, src_dtype, i);
    switch (dst_dtype) {
      case kF32: static_cast<float*>(dst)[i] = static_cast<float>(x); break;
      case kF64: static_cast<double*>(dst)[i] = x; break;
      case kI32: static_cast<std::int32_t*>(dst)[i] = to_int32(x); break;
    }
  }
}

}  // namespace wedge::kernels::ref
