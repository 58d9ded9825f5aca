// The reference tables: every entry of KernelTable<T> filled with its plain-loop kernel.
// kernels/cpu starts from a copy of these and overrides what it has optimized.
#include "kernels/ref/ref.h"

namespace wedge::kernels {

namespace {

template <typename T>
KernelTable<T> make_ref_table() {
  KernelTable<T> t;
#define WEDGE_KERNEL(name, cpu, params) t.name = ref::name<T>;
#include "engine/kernels.def"
#undef WEDGE_KERNEL
  return t;
}

}  // namespace

// Function-local statics: built on first use, thread-safe, and safe to call from other
// translation units' static initialisers (no initialisation-order problem).
const KernelTable<float>& ref_table_f32() {
  static const KernelTable<float> table = make_ref_table<float>();
  return table;
}

const KernelTable<double>& ref_table_f64() {
  static const KernelTable<double> table = make_ref_table<double>();
  return table;
}

const MemoryTable& ref_memory_table() {
  static const MemoryTable table = [] {
    MemoryTable t;
#define WEDGE_KERNEL(name, cpu, params)
#define WEDGE_MEMORY_KERNEL(name, params) t.name = ref::name;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
    return t;
  }();
  return table;
}

}  // namespace wedge::kernels
