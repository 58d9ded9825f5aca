#include "engine/optim.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/core.h>

#include "engine/autograd.h"
#include "engine/kernel_table.h"
#include "engine/text_escape.h"

namespace wedge {

namespace {

template <typename T>
const kernels::KernelTable<T>& table_for(const Tensor& t, const char* op) {
  const auto* table = kernels::kernel_table<T>(static_cast<int>(t.device().kind));
  if (table == nullptr) fail(op, "no " + std::string(dtype_name(dtype_of<T>())) + " kernels on " + t.device().str());
  return *table;
}

// One kernel call updates every parameter of one (dtype, device) group.
template <typename T>
void adam_group(const kernels::AdamParams& hp, const std::vector<kernels::AdamSegment<T>>& segments,
                const Tensor& any) {
  if (!segments.empty())
    table_for<T>(any, "adam").adam_update(hp, segments.data(), static_cast<std::int64_t>(segments.size()));
}

}  // namespace

bool decays_by_default(const std::string& name, const Tensor& param) {
  const std::string a_log = "A_log";
  const bool is_a_log = name.size() >= a_log.size() && name.compare(name.size() - a_log.size(), a_log.size(), a_log) == 0;
  return param.dim() >= 2 && !is_a_log;
}

// ---- Optimizer ------------------------------------------------------------------------

Optimizer::Optimizer(std::vector<std::pair<std::string, Tensor>> params, double lr, const DecayRule& decays) : lr_(lr) {
  params_.reserve(params.size());
  for (auto& [name, p] : params) {
    const bool decay = !decays || decays(name, p);
    params_.push_back({std::move(name), std::move(p), decay});
  }
}

bool Optimizer::decayed(const std::string& name) const {
  for (const Param& p : params_)
    if (p.name == name) return p.decay;
  return false;
}

void Optimizer::zero_grad() {
  for (Param& p : params_) p.tensor.zero_grad();
}

// ---- Adam -----------------------------------------------------------------------------

Adam::Adam(std::vector<std::pair<std::string, Tensor>> params, AdamConfig config, DecayRule decays)
    : Optimizer(std::move(params), config.lr, decays), config_(config) {
  std::int64_t offset = 0;
  for (const Param& p : this->params()) {
    const Tensor& t = p.tensor;
    if (!t.is_contiguous()) fail("Adam", "parameter '" + p.name + "' must be contiguous, got " + t.str());
    slots_.push_back({Tensor::zeros(t.shape(), t.dtype(), t.device()), Tensor::zeros(t.shape(), t.dtype(), t.device()),
                      offset, 0, t.numel()});
    offset += t.numel();
  }
}

std::int64_t Adam::flat_size() const {
  return slots_.empty() ? 0 : slots_.back().flat_offset + params().back().tensor.numel();
}

void Adam::keep_shard(std::int64_t begin, std::int64_t end) {
  if (begin < 0 || end < begin || end > flat_size())
    fail("Adam::keep_shard", "[" + std::to_string(begin) + ", " + std::to_string(end) + ") is not a range of the " +
                                 std::to_string(flat_size()) + " parameter elements");
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const Tensor& p = params()[i].tensor;
    const std::int64_t lo = std::clamp(begin - s.flat_offset, std::int64_t{0}, p.numel());
    const std::int64_t hi = std::clamp(end - s.flat_offset, std::int64_t{0}, p.numel());
    s.first = lo;
    s.kept = hi - lo;
    s.m = Tensor::zeros({s.kept}, p.dtype(), p.device());
    s.v = Tensor::zeros({s.kept}, p.dtype(), p.device());
  }
  sharded_ = true;
}

void Adam::check_flat(std::size_t m_size, std::size_t v_size, const char* op) const {
  const auto n = static_cast<std::size_t>(flat_size());
  if (m_size != n || v_size != n)
    fail(op, "the flat moments hold " + std::to_string(m_size) + " and " + std::to_string(v_size) + " elements; the " +
                 "parameters have " + std::to_string(n));
  for (const Param& p : params())
    if (p.tensor.dtype() != DType::F32) fail(op, "parameter '" + p.name + "' is " + p.tensor.str() + "; only float32 is supported");
}

void Adam::export_moments(std::span<float> m, std::span<float> v) const {
  check_flat(m.size(), v.size(), "Adam::export_moments");
  for (const Slot& s : slots_) {
    const auto at = static_cast<std::size_t>(s.flat_offset + s.first), n = static_cast<std::size_t>(s.kept);
    const std::vector<float> mh = s.m.to_vector<float>(), vh = s.v.to_vector<float>();
    std::copy_n(mh.begin(), n, m.begin() + static_cast<std::ptrdiff_t>(at));
    std::copy_n(vh.begin(), n, v.begin() + static_cast<std::ptrdiff_t>(at));
  }
}

void Adam::import_moments(std::span<const float> m, std::span<const float> v, std::int64_t step) {
  check_flat(m.size(), v.size(), "Adam::import_moments");
  for (Slot& s : slots_) {
    const auto at = static_cast<std::ptrdiff_t>(s.flat_offset + s.first);
    for (auto [from, to] : {std::pair{m, &s.m}, std::pair{v, &s.v}}) {
      const std::vector<float> part(from.begin() + at, from.begin() + at + s.kept);
      to->copy_(Tensor::from_vector(part, to->shape()).to(to->device()));
    }
  }
  set_steps(step);
}

void Adam::step(double grad_scale) {
  NoGradGuard no_grad;
  begin_step();
  const double t = static_cast<double>(steps());
  kernels::AdamParams hp;
  hp.lr = static_cast<float>(lr());
  hp.beta1 = static_cast<float>(config_.beta1);
  hp.beta2 = static_cast<float>(config_.beta2);
  hp.eps = static_cast<float>(config_.eps);
  hp.weight_decay = static_cast<float>(config_.weight_decay);
  hp.bc1 = static_cast<float>(1.0 - std::pow(config_.beta1, t));
  hp.bc2 = static_cast<float>(1.0 - std::pow(config_.beta2, t));
  hp.decoupled = config_.decoupled;
  hp.grad_scale = static_cast<float>(grad_scale);
  // Parameters are grouped by (device, dtype, decayed or not); each group is one kernel
  // call. The gradients stay alive in `grads` until the calls are done.
  const std::vector<Param>& ps = params();
  std::vector<Tensor> grads;
  grads.reserve(ps.size());
  std::vector<const Param*> leads;  // the first parameter of each group
  auto same_group = [](const Param& a, const Param& b) {
    return a.tensor.device() == b.tensor.device() && a.tensor.dtype() == b.tensor.dtype() && a.decay == b.decay;
  };
  for (const Param& p : ps) {
    bool known = false;
    for (const Param* lead : leads) known |= same_group(*lead, p);
    if (!known) leads.push_back(&p);
  }
  const float weight_decay = hp.weight_decay;
  for (const Param* lead_param : leads) {
    const Tensor* lead = &lead_param->tensor;
    hp.weight_decay = lead_param->decay ? weight_decay : 0.0f;
    std::vector<kernels::AdamSegment<float>> f32;
    std::vector<kernels::AdamSegment<double>> f64;
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const Tensor& p = ps[i].tensor;
      const Slot& s = slots_[i];
      if (!same_group(*lead_param, ps[i])) continue;
      Tensor g = p.grad();
      if (!g.defined() || s.kept == 0) continue;
      grads.push_back(g.contiguous());
      const Tensor& gc = grads.back();
      if (lead->dtype() == DType::F32)
        f32.push_back({p.data<float>() + s.first, gc.data<float>() + s.first, s.m.data<float>(), s.v.data<float>(), s.kept});
      else
        f64.push_back({p.data<double>() + s.first, gc.data<double>() + s.first, s.m.data<double>(), s.v.data<double>(),
                       s.kept});
    }
    adam_group(hp, f32, *lead);
    adam_group(hp, f64, *lead);
  }
}

std::map<std::string, Tensor> Adam::state_tensors() const {
  if (sharded_) fail("Adam::state_tensors", "a sharded optimizer holds part of the moments; gather them with export_moments");
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    out[params()[i].name + ".adam_m"] = slots_[i].m;
    out[params()[i].name + ".adam_v"] = slots_[i].v;
  }
  return out;
}

// The checkpoint's state tensor `suffix` (".adam_m", ".adam_v", ".sgd_momentum") of parameter
// `name`, checked against the parameter: a missing tensor or another shape or dtype is one
// error naming it.
static const Tensor& named_moment(const std::map<std::string, Tensor>& tensors, const std::string& name,
                                  const Tensor& param, const char* suffix) {
  const std::string key = name + suffix;
  const auto it = tensors.find(key);
  if (it == tensors.end()) throw std::runtime_error("optimizer state: missing tensor '" + key + "'");
  if (it->second.shape() != param.shape() || it->second.dtype() != param.dtype())
    throw std::runtime_error("optimizer state: '" + key + "' is " + it->second.str() + ", expected the shape and dtype of " +
                             param.str());
  return it->second;
}

void Adam::load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step) {
  if (sharded_) fail("Adam::load_state", "a sharded optimizer loads its part of the moments with import_moments");
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Param& p = params()[i];
    slots_[i].m.copy_(named_moment(tensors, p.name, p.tensor, ".adam_m"));
    slots_[i].v.copy_(named_moment(tensors, p.name, p.tensor, ".adam_v"));
  }
  set_steps(step);
}

void Adam::flatten_state(const std::map<std::string, Tensor>& tensors, std::span<float> m, std::span<float> v) const {
  check_flat(m.size(), v.size(), "Adam::flatten_state");
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Param& p = params()[i];
    const auto at = static_cast<std::ptrdiff_t>(slots_[i].flat_offset);
    for (auto [suffix, flat] : {std::pair{".adam_m", m}, std::pair{".adam_v", v}}) {
      const std::vector<float> h = named_moment(tensors, p.name, p.tensor, suffix).to_vector<float>();
      std::copy(h.begin(), h.end(), flat.begin() + at);
    }
  }
}

// ---- SGD ------------------------------------------------------------------------------

namespace {

// One parameter's update, in its own dtype (as PyTorch computes it). started: whether buf
// holds a previous update's momentum (else it starts as this step's gradient).
template <typename T>
void sgd_update(T* p, const T* grad, T* buf, std::int64_t n, const SgdConfig& c, double lr, double weight_decay,
                double grad_scale, bool started) {
  const T rate = static_cast<T>(lr), wd = static_cast<T>(weight_decay), scale = static_cast<T>(grad_scale);
  const T momentum = static_cast<T>(c.momentum), keep = static_cast<T>(1.0 - c.dampening);
  for (std::int64_t i = 0; i < n; ++i) {
    T g = grad[i] * scale;
    if (weight_decay != 0.0) g += wd * p[i];
    if (buf != nullptr) {
      buf[i] = started ? momentum * buf[i] + keep * g : g;
      g = c.nesterov ? g + momentum * buf[i] : buf[i];
    }
    p[i] -= rate * g;
  }
}

void check_on_host(const std::string& name, const Tensor& p, const char* op) {
  if (!p.device().is_cpu())
    fail(op, "parameter '" + name + "' is " + p.str() + "; SGD updates parameters on the host (there is no SGD " +
                 "kernel): keep them on the CPU, or use Adam");
}

}  // namespace

Sgd::Sgd(std::vector<std::pair<std::string, Tensor>> params, SgdConfig config, DecayRule decays)
    : Optimizer(std::move(params), config.lr, decays), config_(config) {
  if (!(config.lr >= 0) || !(config.momentum >= 0) || !(config.weight_decay >= 0))
    fail("Sgd", fmt::format("lr {}, momentum {} and weight_decay {} must all be >= 0", config.lr, config.momentum,
                            config.weight_decay));
  if (config.nesterov && (config.momentum <= 0 || config.dampening != 0))
    fail("Sgd", fmt::format("Nesterov momentum needs momentum > 0 and dampening 0, got momentum {} and dampening {}",
                            config.momentum, config.dampening));
  for (const auto& [name, p, decay] : this->params()) {
    check_on_host(name, p, "Sgd");
    if (p.dtype() != DType::F32 && p.dtype() != DType::F64)
      fail("Sgd", "parameter '" + name + "' is " + p.str() + "; only float32 and float64 are supported");
    if (!p.is_contiguous()) fail("Sgd", "parameter '" + name + "' must be contiguous, got " + p.str());
    // Plain SGD keeps no buffers at all.
    Tensor momentum = config.momentum != 0 ? Tensor::zeros(p.shape(), p.dtype(), p.device()) : Tensor();
    slots_.push_back({momentum, false});
  }
}

void Sgd::step(double grad_scale) {
  NoGradGuard no_grad;
  begin_step();
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const auto& [name, p, decay] = params()[i];
    Slot& s = slots_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    check_on_host(name, p, "Sgd::step");  // moved to a GPU after construction
    g = g.contiguous();
    const double wd = decay ? config_.weight_decay : 0.0;
    if (p.dtype() == DType::F32)
      sgd_update(p.data<float>(), g.data<float>(), s.momentum.defined() ? s.momentum.data<float>() : nullptr, p.numel(),
                 config_, lr(), wd, grad_scale, s.started);
    else
      sgd_update(p.data<double>(), g.data<double>(), s.momentum.defined() ? s.momentum.data<double>() : nullptr,
                 p.numel(), config_, lr(), wd, grad_scale, s.started);
    s.started = true;
  }
}

std::map<std::string, Tensor> Sgd::state_tensors() const {
  std::map<std::string, Tensor> out;
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].momentum.defined()) out[params()[i].name + ".sgd_momentum"] = slots_[i].momentum;
  return out;
}

void Sgd::load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step) {
  // Every tensor is checked before any is copied: a bad checkpoint leaves the state as it was.
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].momentum.defined()) named_moment(tensors, params()[i].name, params()[i].tensor, ".sgd_momentum");
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.momentum.defined()) s.momentum.copy_(named_moment(tensors, params()[i].name, params()[i].tensor, ".sgd_momentum"));
    s.started = step > 0;
  }
  set_steps(step);
}

double grad_norm(const std::vector<Tensor>& params) {
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
      table_for<float>(g, "grad_norm").sum_squares(g.data<float>(), g.numel(), acc.data<float>(), true);
    else
      table_for<double>(g, "grad_norm").sum_squares(g.data<double>(), g.numel(), acc.data<double>(), true);
  }
  double total = 0.0;
  for (const Tensor& a : accumulators) total += a.item();
  return std::sqrt(total);
}

double clip_scale(double norm, double max_norm) {
  return std::isfinite(norm) && norm > max_norm && norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  const double norm = grad_norm(params);
  const double scale = clip_scale(norm, max_norm);
  if (scale != 1.0) {
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
  if (kind == Kind::WarmupConstant) return base_lr;
  if (kind == Kind::WarmupInverseSqrt) {
    // With no warm-up the decay starts from step 0 as if the warm-up were one step long, so
    // the first value is base_lr rather than a division by zero.
    const double w = static_cast<double>(std::max<std::int64_t>(1, warmup_steps));
    return std::max(min_lr, base_lr * std::sqrt(w / static_cast<double>(step + 1)));
  }
  const std::int64_t decay = std::max<std::int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay));
  // Both written from min_lr up, so the value at and after total_steps is min_lr exactly.
  if (kind == Kind::WarmupLinear) return min_lr + (base_lr - min_lr) * (1.0 - progress);
  return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

namespace {

// schedule_name's names of the Warmup* kinds, the ones parse_schedule reads back.
constexpr std::pair<const char*, LrSchedule::Kind> kScheduleNames[] = {
    {"cosine", LrSchedule::Kind::WarmupCosine},
    {"linear", LrSchedule::Kind::WarmupLinear},
    {"constant", LrSchedule::Kind::WarmupConstant},
    {"inverse-sqrt", LrSchedule::Kind::WarmupInverseSqrt},
};

}  // namespace

const char* schedule_name(LrSchedule::Kind kind) {
  if (kind == LrSchedule::Kind::Constant) return "constant";
  for (const auto& [name, k] : kScheduleNames)
    if (k == kind) return name;
  return "?";
}

LrSchedule::Kind parse_schedule(const std::string& name) {
  for (const auto& [n, kind] : kScheduleNames)
    if (name == n) return kind;
  throw std::invalid_argument("unknown schedule '" + printable(name) + "' (expected cosine, linear, constant or inverse-sqrt)");
}

}  // namespace wedge
