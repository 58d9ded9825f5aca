// Walking an N-d index space in row-major order while two operands follow it through
// their own element strides. Shared by the broadcasting binary kernel (operands a, b)
// and the strided copy (operands src, dst).
//
// The idea: an N-d index is an odometer. Stepping it adds stride[d] to each operand's
// offset for the last digit d that moves, and undoes the full turn (stride[d] * shape[d])
// for every digit that wraps to 0. So each step costs O(1) on average and never
// multiplies an index by a stride.
#pragma once

#include "kernels/tables.h"

namespace wedge::kernels::ref {

// Number of points in the index space (1 for ndim == 0: a scalar).
inline i64 index_space_size(int ndim, const i64* shape) {
  i64 size = 1;
  for (int d = 0; d < ndim; ++d) size *= shape[d];
  return size;
}

class StridedPairWalker {
 public:
  StridedPairWalker(int ndim, const i64* shape, const i64* stride_first, const i64* stride_second)
      : ndim_(ndim), shape_(shape), stride_first_(stride_first), stride_second_(stride_second) {}

  i64 first() const { return offset_first_; }
  i64 second() const { return offset_second_; }

  // Jump to the index `linear` (in row-major order): where `linear` calls of next() from
  // the start would arrive. Lets each thread start its own part of the space.
  void seek(i64 linear) {
    offset_first_ = offset_second_ = 0;
    for (int d = ndim_ - 1; d >= 0; --d) {
      index_[d] = linear % shape_[d];
      linear /= shape_[d];
      offset_first_ += index_[d] * stride_first_[d];
      offset_second_ += index_[d] * stride_second_[d];
    }
  }

  // Advance to the next index in row-major order (the last dimension moves fastest).
  void next() {
    for (int d = ndim_ - 1; d >= 0; --d) {
      ++index_[d];
      offset_first_ += stride_first_[d];
      offset_second_ += stride_second_[d];
      if (index_[d] < shape_[d]) return;
      // This digit wrapped: rewind it and carry into dimension d - 1.
      index_[d] = 0;
      offset_first_ -= stride_first_[d] * shape_[d];
      offset_second_ -= stride_second_[d] * shape_[d];
    }
  }

 private:
  int ndim_;
  const i64* shape_;
  const i64* stride_first_;
  const i64* stride_second_;
  i64 index_[kMaxDims] = {};
  i64 offset_first_ = 0, offset_second_ = 0;
};

}  // namespace wedge::kernels::ref
