// The CUDA kernel tables, and their registration at start-up.
//
// The tables are usable only when the machine has a CUDA device: otherwise
// kernel_table<float>(CUDA) is null and every op on a CUDA tensor reports that there
// is no CUDA device, exactly as in a build without CUDA. float only: there is no double
// table on the GPU (kernel_table<double>(CUDA) is null).
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {

KernelTable<float> make_table_f32() {
  KernelTable<float> t;
#define WEDGE_KERNEL(name, cpu, params) t.name = name;
#include "engine/kernels.def"
#undef WEDGE_KERNEL
  return t;
}

MemoryTable make_memory_table() {
  MemoryTable t;
#define WEDGE_KERNEL(name, cpu, params)
#define WEDGE_MEMORY_KERNEL(name, params) t.name = name;
#include "engine/kernels.def"
#undef WEDGE_MEMORY_KERNEL
#undef WEDGE_KERNEL
  return t;
}

#if !defined(WEDGE_CUDA_EMULATE)
}  // namespace wedge::kernels::WEDGE_CUDA_NS

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace {

// The tables are always registered, so `wedge ops` can list what the build holds; they
// are usable only when the machine has a CUDA device.
struct RegisterCudaKernels {
  RegisterCudaKernels() {
    static const KernelTable<float> table = make_table_f32();
    static const MemoryTable memory = make_memory_table();
    register_tables(1, &table, nullptr, &memory, ::wedge::cuda::device_count() >= 1);
  }
};
const RegisterCudaKernels registrar;

}  // namespace
#endif

}  // namespace wedge::kernels::WEDGE_CUDA_NS
