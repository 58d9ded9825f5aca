// Type-blind memory movement: strided copy and dtype casts.
// Each output element depends on its own input only, so these are grid-stride loops
// (launch.h: elementwise_blocks) with nothing to synchronise. Layouts are coalesced first
// and indices decomposed with 32-bit division whenever every index and offset fits; a copy
// that is contiguous on both sides is one device-to-device copy.
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace memory_impl {

template <typename Elem, typename Index>
__global__ void strided_copy_kernel(Strided2<Index> layout, i64 n, const Elem* src, Elem* dst) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    Index from, to;
    offsets_of(layout, static_cast<Index>(i), &from, &to);
    dst[to] = src[from];
  }
}

template <typename Elem>
void launch_strided_copy(const CopyLayout& l, i64 n, const void* src, void* dst) {
  const dim3 grid = grid_1d(launch::elementwise_blocks(n));
  const Elem* from = static_cast<const Elem*>(src);
  Elem* to = static_cast<Elem*>(dst);
  if (launch::fits_int32(l.ndim, l.shape, l.stride_src, l.stride_dst)) {
    WEDGE_LAUNCH(grid, launch::kElementwiseThreads, 0, strided_copy_kernel<Elem, std::int32_t>)(
        narrow<std::int32_t>(l.ndim, l.shape, l.stride_src, l.stride_dst), n, from, to);
  } else {
    WEDGE_LAUNCH(grid, launch::kElementwiseThreads, 0, strided_copy_kernel<Elem, i64>)(
        narrow<i64>(l.ndim, l.shape, l.stride_src, l.stride_dst), n, from, to);
  }
  check_launch("strided_copy_kernel");
}

// dtype codes of engine/dtype.h
constexpr int kF32 = 0, kF64 = 1, kI32 = 2;

// Conversions go through double (exact for every f32 and i32 value). Float to int
// truncates toward zero, saturates out of range and maps NaN to 0, as kernels/ref does.
__device__ __forceinline__ double read_as_double(const void* src, int dtype, i64 i) {
  if (dtype == kF32) return static_cast<const float*>(src)[i];
  if (dtype == kF64) return static_cast<const double*>(src)[i];
  return static_cast<const std::int32_t*>(src)[i];
}
__device__ __forceinline__ std::int32_t to_int32(double x) {
  if (x != x) return 0;
  if (x >= 2147483647.0) return 2147483647;
  if (x <= -2147483648.0) return -2147483647 - 1;
  return static_cast<std::int32_t>(x);
}
__global__ void cast_kernel(const void* src, int src_dtype, void* dst, int dst_dtype, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    const double x = read_as_double(src, src_dtype, i);
    if (dst_dtype == kF32) {
      static_cast<float*>(dst)[i] = static_cast<float>(x);
    } else if (dst_dtype == kF64) {
      static_cast<double*>(dst)[i] = x;
    } else if (dst_dtype == kI32) {
      static_cast<std::int32_t*>(dst)[i] = to_int32(x);
    }
  }
}

}  // namespace memory_impl

using namespace memory_impl;

void strided_copy(const CopyLayout& layout, const void* src, void* dst, int elem_size) {
  const CopyLayout l = coalesce(layout);
  const i64 n = launch::layout_size(l.ndim, l.shape);
  if (n == 0) return;
  // Both sides contiguous (the common "make contiguous of an already contiguous range"
  // or a plain clone): one device-to-device copy.
  if (l.ndim == 1 && l.stride_src[0] == 1 && l.stride_dst[0] == 1) {
    copy_device_async(dst, src, static_cast<std::size_t>(n) * static_cast<std::size_t>(elem_size));
    return;
  }
  switch (elem_size) {
    case 1: return launch_strided_copy<std::uint8_t>(l, n, src, dst);
    case 2: return launch_strided_copy<std::uint16_t>(l, n, src, dst);
    case 4: return launch_strided_copy<std::uint32_t>(l, n, src, dst);
    case 8: return launch_strided_copy<std::uint64_t>(l, n, src, dst);
  }
  throw std::invalid_argument("cuda strided_copy: element size " + std::to_string(elem_size) +
                              " (expected 1, 2, 4 or 8)");
}

void cast(const void* src, int src_dtype, void* dst, int dst_dtype, i64 n) {
  if (n <= 0) return;
  if (src_dtype == dst_dtype) {
    copy_device_async(dst, src, static_cast<std::size_t>(n) * (src_dtype == kF64 ? 8u : 4u));
    return;
  }
  WEDGE_LAUNCH(grid_1d(launch::elementwise_blocks(n)), launch::kElementwiseThreads, 0, cast_kernel)(
      src, src_dtype, dst, dst_dtype, n);
  check_launch("cast_kernel");
}

}  // namespace wedge::kernels::WEDGE_CUDA_NS
