// Scalar functions more than one reference kernel evaluates, written once so that every
// kernel using them computes the same numbers.
#pragma once

#include <cmath>

#include "kernels/ref/ref.h"

namespace wedge::kernels::ref {

// The standard normal CDF Phi(x) = (1 + erf(x / sqrt 2)) / 2 and density phi(x): the exact
// GELU x Phi(x) and its derivative Phi(x) + x phi(x), in the unary kernels and the GEMM's
// epilogue alike.
inline acc_t normal_cdf(acc_t x) { return 0.5 * (1.0 + std::erf(x * 0.70710678118654752440)); }
inline acc_t normal_pdf(acc_t x) { return 0.39894228040143267794 * std::exp(-0.5 * x * x); }

// sigmoid(x) = 1 / (1 + e^-x), evaluated so that e^(something) never overflows.
inline acc_t sigmoid(acc_t x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  acc_t e = std::exp(x);
  return e / (1.0 + e);
}

// softplus(x) = log(1 + e^x) = max(x, 0) + log1p(e^-|x|): e^-|x| <= 1 never overflows,
// and log1p keeps full precision where e^-|x| is tiny (large |x|).
inline acc_t softplus(acc_t x) { return (x > 0 ? x : 0.0) + std::log1p(std::exp(-std::fabs(x))); }

// silu(x) = x sigmoid(x), and its derivative (x s)' = s + x s (1 - s) = s (1 + x (1 - s)).
inline acc_t silu(acc_t x) { return x * sigmoid(x); }
inline acc_t silu_derivative(acc_t x) {
  const acc_t s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

}  // namespace wedge::kernels::ref
