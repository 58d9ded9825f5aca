// Scalar functions more than one reference kernel evaluates, written once so that every
// kernel using them computes the same numbers.
#pragma once

#include <cmath>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

// sigmoid(x) = 1 / (1 + e^-x), evaluated so that e^(something) never overflows.
inline acc_t sigmoid(acc_t x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  acc_t e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace wedge::kernels::ref
