// The precision of matrix products: fp32, or bf16 mixed precision.
//
// Under Precision::BF16 every matmul and linear (and so every model's projections, the
// feed-forward layers and the tied output head, in the forward and in the backward) asks the
// device's GEMM to round its operands to bfloat16 and accumulate in fp32 (GemmArgs in
// engine/kernel_table.h). Nothing else changes: tensors, weights, the optimizer state and
// every other kernel (layer norm, softmax, cross-entropy, attention, the Plücker mixing, the
// selective scan, reductions) stay fp32. A product's backward uses the precision its
// forward ran in. float64 tensors (gradient checks) always multiply in float64.
//
// The setting is per thread, like autograd's recording switch, and scoped:
//   { MatmulPrecisionGuard bf16(Precision::BF16); loss = model.loss(batch); loss.backward(); }
#pragma once

#include <string_view>

#include "engine/kernel_table.h"

namespace wedge {

using kernels::Precision;

// The precision matrix products on this thread run in now (F32 unless a guard says else).
Precision matmul_precision();

// Sets the precision of matrix products on this thread for its scope.
class MatmulPrecisionGuard {
 public:
  explicit MatmulPrecisionGuard(Precision precision);
  ~MatmulPrecisionGuard();
  MatmulPrecisionGuard(const MatmulPrecisionGuard&) = delete;
  MatmulPrecisionGuard& operator=(const MatmulPrecisionGuard&) = delete;

 private:
  Precision previous_;
};

// "fp32" / "bf16"; parse_precision throws std::invalid_argument naming the accepted values.
const char* precision_name(Precision precision);
Precision parse_precision(std::string_view name);

}  // namespace wedge
