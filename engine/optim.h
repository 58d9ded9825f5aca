// Optimizers (Adam, AdamW), gradient clipping by global norm and learning-rate schedules.
//
// The update itself is one kernel call per parameter (KernelTable::adam_update); this
// file keeps the state (first/second moments and the step count) and the bookkeeping
// that makes a run resumable: state_tensors() / load_state() name every moment tensor
// after its parameter so a safetensors checkpoint can hold it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace wedge {

struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;  // true: AdamW (Loshchilov & Hutter); false: Adam with L2 in g
};

class Adam {
 public:
  // params: (name, tensor) pairs, e.g. Module::named_parameters().
  Adam(std::vector<std::pair<std::string, Tensor>> params, AdamConfig config);
  // One update of every parameter that has a gradient. Bias correction uses the step
  // count after increment (t = 1 on the first step).
  void step();
  void zero_grad();
  void set_lr(double lr) { config_.lr = lr; }
  double lr() const { return config_.lr; }
  std::int64_t steps() const { return step_; }
  const AdamConfig& config() const { return config_; }

  // "<name>.adam_m" / "<name>.adam_v" for every parameter; and the step count.
  std::map<std::string, Tensor> state_tensors() const;
  void load_state(const std::map<std::string, Tensor>& tensors, std::int64_t step);

 private:
  struct Slot {
    std::string name;
    Tensor param, m, v;
  };
  std::vector<Slot> slots_;
  AdamConfig config_;
  std::int64_t step_ = 0;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm
// before clipping. Parameters without a gradient are skipped.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// Learning-rate schedules: lr(step) for step = 0, 1, ...
struct LrSchedule {
  enum class Kind { Constant, WarmupCosine } kind = Kind::Constant;
  double base_lr = 1e-3;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  double min_lr = 0.0;
  // Constant: base_lr. WarmupCosine: linear from base_lr/warmup to base_lr over the
  // warm-up, then half a cosine from base_lr down to min_lr at total_steps (held after).
  double at(std::int64_t step) const;
};

}  // namespace wedge
