// The op table, generated from ops/registry.def.
#include <cstring>

#include "kernels/kernels.h"
#include "ops/ops.h"

namespace wedge::ops {

const std::vector<OpInfo>& registry() {
  static const std::vector<OpInfo> ops = {
#define WEDGE_OP(name, kernel, diff, summary) OpInfo{#name, #kernel, diff, summary},
#include "ops/registry.def"
#undef WEDGE_OP
  };
  return ops;
}

namespace {

// Does the float32 table of a device have the member named `kernel`?
bool table_has(const kernels::KernelTable<float>& t, const char* kernel) {
#define WEDGE_HAS(member) \
  if (std::strcmp(kernel, #member) == 0) return t.member != nullptr;
  WEDGE_HAS(gemm) WEDGE_HAS(unary) WEDGE_HAS(binary) WEDGE_HAS(reduce) WEDGE_HAS(embedding_forward)
  WEDGE_HAS(softmax_forward) WEDGE_HAS(cross_entropy_forward) WEDGE_HAS(layer_norm_forward)
  WEDGE_HAS(dropout_forward) WEDGE_HAS(attention_forward) WEDGE_HAS(plucker_forward)
  WEDGE_HAS(plucker_mean_forward)
#undef WEDGE_HAS
  return false;
}

}  // namespace

bool op_has_kernel(const OpInfo& op, DeviceKind device) {
  const int kind = static_cast<int>(device);
  if (std::strcmp(op.kernel, "VIEW") == 0) return kernels::memory_table(kind) != nullptr;
  if (std::strcmp(op.kernel, "COPY") == 0) {
    const auto* m = kernels::memory_table(kind);
    return m != nullptr && m->strided_copy != nullptr;
  }
  const auto* t = kernels::kernel_table<float>(kind);
  return t != nullptr && table_has(*t, op.kernel);
}

}  // namespace wedge::ops
