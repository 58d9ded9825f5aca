#include "engine/tensor.h"

#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "engine/allocator.h"
#include "engine/autograd.h"
#include "engine/philox.h"
#include "engine/kernel_table.h"

namespace wedge {

// ---- shapes -------------------------------------------------------------------------

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '(';
  for (std::size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  if (s.size() == 1) o << ',';
  o << ')';
  return o.str();
}

// A shape whose element count (or one of whose strides) does not fit in int64 cannot
// describe memory; multiplying on regardless would be undefined behaviour and wrap to a
// small or negative count.
namespace {
[[noreturn]] void fail_too_large(const Shape& s, const char* what) {
  throw std::invalid_argument("shape " + shape_str(s) + ": " + what + " does not fit in 64 bits");
}
}  // namespace

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) {
    if (d == 0) return 0;  // empty, however large the other dimensions
  }
  for (auto d : s) {
    if (__builtin_mul_overflow(n, d, &n)) fail_too_large(s, "the number of elements");
  }
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  // course 01 begin: row-major strides: how far apart in memory the neighbours along each axis lie
  std::int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    if (i > 0 && __builtin_mul_overflow(acc, s[i], &acc)) fail_too_large(s, "a stride");
  }
  // course 01 end
  return st;
}

void fail(const std::string& op, const std::string& what) {
  throw std::invalid_argument(op + ": " + what);
}

// ---- storage -------------------------------------------------------------------------

Storage::Storage(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes_ > 0) data_ = allocator_for(device).allocate(bytes_);
}

Storage::~Storage() {
  if (data_ != nullptr) allocator_for(device_).deallocate(data_, bytes_);
}

// ---- construction ----------------------------------------------------------------------

namespace {

const kernels::MemoryTable& memory_kernels(Device d) {
  const kernels::MemoryTable* t = kernels::memory_table(static_cast<int>(d.kind));
  if (t == nullptr) throw std::runtime_error(d.str() + ": no memory kernels registered for this device");
  return *t;
}

// Fills a CopyLayout for copying `shape` between two stride sets (scalars become (1)).
kernels::CopyLayout copy_layout(const Shape& shape, const Shape& src, const Shape& dst,
                                const std::string& op) {
  kernels::CopyLayout l;
  if (shape.size() > static_cast<std::size_t>(kernels::kMaxDims))
    fail(op, "tensors of more than " + std::to_string(kernels::kMaxDims) + " dims are not supported, got " + shape_str(shape));
  if (shape.empty()) {
    l.ndim = 1;
    l.shape[0] = 1;
    l.stride_src[0] = 1;
    l.stride_dst[0] = 1;
    return l;
  }
  l.ndim = static_cast<int>(shape.size());
  for (int i = 0; i < l.ndim; ++i) {
    l.shape[i] = shape[i];
    l.stride_src[i] = src[i];
    l.stride_dst[i] = dst[i];
  }
  return l;
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (auto d : shape)
    if (d < 0) fail("empty", "negative dimension in shape " + shape_str(shape));
  const std::int64_t numel = shape_numel(shape);
  if (static_cast<std::uint64_t>(numel) > static_cast<std::uint64_t>(PTRDIFF_MAX) / dtype_size(dtype))
    fail("empty", "shape " + shape_str(shape) + " of " + std::string(dtype_name(dtype)) + " needs more bytes than an address space holds");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(numel) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  if (static_cast<std::int64_t>(values.size()) != shape_numel(shape))
    fail("from_vector", std::to_string(values.size()) + " values do not fill shape " + shape_str(shape));
  Tensor t = empty(shape, dtype_of<T>(), device);
  if (!values.empty())
    allocator_for(device).copy_from_host(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}
template Tensor Tensor::from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor Tensor::from_vector<std::int32_t>(const std::vector<std::int32_t>&, const Shape&, Device);

Tensor Tensor::scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor Tensor::arange(std::int64_t n, DType dtype, Device device) {
  std::vector<double> v(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return from_vector(v, {n}, Device::cpu()).to(dtype).to(device);
}

Tensor Tensor::randn(const Shape& shape, std::uint64_t seed, double mean, double std, DType dtype,
                     Device device) {
  std::vector<double> v(shape_numel(shape));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = mean + std * philox_normal(seed, i);
  return from_vector(v, shape, Device::cpu()).to(dtype).to(device);
}

Tensor Tensor::rand(const Shape& shape, std::uint64_t seed, double lo, double hi, DType dtype,
                    Device device) {
  std::vector<double> v(shape_numel(shape));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const Philox4 r = philox4x32(i, seed);
    // 53 random bits -> [0, 1)
    const double u = static_cast<double>((static_cast<std::uint64_t>(r.v[0]) << 21) ^ (r.v[1] >> 11)) * 0x1p-53;
    v[i] = lo + (hi - lo) * u;
  }
  return from_vector(v, shape, Device::cpu()).to(dtype).to(device);
}

// ---- layout -------------------------------------------------------------------------------

TensorImpl& Tensor::impl() const {
  if (!impl_) throw std::logic_error("use of an undefined Tensor");
  return *impl_;
}

std::int64_t Tensor::size(int d) const {
  const int n = dim();
  const int i = d < 0 ? d + n : d;
  if (i < 0 || i >= n) fail("size", "dim " + std::to_string(d) + " out of range for shape " + shape_str(shape()));
  return shape()[i];
}

bool Tensor::is_contiguous() const {
  const Shape& s = shape();
  const Shape& st = strides();
  std::int64_t acc = 1;
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (st[i] != acc) return false;
    acc *= s[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl().storage->data()) + offset() * dtype_size(dtype());
}

template <typename T>
T* Tensor::data() const {
  if (dtype() != dtype_of<T>())
    fail("data", "requested " + std::string(dtype_name(dtype_of<T>())) + " from a " + str());
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template std::int32_t* Tensor::data<std::int32_t>() const;

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (dtype() != dtype_of<T>())
    fail("to_vector", "requested " + std::string(dtype_name(dtype_of<T>())) + " from a " + str());
  Tensor c = contiguous();
  std::vector<T> out(numel());
  if (!out.empty())
    allocator_for(c.device()).copy_to_host(out.data(), c.raw_data(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>() const;

double Tensor::item() const {
  if (numel() != 1) fail("item", "needs a one-element tensor, got " + str());
  switch (dtype()) {
    case DType::F32: return to_vector<float>()[0];
    case DType::F64: return to_vector<double>()[0];
    case DType::I32: return to_vector<std::int32_t>()[0];
  }
  return 0;
}

// ---- conversion --------------------------------------------------------------------------

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), dtype(), target);
  const std::size_t bytes = numel() * dtype_size(dtype());
  if (bytes == 0) return out;
  if (src.device().is_cpu()) {
    allocator_for(target).copy_from_host(out.raw_data(), src.raw_data(), bytes);
  } else if (target.is_cpu()) {
    allocator_for(src.device()).copy_to_host(out.raw_data(), src.raw_data(), bytes);
  } else {
    return src.to(Device::cpu()).to(target);  // between two accelerators: via the host
  }
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor src = contiguous();
  Tensor out = empty(shape(), target, device());
  if (numel() > 0)
    memory_kernels(device()).cast(src.raw_data(), static_cast<int>(dtype()), out.raw_data(),
                                  static_cast<int>(target), numel());
  return out;
}

void Tensor::copy_(const Tensor& src) {
  if (src.shape() != shape())
    fail("copy_", "source shape " + shape_str(src.shape()) + " does not match destination " + shape_str(shape()));
  if (src.dtype() != dtype())
    fail("copy_", "source " + src.str() + " has another dtype than destination " + str());
  if (numel() == 0) return;
  Tensor s = src.device() == device() ? src : src.to(device());
  const kernels::CopyLayout l = kernels::coalesce(copy_layout(shape(), s.strides(), strides(), "copy_"));
  memory_kernels(device()).strided_copy(l, s.raw_data(), raw_data(), static_cast<int>(dtype_size(dtype())));
}

void Tensor::fill_(double value) {
  if (numel() == 0) return;
  if (!is_contiguous()) {
    Tensor tmp = full(shape(), value, dtype(), device());
    copy_(tmp);
    return;
  }
  const int kind = static_cast<int>(device().kind);
  switch (dtype()) {
    case DType::F32: {
      auto* t = kernels::kernel_table<float>(kind);
      if (t == nullptr || t->fill == nullptr) fail("fill_", "no float32 fill kernel on " + device().str());
      t->fill(data<float>(), static_cast<float>(value), numel());
      break;
    }
    case DType::F64: {
      if (auto* t = kernels::kernel_table<double>(kind); t != nullptr && t->fill != nullptr) {
        t->fill(data<double>(), value, numel());
      } else {  // devices without float64 kernels: fill in float32 and convert
        copy_(full(shape(), value, DType::F32, device()).to(DType::F64));
      }
      break;
    }
    case DType::I32: {
      std::vector<std::int32_t> v(numel(), static_cast<std::int32_t>(value));
      allocator_for(device()).copy_from_host(raw_data(), v.data(), v.size() * sizeof(std::int32_t));
      break;
    }
  }
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, std::int64_t offset) const {
  if (shape.size() != strides.size())
    fail("as_strided", "shape " + shape_str(shape) + " and strides " + shape_str(strides) + " differ in length");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

// ---- autograd handles -----------------------------------------------------------------------

Tensor& Tensor::set_requires_grad(bool on) {
  if (on && !is_floating(dtype())) fail("set_requires_grad", "only floating tensors can require gradients, got " + str());
  if (!is_leaf()) fail("set_requires_grad", "can only be set on leaf tensors (use detach() first)");
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (g.defined() && g.shape() != shape())
    fail("set_grad", "gradient " + g.str() + " does not match tensor " + str());
  impl().grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::zero_grad() { impl().grad = nullptr; }

Tensor Tensor::detach() const {
  return as_strided(shape(), strides(), offset());
}

}  // namespace wedge
