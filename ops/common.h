// Shared plumbing of the op files: argument checks with messages that name the op and
// the shapes, and the one dispatch point into the kernels of a tensor's device.
#pragma once

#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/tensor.h"
#include "engine/kernel_table.h"

namespace wedge::ops::detail {

// Throws unless `t` is defined and floating (float32 or float64).
void check_floating(const std::string& op, const Tensor& t, const char* what = "input");
// Throws unless all defined tensors live on the same device and share a dtype.
void check_same(const std::string& op, const std::vector<Tensor>& ts);
// Normalises a possibly negative axis against ndim, with a clear error.
int wrap_dim(const std::string& op, int dim, int ndim);

// The kernel table for T on the device of `t`, with the op named in the error.
template <typename T>
const kernels::KernelTable<T>& table(const std::string& op, const Tensor& t) {
  const auto* tab = kernels::kernel_table<T>(static_cast<int>(t.device().kind));
  if (tab == nullptr)
    fail(op, "no " + std::string(dtype_name(dtype_of<T>())) + " kernels on " + t.device().str());
  return *tab;
}

// Calls f(tag) with tag = float{} or double{} according to t's dtype.
template <typename F>
decltype(auto) dispatch_float(const std::string& op, const Tensor& t, F&& f) {
  if (t.dtype() == DType::F32) return f(float{});
  if (t.dtype() == DType::F64) return f(double{});
  fail(op, "expected a float32 or float64 tensor, got " + t.str());
}

// Checks that a kernel entry exists before calling it.
template <typename Fn>
Fn need(const std::string& op, Fn fn, const Tensor& t) {
  if (fn == nullptr) fail(op, "this kernel is not implemented on " + t.device().str());
  return fn;
}

// Saved tensors for closures: a handle on the same memory without the graph.
inline Tensor saved(const Tensor& t) { return t.defined() ? t.detach() : Tensor(); }

}  // namespace wedge::ops::detail
