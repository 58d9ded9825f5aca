// Tensor: a view (shape, strides, offset, dtype) onto reference-counted Storage on one
// Device, plus the autograd metadata that makes it part of a graph.
//
// The one idea: a Tensor is a cheap handle (a shared_ptr to TensorImpl). Copying a
// Tensor copies the handle, not the numbers. Several TensorImpls may share one Storage
// (views: reshape of contiguous data, permute, narrow, expand); contiguous() copies only
// when the layout demands it.
//
// Differentiable operations live in ops/ops.h. This file holds only what a tensor IS:
// construction, layout queries, raw (non-differentiable) views used by ops, host access,
// device/dtype conversion, and the entry point of reverse-mode autograd, backward().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"

namespace wedge {

using Shape = std::vector<std::int64_t>;

std::string shape_str(const Shape& s);  // "(2, 3, 4)"
// The element count; throws std::invalid_argument naming the shape when it does not fit in
// int64 (a shape with a zero dimension has 0 elements whatever its other dimensions).
std::int64_t shape_numel(const Shape& s);
// Row-major strides in elements; throws the same way when one does not fit in int64.
Shape contiguous_strides(const Shape& s);

// A block of memory on one device, freed through its device's allocator.
class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
};

struct Node;  // engine/autograd.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  std::int64_t offset = 0;  // in elements
  DType dtype = DType::F32;

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor (null for leaves)
  int output_nr = 0;                 // which of grad_fn's outputs this tensor is
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (defined() == false)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- construction ------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  // Copies host values; values.size() must equal the shape's element count.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                            Device device = Device::cpu());
  static Tensor scalar(double value, DType dtype = DType::F32, Device device = Device::cpu());
  // 0, 1, ..., n-1
  static Tensor arange(std::int64_t n, DType dtype = DType::F32, Device device = Device::cpu());
  // Normal(mean, std) / Uniform[lo, hi) from the counter-based generator: element i of
  // the result is a pure function of (seed, i), on every device.
  static Tensor randn(const Shape& shape, std::uint64_t seed, double mean = 0, double std = 1,
                      DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor rand(const Shape& shape, std::uint64_t seed, double lo = 0, double hi = 1,
                     DType dtype = DType::F32, Device device = Device::cpu());

  // ---- layout ----------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  std::int64_t offset() const { return impl().offset; }
  int dim() const { return static_cast<int>(impl().shape.size()); }
  std::int64_t size(int d) const;  // negative d counts from the end
  std::int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_contiguous() const;
  std::string str() const;  // "float32(2, 3) on cpu"

  // Typed pointer to element 0 of this view (checks the dtype). For CPU tensors this is
  // host memory; for CUDA tensors device memory (pass it to kernels only).
  template <typename T> T* data() const;
  void* raw_data() const;

  // ---- host access (copies from the device when needed) -------------------------
  template <typename T> std::vector<T> to_vector() const;  // row-major, contiguous
  double item() const;  // the single element of a one-element tensor, as double

  // ---- conversion ------------------------------------------------------------------
  Tensor contiguous() const;  // this, if already contiguous; else a packed copy
  Tensor clone() const;       // always a packed copy (no autograd)
  Tensor to(Device device) const;  // copy to another device (no autograd)
  Tensor to(DType dtype) const;    // element conversion (no autograd)
  // Writes src's values into this tensor's memory (same shape; may be a strided view).
  void copy_(const Tensor& src);
  void fill_(double value);

  // ---- raw views: no autograd (ops/ wraps them into differentiable ops) -----------
  Tensor as_strided(const Shape& shape, const Shape& strides, std::int64_t offset) const;

  // ---- autograd --------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  Tensor grad() const;  // undefined until a backward reached this leaf
  void set_grad(const Tensor& g);
  void zero_grad();     // drops the gradient
  // A new tensor sharing this one's memory, outside any graph.
  Tensor detach() const;
  // Reverse-mode autograd from this tensor. Without an argument this must be a
  // one-element tensor (the loss) and the seed gradient is 1. The graph is freed
  // as it is walked; a second backward through it throws.
  void backward() const;
  void backward(const Tensor& grad) const;

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Throws std::invalid_argument with "<op>: <what>" — the message form every check uses.
[[noreturn]] void fail(const std::string& op, const std::string& what);

}  // namespace wedge
