#include "engine/precision.h"

#include <stdexcept>
#include <string>

namespace wedge {

namespace {
thread_local Precision t_matmul_precision = Precision::F32;
}

Precision matmul_precision() { return t_matmul_precision; }

MatmulPrecisionGuard::MatmulPrecisionGuard(Precision precision) : previous_(t_matmul_precision) {
  t_matmul_precision = precision;
}
MatmulPrecisionGuard::~MatmulPrecisionGuard() { t_matmul_precision = previous_; }

const char* precision_name(Precision precision) { return precision == Precision::BF16 ? "bf16" : "fp32"; }

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::F32;
  if (name == "bf16") return Precision::BF16;
  throw std::invalid_argument("unknown precision '" + std::string(name) + "' (expected fp32 or bf16)");
}

}  // namespace wedge
