// What every training loop in tools/ shares: Ctrl-C handling, moving parameters in and out
// of checkpoints, the config file, durations for progress lines.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/module.h"
#include "engine/optim.h"
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

// The device of a module's first parameter (CPU for a module without parameters).
Device module_device(const Module& m);
// Every parameter by its dotted name.
std::map<std::string, Tensor> parameter_map(const Module& m);
// Copies each parameter from a checkpoint, with an error naming the file and the tensor
// when one is missing or has another shape or dtype.
void load_parameters(Module& m, const SafeTensors& st, const std::string& file);

// Writes `j` to `path` through a temporary file and a rename.
void write_json_file(const std::string& path, const nlohmann::json& j);
// Reads a JSON file; the error names the file.
nlohmann::json read_json_file(const std::string& path);

// AdamW as every trainer here runs it: β2 0.98, weight decay on the matrices only
// (decays_by_default: not on biases, normalisation parameters, A_log, D, dt_bias).
Adam make_adamw(const Module& model, double lr, double weight_decay);
// Linear warm-up over `warmup` steps (negative: 5 % of the run, at least 1), then half a
// cosine down to lr · min_lr_ratio at total_steps.
LrSchedule warmup_cosine(double lr, std::int64_t warmup, std::int64_t total_steps, double min_lr_ratio);

// "42s", "3m07s", "1h05m"; "?" for a negative or non-finite time.
std::string fmt_duration(double seconds);

}  // namespace wedge::tools
