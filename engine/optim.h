// Optimizers (Adam, AdamW, SGD with momentum), gradient clipping by global norm and
// learning-rate schedules.
//
// Optimizer is the base class: it holds what every optimizer shares (the parameters with
// their names and decay flags, the learning rate, the optional schedule and the step
// count) and says once how they behave; Adam and Sgd add their update and their state, so
// a training loop can hold an Optimizer&. Adam's update is one kernel call for all
// parameters of a device and dtype (KernelTable::adam_update, one vectorised pass); SGD's
// is a loop on the host. This file keeps the state (moments, momentum buffers and the step
// count) and the bookkeeping that makes a run resumable: state_tensors() / load_state()
// name every state tensor after its parameter so a safetensors checkpoint can hold it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace wedge {

// Learning-rate schedules: lr(step) for step = 0, 1, ...
struct LrSchedule {
  // New kinds go at the end: the values of the existing ones stay as they are.
  enum class Kind { Constant, WarmupCosine, WarmupLinear, WarmupConstant, WarmupInverseSqrt };
  Kind kind = Kind::Constant;
  double base_lr = 1e-3;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  double min_lr = 0.0;
  // Constant: base_lr at every step (warm-up ignored). Every Warmup* kind first rises
  // linearly from base_lr / warmup_steps to base_lr over the warm-up (steps 0 .. warmup_steps - 1),
  // then:
  //   WarmupCosine:      half a cosine from base_lr down to min_lr at total_steps (held after);
  //   WarmupLinear:      a straight line from base_lr down to min_lr at total_steps (held after);
  //   WarmupConstant:    base_lr;
  //   WarmupInverseSqrt: base_lr * sqrt(w / (step + 1)) with w = max(warmup_steps, 1), never
  //                      below min_lr (total_steps unused).
  double at(std::int64_t step) const;
};

// "cosine", "linear", "constant", "inverse-sqrt" for the Warmup* kinds. Kind::Constant is
// also "constant": it has the values of WarmupConstant whenever warmup_steps is 0.
const char* schedule_name(LrSchedule::Kind kind);
// The Warmup* kind of a name of schedule_name's (what a command line's --schedule takes);
// std::invalid_argument for any other name.
LrSchedule::Kind parse_schedule(const std::string& name);

struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;  // true: AdamW (Loshchilov & Hutter); false: Adam with L2 in g
};

// Which parameters weight decay applies to, by name and tensor.
using DecayRule = std::function<bool(const std::string& name, const Tensor& param)>;
// The rule wedge's models train with: decay the matrices (dim >= 2: weights, embeddings,
// the restriction maps) but not vectors (biases, LayerNorm gamma and beta, the SSM's skip
// D and step-size bias) nor the SSM's A_log, whose decay toward 0 would pull every state's
// time scale toward one step.
bool decays_by_default(const std::string& name, const Tensor& param);

// What Adam and Sgd share. A training loop can drive either through an Optimizer&:
//   opt.zero_grad(); ...backward...; opt.step(clip_scale(grad_norm(...)));
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Is weight decay applied to parameter `name`? (false for unknown names)
  bool decayed(const std::string& name) const;
  // Drops the gradient of every parameter.
  void zero_grad();
  // The learning rate the next step() uses, unless a schedule is set: that overwrites it at
  // every step, and lr() is then the rate of the step just taken.
  void set_lr(double lr) { lr_ = lr; }
  double lr() const { return lr_; }
  // The number of step()s taken (or the count load_state was given).
  std::int64_t steps() const { return step_; }
  // From now on every step() first sets the learning rate to schedule.at(steps()), the
  // count before that step (the first update uses at(0)); set_lr is then overwritten at the
  // next step. schedule() is the schedule set, or nullptr.
  void set_schedule(LrSchedule schedule) { schedule_ = schedule; }
  const LrSchedule* schedule() const { return schedule_ ? &*schedule_ : nullptr; }

  // One update of every parameter that has a gradient, each gradient multiplied by
  // grad_scale first (clip_scale's factor: clipping inside the update, without rewriting
  // the gradients). Every step() starts with begin_step(): the schedule, then the count.
  virtual void step(double grad_scale = 1.0) = 0;
  // The optimizer's state tensors, each named after its parameter ("<name>.<kind>"), for a
  // checkpoint; load_state takes them back (a missing tensor, or one of another shape or
  // dtype than its parameter, is std::runtime_error naming it) and sets steps() to `step`.
  virtual std::map<std::string, Tensor> state_tensors() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step) = 0;

 protected:
  // One parameter: its name, the tensor (a handle sharing the caller's storage) and
  // whether weight decay applies to it.
  struct Param {
    std::string name;
    Tensor tensor;
    bool decay = true;
  };
  // params: (name, tensor) pairs, e.g. Module::named_parameters(). Weight decay applies to
  // the parameters `decays` accepts (all of them when it is empty).
  Optimizer(std::vector<std::pair<std::string, Tensor>> params, double lr, const DecayRule& decays);
  // Copies and moves are the subclasses' (an Optimizer alone would slice).
  Optimizer(const Optimizer&) = default;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(const Optimizer&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // The parameters, in the order given.
  const std::vector<Param>& params() const { return params_; }
  // What every subclass's step() does first: lr = schedule.at(steps()) when a schedule is
  // set, then steps() + 1 (so the update of step t, counted from 1, sees steps() == t).
  void begin_step() {
    if (schedule_) lr_ = schedule_->at(step_);
    ++step_;
  }
  // For load_state and its like: the count of steps already taken.
  void set_steps(std::int64_t step) { step_ = step; }

 private:
  std::vector<Param> params_;
  double lr_;
  std::optional<LrSchedule> schedule_;
  std::int64_t step_ = 0;
};

// Adam, or AdamW when config.decoupled (as AdamConfig says).
class Adam : public Optimizer {
 public:
  // params and decays as Optimizer's; config.lr is the starting lr().
  Adam(std::vector<std::pair<std::string, Tensor>> params, AdamConfig config, DecayRule decays = {});
  // Bias correction uses the step count after increment (t = 1 on the first step).
  void step(double grad_scale = 1.0) override;
  // The hyper-parameters, with .lr the current lr().
  AdamConfig config() const {
    AdamConfig c = config_;
    c.lr = lr();
    return c;
  }

  // "<name>.adam_m" / "<name>.adam_v" for every parameter. (Not for a sharded optimizer,
  // which holds only part of them: see export_moments.)
  std::map<std::string, Tensor> state_tensors() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step) override;

  // ZeRO stage 1, one rank's part of a data-parallel optimizer. Lay the parameters end to
  // end in their order (element i of a parameter at that parameter's offset + i): from now
  // on this optimizer keeps first and second moments for elements [begin, end) only, and
  // step() updates only them; the other elements are other ranks' to update. The moments
  // restart at zero (import_moments loads them). A shard may cut a parameter anywhere.
  void keep_shard(std::int64_t begin, std::int64_t end);
  // All parameters' elements laid end to end as above.
  std::int64_t flat_size() const;
  // The moments of the elements this optimizer keeps (all of them, unless sharded), at
  // their places in the flat layout; export leaves the other elements of m and v alone,
  // import reads only its own. float32 parameters only.
  void export_moments(std::span<float> m, std::span<float> v) const;
  void import_moments(std::span<const float> m, std::span<const float> v, std::int64_t step);
  // A checkpoint's moments (named as state_tensors() names them, each of its parameter's
  // shape) laid end to end as above, all of them, sharded or not, with load_state's checks:
  // a missing tensor, or one of another shape or dtype, is std::runtime_error naming it.
  void flatten_state(const std::map<std::string, Tensor>& tensors, std::span<float> m, std::span<float> v) const;

 private:
  // The state of params()[i], at index i.
  struct Slot {
    Tensor m, v;  // the parameter's shape, or 1-D over the kept elements
    std::int64_t flat_offset = 0;      // where the parameter starts in the flat layout
    std::int64_t first = 0, kept = 0;  // the elements [first, first + kept) this optimizer updates
  };
  void check_flat(std::size_t m_size, std::size_t v_size, const char* op) const;
  std::vector<Slot> slots_;
  AdamConfig config_;  // its lr is unused: the rate is Optimizer's lr()
  bool sharded_ = false;
};

// Stochastic gradient descent with momentum, with the semantics of torch.optim.SGD:
//   g = grad_scale * grad + weight_decay * p          (L2 in the gradient)
//   buf = g on a parameter's first update, else momentum * buf + (1 - dampening) * g
//   p -= lr * (nesterov ? g + momentum * buf : buf)   (p -= lr * g when momentum is 0)
struct SgdConfig {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0 (as PyTorch)
  double weight_decay = 0;
};

// The update is a plain loop on the host, in the parameter's dtype (float32 or float64):
// parameters must be on the CPU — a CUDA parameter is refused with std::invalid_argument
// (there is no SGD kernel; use Adam there), at construction and at every step.
class Sgd : public Optimizer {
 public:
  // params and decays as Optimizer's; config.lr is the starting lr(). std::invalid_argument
  // for a negative lr, momentum or weight decay, nesterov without momentum or with
  // dampening, and a parameter that is not contiguous or not float32/float64 on the CPU.
  Sgd(std::vector<std::pair<std::string, Tensor>> params, SgdConfig config, DecayRule decays = {});
  // Parameters without a gradient, and their momentum, are left as they are.
  void step(double grad_scale = 1.0) override;
  // The hyper-parameters, with .lr the current lr().
  SgdConfig config() const {
    SgdConfig c = config_;
    c.lr = lr();
    return c;
  }

  // "<name>.sgd_momentum" for every parameter (none when momentum is 0: plain SGD has no
  // state but the step count). load_state takes them back with Adam::load_state's checks,
  // and counts every buffer as started when step > 0, so the next update is
  // momentum * buf + (1 - dampening) * g. (Only a parameter that had no gradient in any of
  // the first `step` steps differs from PyTorch then, and only with dampening != 0:
  // PyTorch would start its buffer at g.)
  std::map<std::string, Tensor> state_tensors() const override;
  void load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step) override;

 private:
  // The state of params()[i], at index i.
  struct Slot {
    Tensor momentum;       // the parameter's shape; undefined when config.momentum is 0
    bool started = false;  // has the momentum buffer been set by an update (or loaded)?
  };
  std::vector<Slot> slots_;
  SgdConfig config_;  // its lr is unused: the rate is Optimizer's lr()
};

// The global L2 norm of all gradients (parameters without one are skipped).
double grad_norm(const std::vector<Tensor>& params);
// The factor that brings a gradient norm down to max_norm (1 when it is already under it
// or is not finite — a NaN loss is the trainer's to report, not clipping's to hide).
double clip_scale(double norm, double max_norm);
// Scales all gradients so their global L2 norm is at most max_norm; returns the norm
// before clipping. (A training loop can instead pass clip_scale(grad_norm(...)) to
// Optimizer::step, which avoids rewriting the gradients.)
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace wedge
