#include "ops/common.h"

namespace wedge::ops::detail {

void check_floating(const std::string& op, const Tensor& t, const char* what) {
  if (!t.defined()) fail(op, std::string(what) + " is an undefined tensor");
  if (!is_floating(t.dtype())) fail(op, std::string(what) + " must be float32 or float64, got " + t.str());
}

void check_same(const std::string& op, const std::vector<Tensor>& ts) {
  const Tensor* first = nullptr;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    if (first == nullptr) {
      first = &t;
      continue;
    }
    if (t.device() != first->device())
      fail(op, "tensors on different devices: " + first->str() + " and " + t.str() +
                   " (move one with .to(device) explicitly)");
    if (t.dtype() != first->dtype())
      fail(op, "tensors of different dtypes: " + first->str() + " and " + t.str());
  }
}

int wrap_dim(const std::string& op, int dim, int ndim) {
  const int d = dim < 0 ? dim + ndim : dim;
  if (d < 0 || d >= ndim) fail(op, "dim " + std::to_string(dim) + " out of range for a " + std::to_string(ndim) + "-d tensor");
  return d;
}

}  // namespace wedge::ops::detail
