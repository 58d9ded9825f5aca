// What every training loop in tools/ shares: Ctrl-C handling, moving parameters in and out
// of checkpoints, the config file, durations for progress lines.
#pragma once

#include <fstream>
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

// A new run's folder: created when absent; refused (with a message naming it) when it
// already holds a run, so a fresh training never replaces another one's files.
// `continue_hint` says how the existing run can be continued instead.
void claim_run_folder(const std::string& dir, const std::string& continue_hint);
// Appends one JSON line to an open metrics file and flushes it; throws naming `path` when
// the write fails (a full disk), so training stops instead of going on without its log.
void append_metrics(std::ofstream& file, const std::string& path, const nlohmann::json& line);

// Writes `j` to `path` through a temporary file and a rename; on a failed write the
// temporary file is removed and the previous file is left as it was.
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
