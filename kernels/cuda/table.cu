// The CUDA kernel tables, and their registration at start-up.
//
// Registration happens only when the machine has a CUDA device: otherwise
// kernel_table<float>(CUDA) stays null and every op on a CUDA tensor reports that there
// is no CUDA device, exactly as in a build without CUDA. float only: there is no double
// table on the GPU (kernel_table<double>(CUDA) is null).
#include "kernels/cuda/entries.cuh"

namespace wedge::kernels::WEDGE_CUDA_NS {

KernelTable<float> make_table_f32() {
  KernelTable<float> t;
  t.gemm = gemm;
  t.bias_act_backward = bias_act_backward;
  t.fill = fill;
  t.unary = unary;
  t.unary_backward = unary_backward;
  t.binary = binary;
  t.reduce = reduce;
  t.softmax_forward = softmax_forward;
  t.softmax_backward = softmax_backward;
  t.cross_entropy_forward = cross_entropy_forward;
  t.cross_entropy_backward = cross_entropy_backward;
  t.layer_norm_forward = layer_norm_forward;
  t.layer_norm_backward = layer_norm_backward;
  t.embedding_forward = embedding_forward;
  t.embedding_backward = embedding_backward;
  t.dropout_forward = dropout_forward;
  t.dropout_backward = dropout_backward;
  t.attention_forward = attention_forward;
  t.attention_backward = attention_backward;
  t.plucker_forward = plucker_forward;
  t.plucker_backward = plucker_backward;
  t.plucker_mean_forward = plucker_mean_forward;
  t.plucker_mean_backward = plucker_mean_backward;
  t.gate_mix_forward = gate_mix_forward;
  t.gate_mix_backward = gate_mix_backward;
  t.adam_update = adam_update;
  t.sum_squares = sum_squares;
  return t;
}

MemoryTable make_memory_table() {
  MemoryTable t;
  t.strided_copy = strided_copy;
  t.cast = cast;
  return t;
}

#if !defined(WEDGE_CUDA_EMULATE)
}  // namespace wedge::kernels::WEDGE_CUDA_NS

namespace wedge::kernels::WEDGE_CUDA_NS {
namespace {

struct RegisterCudaKernels {
  RegisterCudaKernels() {
    if (::wedge::cuda::device_count() < 1) return;
    static const KernelTable<float> table = make_table_f32();
    static const MemoryTable memory = make_memory_table();
    register_tables(1, &table, nullptr, &memory);
  }
};
const RegisterCudaKernels registrar;

}  // namespace
#endif

}  // namespace wedge::kernels::WEDGE_CUDA_NS
