#include "engine/optim.h"

#include <cmath>
#include <stdexcept>

#include "engine/autograd.h"
#include "kernels/kernels.h"

namespace wedge {

namespace {

template <typename T>
const kernels::KernelTable<T>& table_for(const Tensor& t, const char* op) {
  const auto* table = kernels::kernel_table<T>(static_cast<int>(t.device().kind));
  if (table == nullptr) fail(op, "no " + std::string(dtype_name(dtype_of<T>())) + " kernels on " + t.device().str());
  return *table;
}

template <typename T>
void adam_one(const kernels::AdamParams& hp, Tensor& p, const Tensor& g, Tensor& m, Tensor& v) {
  table_for<T>(p, "adam").adam_update(hp, p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel());
}

}  // namespace

Adam::Adam(std::vector<std::pair<std::string, Tensor>> params, AdamConfig config)
    : config_(config) {
  for (auto& [name, p] : params) {
    if (!p.is_contiguous()) fail("Adam", "parameter '" + name + "' must be contiguous, got " + p.str());
    slots_.push_back({name, p, Tensor::zeros(p.shape(), p.dtype(), p.device()),
                      Tensor::zeros(p.shape(), p.dtype(), p.device())});
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  ++step_;
  kernels::AdamParams hp;
  hp.lr = static_cast<float>(config_.lr);
  hp.beta1 = static_cast<float>(config_.beta1);
  hp.beta2 = static_cast<float>(config_.beta2);
  hp.eps = static_cast<float>(config_.eps);
  hp.weight_decay = static_cast<float>(config_.weight_decay);
  hp.bc1 = static_cast<float>(1.0 - std::pow(config_.beta1, static_cast<double>(step_)));
  hp.bc2 = static_cast<float>(1.0 - std::pow(config_.beta2, static_cast<double>(step_)));
  hp.decoupled = config_.decoupled;
  for (Slot& s : slots_) {
    Tensor g = s.param.grad();
    if (!g.defined()) continue;
    g = g.contiguous();
    if (s.param.dtype() == DType::F32) adam_one<float>(hp, s.param, g, s.m, s.v);
    else adam_one<double>(hp, s.param, g, s.m, s.v);
  }
}

void Adam::zero_grad() {
  for (Slot& s : slots_) s.param.zero_grad();
}

std::map<std::string, Tensor> Adam::state_tensors() const {
  std::map<std::string, Tensor> out;
  for (const Slot& s : slots_) {
    out[s.name + ".adam_m"] = s.m;
    out[s.name + ".adam_v"] = s.v;
  }
  return out;
}

void Adam::load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step) {
  for (Slot& s : slots_) {
    for (auto* which : {&s.m, &s.v}) {
      const std::string key = s.name + (which == &s.m ? ".adam_m" : ".adam_v");
      auto it = tensors.find(key);
      if (it == tensors.end()) throw std::runtime_error("optimizer state: missing tensor '" + key + "'");
      if (it->second.shape() != which->shape() || it->second.dtype() != which->dtype())
        throw std::runtime_error("optimizer state: '" + key + "' is " + it->second.str() + ", expected " + which->str());
      which->copy_(it->second);
    }
  }
  step_ = step;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  // Squares are summed on each gradient's device into one accumulator per (device, dtype),
  // so the norm costs one host round trip per device, not one per parameter.
  std::vector<Tensor> accumulators;
  auto accumulator_for = [&](const Tensor& g) -> Tensor& {
    for (Tensor& a : accumulators)
      if (a.device() == g.device() && a.dtype() == g.dtype()) return a;
    accumulators.push_back(Tensor::zeros({}, g.dtype(), g.device()));
    return accumulators.back();
  };
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g = g.contiguous();
    Tensor& acc = accumulator_for(g);
    if (g.dtype() == DType::F32)
      table_for<float>(g, "clip_grad_norm").sum_squares(g.data<float>(), g.numel(), acc.data<float>(), true);
    else
      table_for<double>(g, "clip_grad_norm").sum_squares(g.data<double>(), g.numel(), acc.data<double>(), true);
  }
  double total = 0.0;
  for (const Tensor& a : accumulators) total += a.item();
  const double norm = std::sqrt(total);
  if (std::isfinite(norm) && norm > max_norm && norm > 0) {
    const double scale = max_norm / (norm + 1e-6);
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      Tensor scaled = g.contiguous().clone();
      if (g.dtype() == DType::F32)
        table_for<float>(g, "clip_grad_norm").unary(kernels::UnaryOp::MulScalar, static_cast<float>(scale),
                                                    scaled.data<float>(), scaled.data<float>(), scaled.numel());
      else
        table_for<double>(g, "clip_grad_norm").unary(kernels::UnaryOp::MulScalar, scale, scaled.data<double>(),
                                                     scaled.data<double>(), scaled.numel());
      Tensor(p).set_grad(scaled);
    }
  }
  return norm;
}

double LrSchedule::at(std::int64_t step) const {
  if (kind == Kind::Constant) return base_lr;
  if (warmup_steps > 0 && step < warmup_steps)
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const std::int64_t decay = std::max<std::int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay));
  return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace wedge
