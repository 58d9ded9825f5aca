#include "engine/module.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <utility>

#include "engine/autograd.h"
#include "engine/safetensors.h"
#include "engine/text_escape.h"

namespace wedge {

Tensor& Module::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  params_.emplace_back(name, std::move(value));
  return params_.back().second;
}

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, p] : params_) out.emplace_back(prefix + name, p);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) p.zero_grad();
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  // Parameters are shared handles (modules keep Tensor members that alias params_), so
  // the move swaps the storage inside each TensorImpl rather than making new tensors.
  for (auto& [name, p] : named_parameters()) {
    if (p.device() == device) continue;
    Tensor moved = p.to(device);
    TensorImpl& dst = p.impl();
    dst.storage = moved.impl().storage;
    dst.strides = moved.strides();
    dst.offset = 0;
    dst.grad = nullptr;
  }
}

void Module::save(const std::string& path) const {
  std::map<std::string, Tensor> tensors;
  for (const auto& [name, p] : named_parameters())
    if (!tensors.emplace(name, p).second)
      fail("Module::save", "two parameters are named '" + name + "'; a file can hold only one of them");
  save_safetensors(path, tensors);  // copies each tensor to the host, contiguous
}

namespace {

// The first NaN or infinity of a host tensor: its index (-1 when there is none) and value.
template <typename T>
std::pair<std::int64_t, double> first_non_finite(const T* v, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i])) return {i, static_cast<double>(v[i])};
  return {-1, 0.0};
}

std::pair<std::int64_t, double> first_non_finite(const Tensor& t) {
  if (t.dtype() == DType::F32) return first_non_finite(t.data<float>(), t.numel());
  if (t.dtype() == DType::F64) return first_non_finite(t.data<double>(), t.numel());
  return {-1, 0.0};  // integers are always finite
}

}  // namespace

void Module::load(const std::string& path) {
  const SafeTensors file = load_safetensors(path);  // on the host, contiguous, checked
  const auto params = named_parameters();
  const std::string where = "checkpoint '" + printable(path) + "': ";
  // All checks first: a file refused half way through would leave a model of two checkpoints.
  for (const auto& [name, p] : params) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw std::runtime_error(where + "missing tensor '" + printable(name) + "'");
    const Tensor& t = it->second;
    if (t.dtype() != p.dtype() || t.shape() != p.shape())
      throw std::runtime_error(where + "tensor '" + printable(name) + "' is " + t.str() + " but the model expects " +
                               p.str());
    // A NaN loaded into a weight poisons every later output; a diverged run's checkpoint
    // is refused here instead of surfacing as a NaN loss steps later.
    const auto [bad, value] = first_non_finite(t);
    if (bad >= 0)
      throw std::runtime_error(where + "tensor '" + printable(name) + "' holds " +
                               (std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf") + " at element " +
                               std::to_string(bad) + " of " + std::to_string(t.numel()));
  }
  NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    Tensor dst = p;
    dst.copy_(file.tensors.at(name));  // copy_ moves the host values to the parameter's device
  }
}

}  // namespace wedge
