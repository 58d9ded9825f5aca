// The reference tables: every entry of KernelTable<T> filled with its plain-loop kernel.
// kernels/cpu starts from a copy of these and overrides what it has optimized.
#include "kernels/ref/ref.h"

namespace wedge::kernels {

namespace {

template <typename T>
KernelTable<T> make_ref_table() {
  KernelTable<T> t;
  t.gemm = ref::gemm<T>;
  t.bias_act_backward = ref::bias_act_backward<T>;
  t.fill = ref::fill<T>;
  t.unary = ref::unary<T>;
  t.unary_backward = ref::unary_backward<T>;
  t.binary = ref::binary<T>;
  t.reduce = ref::reduce<T>;
  t.softmax_forward = ref::softmax_forward<T>;
  t.softmax_backward = ref::softmax_backward<T>;
  t.cross_entropy_forward = ref::cross_entropy_forward<T>;
  t.cross_entropy_backward = ref::cross_entropy_backward<T>;
  t.layer_norm_forward = ref::layer_norm_forward<T>;
  t.layer_norm_backward = ref::layer_norm_backward<T>;
  t.embedding_forward = ref::embedding_forward<T>;
  t.embedding_backward = ref::embedding_backward<T>;
  t.dropout_forward = ref::dropout_forward<T>;
  t.dropout_backward = ref::dropout_backward<T>;
  t.attention_forward = ref::attention_forward<T>;
  t.attention_backward = ref::attention_backward<T>;
  t.plucker_forward = ref::plucker_forward<T>;
  t.plucker_backward = ref::plucker_backward<T>;
  t.plucker_mean_forward = ref::plucker_mean_forward<T>;
  t.plucker_mean_backward = ref::plucker_mean_backward<T>;
  t.adam_update = ref::adam_update<T>;
  t.sum_squares = ref::sum_squares<T>;
  t.gate_mix_forward = ref::gate_mix_forward<T>;
  t.gate_mix_backward = ref::gate_mix_backward<T>;
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
  static const MemoryTable table{ref::strided_copy, ref::cast};
  return table;
}

}  // namespace wedge::kernels
