// The CPU kernel tables: the reference table with the optimized kernels of this folder
// written over the entries they replace, chosen once by CPU detection.
#include <string>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/isa.h"

namespace wedge::kernels {

namespace {

KernelTable<float> make_cpu_table_f32() {
  KernelTable<float> t = ref_table_f32();
  t.gemm = cpu::sgemm_selected;
  if (cpu::has_avx512()) {
    namespace k = cpu::avx512;
    t.binary = k::binary;
    t.reduce = k::reduce;
    t.dropout_forward = k::dropout_forward;
    t.dropout_backward = k::dropout_backward;
    t.fill = k::fill;
    t.unary = k::unary;
    t.unary_backward = k::unary_backward;
    t.softmax_forward = k::softmax_forward;
    t.softmax_backward = k::softmax_backward;
    t.cross_entropy_forward = k::cross_entropy_forward;
    t.cross_entropy_backward = k::cross_entropy_backward;
    t.layer_norm_forward = k::layer_norm_forward;
    t.layer_norm_backward = k::layer_norm_backward;
    t.adam_update = k::adam_update;
    t.bias_act_backward = k::bias_act_backward;
    t.gate_mix_forward = k::gate_mix_forward;
    t.gate_mix_backward = k::gate_mix_backward;
    t.sum_squares = k::sum_squares;
    t.attention_forward = k::attention_forward;
    t.attention_backward = k::attention_backward;
    t.plucker_mean_forward = k::plucker_mean_forward;
    t.plucker_mean_backward = k::plucker_mean_backward;
  }
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

}  // namespace wedge::kernels
