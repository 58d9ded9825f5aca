// `wedge ops`: the op registry — each op, the devices that have its kernels, whether it
// is differentiable.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "engine/allocator.h"
#include "kernels/kernels.h"
#include "ops/ops.h"
#include "tools/commands.h"

namespace wedge::tools {

void register_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "List every op of the registry, its devices and whether it is differentiable");
  cmd->callback([] {
    fmt::print("{:<16} {:<22} {:<10} {:<6} {}\n", "op", "kernel", "devices", "grad", "what it computes");
    for (const auto& op : ops::registry()) {
      std::string devices;
      if (ops::op_has_kernel(op, DeviceKind::CPU)) devices += "cpu";
      if (ops::op_has_kernel(op, DeviceKind::CUDA)) devices += devices.empty() ? "cuda" : ",cuda";
      fmt::print("{:<16} {:<22} {:<10} {:<6} {}\n", op.name, op.kernel, devices.empty() ? "-" : devices,
                 op.differentiable ? "yes" : "no", op.summary);
    }
    fmt::print("\n{} ops. CPU kernels: {}. CUDA: {}.\n", ops::registry().size(), kernels::cpu_backend_name(),
#ifdef WEDGE_HAVE_CUDA
               has_allocator(DeviceKind::CUDA) ? "built in, device present" : "built in, no device found"
#else
               "not built (no nvcc at configure time)"
#endif
    );
  });
}

}  // namespace wedge::tools
