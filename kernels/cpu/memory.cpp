// The CPU memory table: strided copies done row by row, threaded over rows, when the
// destination is contiguous along the last axis and the source either is too (memcpy: the
// permute/transpose-then-contiguous and cat copies of a training step) or repeats one
// element along it (a fill: a broadcast materialised, as in the backward of a sum); the
// reference element-by-element walk for anything else (a transposed last axis, small
// copies). The ops hand over coalesced layouts, so a row is as long as the layout allows.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/thread_pool.h"
#include "kernels/tables.h"
#include "kernels/ref/nd_index.h"
#include "kernels/ref/ref.h"

namespace wedge::kernels {

namespace {

// Copies `cols` elements to a packed row: the source row as it is (src_step 1) or one
// source element repeated (src_step 0: a broadcast axis, as in the gradient of a sum).
void copy_row(unsigned char* to, const unsigned char* from, i64 src_step, i64 cols, int elem_size) {
  const std::size_t bytes = static_cast<std::size_t>(cols) * static_cast<std::size_t>(elem_size);
  if (src_step == 1) {
    std::memcpy(to, from, bytes);
  } else if (elem_size == 4) {
    std::uint32_t v;
    std::memcpy(&v, from, 4);
    std::fill_n(reinterpret_cast<std::uint32_t*>(to), cols, v);
  } else {
    std::uint64_t v;
    std::memcpy(&v, from, 8);
    std::fill_n(reinterpret_cast<std::uint64_t*>(to), cols, v);
  }
}

void cpu_strided_copy(const CopyLayout& l, const void* src, void* dst, int elem_size) {
  if (l.ndim < 1) return ref::strided_copy(l, src, dst, elem_size);
  const int last = l.ndim - 1;
  i64 rows = 1;
  for (int d = 0; d < last; ++d) rows *= l.shape[d];
  const i64 cols = l.shape[last], src_step = l.stride_src[last];
  const bool broadcast_row = src_step == 0 && (elem_size == 4 || elem_size == 8);
  if (rows * cols < 4096 || l.stride_dst[last] != 1 || (src_step != 1 && !broadcast_row))
    return ref::strided_copy(l, src, dst, elem_size);
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  parallel_for(0, rows, std::max<i64>(1, (1 << 16) / std::max<i64>(cols, 1)), [&](i64 r0, i64 r1) {
    ref::StridedPairWalker walk(last, l.shape, l.stride_src, l.stride_dst);
    walk.seek(r0);
    for (i64 r = r0; r < r1; ++r, walk.next())
      copy_row(to + walk.second() * elem_size, from + walk.first() * elem_size, src_step, cols, elem_size);
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
