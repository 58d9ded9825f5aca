#include "tools/training_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/core.h>

#include <unistd.h>

#include "kernels/cpu/cpu.h"

namespace wedge::tools {

namespace {
std::atomic<bool> g_interrupted{false};
// The first Ctrl-C asks the loop to stop after its step (and checkpoint); a second one,
// e.g. during a long evaluation, ends the process at once with the shell's status for it.
extern "C" void on_sigint(int) {
  if (g_interrupted.exchange(true)) {
    static const char kMessage[] = "\ninterrupted twice: stopping now, without a checkpoint\n";
    [[maybe_unused]] const ssize_t n = ::write(2, kMessage, sizeof kMessage - 1);
    ::_exit(kInterruptedExitStatus);
  }
}
}  // namespace

InterruptScope::InterruptScope() : previous_(std::signal(SIGINT, on_sigint)) { g_interrupted.store(false); }
InterruptScope::~InterruptScope() { std::signal(SIGINT, previous_); }
bool interrupt_requested() { return g_interrupted.load(); }

std::string precision_description(Precision precision, const Device& device) {
  if (precision == Precision::F32) return "fp32";
  if (device.is_cpu()) return fmt::format("bf16 (GEMM: {})", kernels::bf16_gemm_description());
  return "bf16 (GEMM: cuBLAS on bf16 operands)";
}

Device module_device(const Module& m) {
  const auto params = m.parameters();
  return params.empty() ? Device::cpu() : params.front().device();
}

std::map<std::string, Tensor> parameter_map(const Module& m) {
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : m.named_parameters()) out[name] = p;
  return out;
}

void load_parameters(Module& m, const SafeTensors& st, const std::string& file) {
  for (auto& [name, p] : m.named_parameters()) {
    auto it = st.tensors.find(name);
    Tensor dst = p;
    assign_checked(dst, it == st.tensors.end() ? Tensor() : it->second, name, file);
    if (!all_finite(dst))
      throw std::runtime_error("checkpoint '" + file + "': tensor '" + name +
                               "' holds NaN or Inf (saved from a diverged run?); refusing to use it");
  }
}

bool all_finite(const Tensor& t) {
  if (t.dtype() == DType::I32) return true;
  const Tensor h = t.detach().to(Device::cpu()).contiguous();
  const std::int64_t n = h.numel();
  if (h.dtype() == DType::F32) {
    const float* p = static_cast<const float*>(h.raw_data());
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return false;
  } else {
    const double* p = static_cast<const double*>(h.raw_data());
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return false;
  }
  return true;
}


nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + " is missing");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read " + path + ": " + e.what());
  }
}

Adam make_adamw(const Module& model, double lr, double weight_decay) {
  AdamConfig config;
  config.lr = lr;
  config.weight_decay = weight_decay;
  config.beta2 = 0.98;
  return Adam(model.named_parameters(), config, decays_by_default);
}

std::int64_t resolve_warmup(std::int64_t warmup, std::int64_t total_steps) {
  return warmup >= 0 ? warmup : std::max<std::int64_t>(1, total_steps / 20);
}

LrSchedule make_schedule(const std::string& kind, double lr, std::int64_t warmup_steps, std::int64_t total_steps,
                         double min_lr) {
  LrSchedule s;
  s.kind = parse_schedule(kind);
  s.base_lr = lr;
  s.warmup_steps = warmup_steps;
  s.total_steps = total_steps;
  s.min_lr = min_lr;
  return s;
}

LrSchedule warmup_cosine(double lr, std::int64_t warmup, std::int64_t total_steps, double min_lr_ratio) {
  return make_schedule("cosine", lr, resolve_warmup(warmup, total_steps), total_steps, lr * min_lr_ratio);
}

std::string fmt_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, static_cast<int>((s % 3600) / 60));
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, static_cast<int>(s % 60));
  return fmt::format("{}s", s);
}

}  // namespace wedge::tools
