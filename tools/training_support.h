// What every training loop in tools/ shares: Ctrl-C handling, moving parameters in and out
// of checkpoints, durations for progress lines. The run folder itself: tools/run_folder.h.
#pragma once

#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/module.h"
#include "engine/optim.h"
#include "engine/precision.h"
#include "engine/safetensors.h"

namespace wedge::tools {

// While alive, SIGINT only raises a flag (interrupt_requested()): a training loop finishes
// its step, checkpoints and returns. The previous handler comes back afterwards.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;

 private:
  void (*previous_)(int);
};
bool interrupt_requested();
// The exit status of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
inline constexpr int kInterruptedExitStatus = 130;

// What `precision` means on `device`, for start-up lines: "fp32", or "bf16 (GEMM: <the
// kernel path the device's bf16 products take>)".
std::string precision_description(Precision precision, const Device& device);

// The device of a module's first parameter (CPU for a module without parameters).
Device module_device(const Module& m);
// Every parameter by its dotted name.
std::map<std::string, Tensor> parameter_map(const Module& m);
// Copies each parameter from a checkpoint, with an error naming the file and the tensor
// when one is missing or has another shape or dtype.
// A tensor holding NaN or Inf is refused too.
void load_parameters(Module& m, const SafeTensors& st, const std::string& file);
// Whether every element of a floating-point tensor is finite (integer tensors: true).
bool all_finite(const Tensor& t);

// Reads a JSON file; the error names the file.
nlohmann::json read_json_file(const std::string& path);

// AdamW as every trainer here runs it: β2 0.98, weight decay on the matrices only
// (decays_by_default: not on biases, normalisation parameters, A_log, D, dt_bias).
Adam make_adamw(const Module& model, double lr, double weight_decay);
// The warm-up in steps: `warmup`, or when negative 5 % of the run (at least 1).
std::int64_t resolve_warmup(std::int64_t warmup, std::int64_t total_steps);
// Linear warm-up over `warmup_steps`, then `kind` (cosine | linear | constant | inverse-sqrt,
// engine/optim.h) from lr down to min_lr at total_steps.
LrSchedule make_schedule(const std::string& kind, double lr, std::int64_t warmup_steps, std::int64_t total_steps,
                         double min_lr);
// make_schedule("cosine", ...) with the warm-up resolved and min_lr = lr · min_lr_ratio.
LrSchedule warmup_cosine(double lr, std::int64_t warmup, std::int64_t total_steps, double min_lr_ratio);

// "42s", "3m07s", "1h05m"; "?" for a negative or non-finite time.
std::string fmt_duration(double seconds);

}  // namespace wedge::tools
