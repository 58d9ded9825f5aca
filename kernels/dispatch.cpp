// The one dispatch point: which kernel table serves a device kind.
// CPU tables are built in (kernels/cpu: the reference plus optimized overrides). Other
// devices register theirs at start-up, typically from a static registrar in their own
// room, so this file never names CUDA and a CPU-only build has nothing to leave out.
#include <atomic>
#include <stdexcept>
#include <string>

#include "kernels/kernels.h"

namespace wedge::kernels {

namespace {

constexpr int kCpu = 0;
constexpr int kDeviceKinds = 2;  // CPU, CUDA (engine/device.h DeviceKind)

// Registered tables of one device kind. Atomics so a lookup needs no lock and a
// registration from a static initialiser is visible to every thread that looks later.
struct RegisteredTables {
  std::atomic<const KernelTable<float>*> f32{nullptr};
  std::atomic<const KernelTable<double>*> f64{nullptr};
  std::atomic<const MemoryTable*> memory{nullptr};
};

// A function-local static, so registration works from other files' static initialisers
// whatever order the linker puts them in.
RegisteredTables& registered(int device_kind) {
  static RegisteredTables tables[kDeviceKinds];
  return tables[device_kind];
}

bool is_registrable(int device_kind) { return device_kind > kCpu && device_kind < kDeviceKinds; }

}  // namespace

template <>
const KernelTable<float>* kernel_table<float>(int device_kind) {
  if (device_kind == kCpu) return &cpu_table_f32();
  if (!is_registrable(device_kind)) return nullptr;
  return registered(device_kind).f32.load(std::memory_order_acquire);
}

template <>
const KernelTable<double>* kernel_table<double>(int device_kind) {
  if (device_kind == kCpu) return &cpu_table_f64();
  if (!is_registrable(device_kind)) return nullptr;
  return registered(device_kind).f64.load(std::memory_order_acquire);
}

const MemoryTable* memory_table(int device_kind) {
  // The host moves memory with the reference kernels (kernels/ref/memory.cpp).
  if (device_kind == kCpu) return &cpu_memory_table();
  if (!is_registrable(device_kind)) return nullptr;
  return registered(device_kind).memory.load(std::memory_order_acquire);
}

void register_tables(int device_kind, const KernelTable<float>* f32, const KernelTable<double>* f64,
                     const MemoryTable* mem) {
  if (!is_registrable(device_kind)) {
    throw std::invalid_argument("register_tables: device kind " + std::to_string(device_kind) +
                                " cannot register kernels (the CPU tables are built in; "
                                "known kinds are 0 = CPU, 1 = CUDA)");
  }
  RegisteredTables& slot = registered(device_kind);
  slot.f32.store(f32, std::memory_order_release);
  slot.f64.store(f64, std::memory_order_release);
  slot.memory.store(mem, std::memory_order_release);
}

}  // namespace wedge::kernels
