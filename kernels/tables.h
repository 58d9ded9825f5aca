// The tables kernels/ builds (the contract they fill is engine/kernel_table.h, the list of
// kernels engine/kernels.def). Programs reach kernels through kernel_table<T>(device);
// these names are for tests, benchmarks and the CLI, which compare one table with another.
#pragma once

#include "engine/kernel_table.h"

namespace wedge::kernels {

// The reference tables (kernels/ref): complete, scalar, slow: the oracle.
const KernelTable<float>& ref_table_f32();
const KernelTable<double>& ref_table_f64();
const MemoryTable& ref_memory_table();

// The CPU tables (kernels/cpu): the reference with optimized entries written over it,
// chosen once by CPU detection. They are registered for device kind 0 at start-up.
// cpu_backend_name() describes what was picked, e.g. "avx512 kernels, wedge gemm ...".
const KernelTable<float>& cpu_table_f32();
const KernelTable<double>& cpu_table_f64();
const MemoryTable& cpu_memory_table();
const char* cpu_backend_name();

}  // namespace wedge::kernels
