// The CPU kernel tables: the reference table with the optimized kernels of this folder
// written over the entries they replace, chosen once by CPU detection.
#include <string>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels {

namespace {

KernelTable<float> make_cpu_table_f32() {
  KernelTable<float> t = ref_table_f32();
  // gemm is `own`: wedge's packed GEMM or OpenBLAS, per gemm_backend().
  t.gemm = cpu::sgemm_selected;
  // Every entry engine/kernels.def marks `simd`: its AVX-512 kernel when the CPU has
  // AVX-512, else its AVX2 kernel when it has AVX2.
  const bool avx512 = cpu::has_avx512(), avx2 = !avx512 && cpu::has_avx2();
#define WEDGE_CPU_OVERRIDE_ref(name)
#define WEDGE_CPU_OVERRIDE_own(name)
#define WEDGE_CPU_OVERRIDE_simd(name)        \
  if (avx512) t.name = cpu::avx512::name; \
  if (avx2) t.name = cpu::avx2::name;
#define WEDGE_KERNEL(name, cpu, params) WEDGE_CPU_OVERRIDE_##cpu(name)
#include "engine/kernels.def"
#undef WEDGE_KERNEL
#undef WEDGE_CPU_OVERRIDE_simd
#undef WEDGE_CPU_OVERRIDE_own
#undef WEDGE_CPU_OVERRIDE_ref
  return t;
}

KernelTable<double> make_cpu_table_f64() {
  KernelTable<double> t = ref_table_f64();
  // float64 runs only in gradient checks; OpenBLAS's dgemm keeps those quick.
  t.gemm = dgemm_openblas;
  return t;
}

}  // namespace

const KernelTable<float>& cpu_table_f32() {
  static const KernelTable<float> table = make_cpu_table_f32();
  return table;
}

const KernelTable<double>& cpu_table_f64() {
  static const KernelTable<double> table = make_cpu_table_f64();
  return table;
}

const char* cpu_backend_name() {
  // One string per GEMM backend, built once, so the returned pointer stays valid.
  static const std::string names[2] = {
      std::string(cpu_isa_name()) + " kernels, " + cpu::gemm_description(GemmBackend::Wedge),
      std::string(cpu_isa_name()) + " kernels, " + cpu::gemm_description(GemmBackend::OpenBLAS)};
  return names[gemm_backend() == GemmBackend::OpenBLAS ? 1 : 0].c_str();
}

namespace {

// The CPU tables are device kind 0's, registered when the program starts (the library is
// linked whole, so this object file is always part of the program).
struct RegisterCpuKernels {
  RegisterCpuKernels() { register_tables(0, &cpu_table_f32(), &cpu_table_f64(), &cpu_memory_table()); }
};
const RegisterCpuKernels registrar;

}  // namespace

}  // namespace wedge::kernels
