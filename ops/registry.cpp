// The op table, generated from ops/registry.def.
#include "engine/kernel_table.h"
#include "ops/ops.h"

namespace wedge::ops {

const std::vector<OpInfo>& registry() {
  // The kernels of an entry are bare names of engine/kernels.def, read as KernelIds.
  using enum kernels::KernelId;
  static const std::vector<OpInfo> ops = {
#define WEDGE_OP(name, diff, summary, ...) OpInfo{#name, diff, summary, {__VA_ARGS__}},
#include "ops/registry.def"
#undef WEDGE_OP
  };
  return ops;
}

bool op_has_kernels(const OpInfo& op, DeviceKind device) {
  const int kind = static_cast<int>(device);
  const kernels::KernelTable<float>* typed = kernels::compiled_kernel_table(kind);
  const kernels::MemoryTable* memory = kernels::compiled_memory_table(kind);
  for (kernels::KernelId id : op.kernels) {
    const bool has = kernels::is_memory_kernel(id) ? memory != nullptr && kernels::has_kernel(*memory, id)
                                                   : typed != nullptr && kernels::has_kernel(*typed, id);
    if (!has) return false;
  }
  return true;
}

}  // namespace wedge::ops
