// `wedge ops`: the op registry — each op, the devices whose compiled tables have all of its
// kernels, whether it is differentiable, and the kernels it calls.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <string>

#include "kernels/cpu/cpu.h"
#include "kernels/tables.h"
#include "ops/ops.h"
#include "tools/commands.h"

namespace wedge::tools {

void register_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "List every op of the registry, the devices that have its kernels, "
                                        "whether it is differentiable, and the kernels it calls");
  cmd->callback([] {
    fmt::print("{:<16} {:<10} {:<5} {:<48} {}\n", "op", "devices", "grad", "kernels", "what it computes");
    for (const auto& op : ops::registry()) {
      std::string devices, names;
      if (ops::op_has_kernels(op, DeviceKind::CPU)) devices += "cpu";
      if (ops::op_has_kernels(op, DeviceKind::CUDA)) devices += devices.empty() ? "cuda" : ",cuda";
      for (kernels::KernelId id : op.kernels) names += (names.empty() ? "" : " ") + std::string(kernels::kernel_name(id));
      fmt::print("{:<16} {:<10} {:<5} {:<48} {}\n", op.name, devices.empty() ? "-" : devices,
                 op.differentiable ? "yes" : "no", names, op.summary);
    }
    const bool cuda_built = kernels::compiled_kernel_table(static_cast<int>(DeviceKind::CUDA)) != nullptr;
    const bool cuda_present = kernels::device_usable(static_cast<int>(DeviceKind::CUDA));
    fmt::print("\n{} ops, {} kernels. CPU kernels: {}; bf16 GEMM: {}. CUDA: {}.\n", ops::registry().size(),
               kernels::kernel_count, kernels::cpu_backend_name(), kernels::bf16_gemm_description(),
               !cuda_built     ? "not built (no nvcc at configure time)"
               : cuda_present  ? "built in, device present"
                               : "built in, no device found (the cuda column lists the compiled kernels)");
  });
}

}  // namespace wedge::tools
