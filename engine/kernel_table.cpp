// The one dispatch point: which kernel table serves a device kind.
// Every device's backend registers its tables at start-up from a static registrar in its
// own room (kernels/cpu/table.cpp, kernels/cuda/table.cu), so the engine names no backend
// and a build without CUDA has nothing to leave out.
#include "engine/kernel_table.h"

#include <atomic>
#include <stdexcept>
#include <string>

namespace wedge::kernels {

namespace {

constexpr int kDeviceKinds = 2;  // CPU, CUDA (engine/device.h DeviceKind)

// Registered tables of one device kind. Atomics so a lookup needs no lock and a
// registration from a static initialiser is visible to every thread that looks later.
struct RegisteredTables {
  std::atomic<const KernelTable<float>*> f32{nullptr};
  std::atomic<const KernelTable<double>*> f64{nullptr};
  std::atomic<const MemoryTable*> memory{nullptr};
  std::atomic<bool> usable{false};
};

// A function-local static, so registration works from other files' static initialisers
// whatever order the linker puts them in.
RegisteredTables* registered(int device_kind) {
  static RegisteredTables tables[kDeviceKinds];
  if (device_kind < 0 || device_kind >= kDeviceKinds) return nullptr;
  return &tables[device_kind];
}

}  // namespace

bool device_usable(int device_kind) {
  const RegisteredTables* slot = registered(device_kind);
  return slot != nullptr && slot->usable.load(std::memory_order_acquire);
}

template <>
const KernelTable<float>* kernel_table<float>(int device_kind) {
  return device_usable(device_kind) ? compiled_kernel_table(device_kind) : nullptr;
}

template <>
const KernelTable<double>* kernel_table<double>(int device_kind) {
  if (!device_usable(device_kind)) return nullptr;
  return registered(device_kind)->f64.load(std::memory_order_acquire);
}

const MemoryTable* memory_table(int device_kind) {
  return device_usable(device_kind) ? compiled_memory_table(device_kind) : nullptr;
}

const KernelTable<float>* compiled_kernel_table(int device_kind) {
  const RegisteredTables* slot = registered(device_kind);
  return slot == nullptr ? nullptr : slot->f32.load(std::memory_order_acquire);
}

const MemoryTable* compiled_memory_table(int device_kind) {
  const RegisteredTables* slot = registered(device_kind);
  return slot == nullptr ? nullptr : slot->memory.load(std::memory_order_acquire);
}

void register_tables(int device_kind, const KernelTable<float>* f32, const KernelTable<double>* f64,
                     const MemoryTable* mem, bool usable) {
  RegisteredTables* slot = registered(device_kind);
  if (slot == nullptr) {
    throw std::invalid_argument("register_tables: unknown device kind " + std::to_string(device_kind) +
                                " (known kinds are 0 = CPU, 1 = CUDA)");
  }
  slot->f32.store(f32, std::memory_order_release);
  slot->f64.store(f64, std::memory_order_release);
  slot->memory.store(mem, std::memory_order_release);
  slot->usable.store(usable, std::memory_order_release);
}

}  // namespace wedge::kernels
