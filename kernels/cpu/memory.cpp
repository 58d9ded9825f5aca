// The CPU memory table: strided copies done row by row with memcpy when both sides are
// contiguous along the last axis (the permute/transpose-then-contiguous and cat copies of
// a training step), threaded over rows; the reference element-by-element walk for
// anything else (a transposed last axis, small copies).
#include <cstring>

#include "engine/thread_pool.h"
#include "kernels/tables.h"
#include "kernels/ref/nd_index.h"
#include "kernels/ref/ref.h"

namespace wedge::kernels {

namespace {

void cpu_strided_copy(const CopyLayout& l, const void* src, void* dst, int elem_size) {
  const int last = l.ndim - 1;
  i64 rows = 1;
  for (int d = 0; d < last; ++d) rows *= l.shape[d];
  const i64 cols = l.shape[last];
  if (l.ndim < 1 || rows * cols < 4096 || l.stride_src[last] != 1 || l.stride_dst[last] != 1)
    return ref::strided_copy(l, src, dst, elem_size);
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  const std::size_t row_bytes = static_cast<std::size_t>(cols) * static_cast<std::size_t>(elem_size);
  parallel_for(0, rows, std::max<i64>(1, (1 << 16) / std::max<i64>(cols, 1)), [&](i64 r0, i64 r1) {
    ref::StridedPairWalker walk(last, l.shape, l.stride_src, l.stride_dst);
    walk.seek(r0);
    for (i64 r = r0; r < r1; ++r, walk.next())
      std::memcpy(to + walk.second() * elem_size, from + walk.first() * elem_size, row_bytes);
  });
}

MemoryTable make_cpu_memory_table() {
  MemoryTable t = ref_memory_table();
  t.strided_copy = cpu_strided_copy;
  return t;
}

}  // namespace

const MemoryTable& cpu_memory_table() {
  static const MemoryTable table = make_cpu_memory_table();
  return table;
}

}  // namespace wedge::kernels
