// The sum of count equal slices, element by element, in the tree order of
// Communicator::tree_mid (engine/distributed.h): the one summation behind every
// collective that adds ranks' values and behind the deterministic sum of a batch's pieces.
//
// Unlike the other reference kernels this one adds in T, not in acc_t: its result is not an
// approximation of a sum but the exact bits of one order of float additions, and every
// backend must produce those bits. It runs on the CPU's own table too (the host
// collectives call it), so it walks the tree once per chunk of elements, adding whole
// chunks, instead of once per element.
#include <algorithm>
#include <cstring>

#include "engine/distributed.h"
#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

namespace {

constexpr i64 kChunk = 512;

// out[0, len) = the sum of slices [lo, hi) at elements [begin, begin + len). out may be the
// first slice's own elements (lo == 0, out == slices + begin): its leaf then copies nothing.
template <typename T>
void tree_chunk(const T* slices, i64 n, i64 lo, i64 hi, i64 begin, i64 len, T* out) {
  if (hi - lo == 1) {
    const T* leaf = slices + lo * n + begin;
    if (leaf != out) std::memcpy(out, leaf, static_cast<std::size_t>(len) * sizeof(T));
    return;
  }
  const auto mid = static_cast<i64>(
      dist::Communicator::tree_mid(static_cast<std::size_t>(lo), static_cast<std::size_t>(hi)));
  T right[kChunk];
  tree_chunk(slices, n, lo, mid, begin, len, out);
  tree_chunk(slices, n, mid, hi, begin, len, right);
  for (i64 i = 0; i < len; ++i) out[i] = out[i] + right[i];
}

}  // namespace

template <typename T>
void tree_sum(const T* slices, i64 n, i64 count, T* out) {
  if (n <= 0 || count <= 0) return;
  for (i64 begin = 0; begin < n; begin += kChunk) {
    const i64 len = std::min(kChunk, n - begin);
    tree_chunk(slices, n, i64{0}, count, begin, len, out + begin);
  }
}

template void tree_sum<float>(const float*, i64, i64, float*);
template void tree_sum<double>(const double*, i64, i64, double*);

}  // namespace wedge::kernels::ref
