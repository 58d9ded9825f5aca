// The CPU strided copy against the reference walk: permutes, narrow windows (cat),
// broadcast sources, odd sizes, every element size.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/tables.h"

using namespace wedge::kernels;

namespace {

// Copies the (possibly permuted) view `shape` with `perm` of a packed source of the same
// element count into a destination window of width `pad` extra columns.
void check_copy(std::vector<i64> shape, std::vector<int> perm, i64 pad, int elem_size, bool broadcast_first) {
  const int n = static_cast<int>(shape.size());
  std::vector<i64> base(n);  // the source's packed shape before the permute
  for (int d = 0; d < n; ++d) base[perm[d]] = shape[d];
  std::vector<i64> base_strides(n);
  i64 acc = 1;
  for (int d = n - 1; d >= 0; --d) base_strides[d] = acc, acc *= base[d];
  CopyLayout l;
  l.ndim = n;
  i64 dst_acc = 1;
  for (int d = n - 1; d >= 0; --d) {
    l.shape[d] = shape[d];
    l.stride_src[d] = base_strides[perm[d]];
    if (broadcast_first && d == 0) l.stride_src[d] = 0;
    l.stride_dst[d] = dst_acc;
    dst_acc *= shape[d] + (d == n - 1 ? pad : 0);
  }
  std::vector<unsigned char> src(static_cast<std::size_t>(acc * elem_size));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  std::vector<unsigned char> want(static_cast<std::size_t>(dst_acc * elem_size), 0xAB), got = want;
  ref_memory_table().strided_copy(l, src.data(), want.data(), elem_size);
  memory_table(0)->strided_copy(l, src.data(), got.data(), elem_size);
  CHECK(want == got);
}

}  // namespace

TEST_CASE("CPU strided_copy equals the reference walk") {
  for (int es : {1, 2, 4, 8}) {
    INFO("element size " << es);
    check_copy({64, 128}, {0, 1}, 0, es, false);            // plain packed copy
    check_copy({32, 4, 128, 64}, {0, 2, 1, 3}, 0, es, false);  // heads split (B, L, H, dh) -> (B, H, L, dh)
    check_copy({33, 257}, {0, 1}, 31, es, false);           // into a cat window
    check_copy({7, 1000}, {1, 0}, 0, es, false);            // a transpose: reference path
    check_copy({3, 5, 1031}, {0, 1, 2}, 3, es, true);      // broadcast source rows
    check_copy({1}, {0}, 0, es, false);
  }
}
