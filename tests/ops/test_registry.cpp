// The op registry against the kernel tables: `wedge ops` answers from op_has_kernels, so
// an op whose kernels a device holds must report that device, on every table compiled in.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>

#include "engine/kernel_table.h"
#include "ops/ops.h"

namespace wedge {
namespace {

TEST_CASE("kernel list: unique names, and the tables hold exactly one pointer per typed kernel") {
  std::set<std::string_view> names(kernels::kernel_names.begin(), kernels::kernel_names.end());
  CHECK(names.size() == kernels::kernel_names.size());
  CHECK(kernels::typed_kernel_count > 0);
  CHECK(kernels::typed_kernel_count < kernels::kernel_count);
  CHECK(kernels::kernel_name(kernels::KernelId::gemm) == "gemm");
  CHECK(kernels::is_memory_kernel(kernels::KernelId::strided_copy));
  CHECK_FALSE(kernels::is_memory_kernel(kernels::KernelId::adam_update));
}

TEST_CASE("registry: unique op names, each naming the kernels it calls") {
  std::set<std::string> names;
  for (const auto& op : ops::registry()) {
    INFO(op.name);
    CHECK(names.insert(op.name).second);
    CHECK_FALSE(op.kernels.empty());
  }
}

TEST_CASE("registry: every op reports every device whose compiled tables hold all its kernels") {
  int devices_checked = 0;
  for (DeviceKind device : {DeviceKind::CPU, DeviceKind::CUDA}) {
    const int kind = static_cast<int>(device);
    const kernels::KernelTable<float>* typed = kernels::compiled_kernel_table(kind);
    const kernels::MemoryTable* memory = kernels::compiled_memory_table(kind);
    if (typed == nullptr) {
      MESSAGE("device kind " << kind << " has no kernels compiled in: skipped");
      continue;
    }
    REQUIRE(memory != nullptr);
    ++devices_checked;
    // Every table wedge builds is complete: the CPU table starts from the reference, the
    // CUDA table has a hand-written kernel for every entry.
    for (int i = 0; i < kernels::kernel_count; ++i) {
      const auto id = static_cast<kernels::KernelId>(i);
      INFO("device kind " << kind << ", kernel " << kernels::kernel_name(id));
      CHECK((kernels::is_memory_kernel(id) ? kernels::has_kernel(*memory, id) : kernels::has_kernel(*typed, id)));
    }
    for (const auto& op : ops::registry()) {
      INFO("device kind " << kind << ", op " << op.name);
      CHECK(ops::op_has_kernels(op, device));
    }
  }
  CHECK(devices_checked >= 1);  // the CPU tables register themselves at start-up
}

TEST_CASE("registry: a device whose table lacks one of an op's kernels does not report the op") {
  // Register a CUDA table with every entry but gate_mix_backward, then put back whatever the
  // build registered.
  const auto* f32 = kernels::compiled_kernel_table(1);
  const auto* f64 = kernels::kernel_table<double>(1);
  const auto* mem = kernels::compiled_memory_table(1);
  const bool usable = kernels::device_usable(1);
  kernels::KernelTable<float> partial = *kernels::kernel_table<float>(0);
  partial.gate_mix_backward = nullptr;
  kernels::register_tables(1, &partial, nullptr, kernels::memory_table(0), false);
  for (const auto& op : ops::registry()) {
    INFO(op.name);
    CHECK(ops::op_has_kernels(op, DeviceKind::CUDA) == (std::string(op.name) != "gate_mix"));
  }
  CHECK(kernels::kernel_table<float>(1) == nullptr);  // compiled in, not usable
  kernels::register_tables(1, f32, f64, mem, usable);
}

}  // namespace
}  // namespace wedge
