#include "engine/module.h"

#include "engine/autograd.h"

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

}  // namespace wedge
