#include "tools/training_support.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/core.h>

namespace wedge::tools {

namespace {
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }
}  // namespace

InterruptScope::InterruptScope() : previous_(std::signal(SIGINT, on_sigint)) { g_interrupted.store(false); }
InterruptScope::~InterruptScope() { std::signal(SIGINT, previous_); }
bool interrupt_requested() { return g_interrupted.load(); }

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
  }
}

void claim_run_folder(const std::string& dir, const std::string& continue_hint) {
  const std::filesystem::path config = std::filesystem::path(dir) / "config.json";
  std::error_code ec;
  if (std::filesystem::exists(config, ec))
    throw std::runtime_error("--out " + dir + " already holds a run (" + config.string() +
                             "); choose another folder" + continue_hint);
  std::filesystem::create_directories(dir);
}

void append_metrics(std::ofstream& file, const std::string& path, const nlohmann::json& line) {
  file << line.dump() << "\n";
  file.flush();
  if (!file) throw std::runtime_error("cannot write " + path + " (is the disk full?); stopping");
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  bool written = false;
  {
    std::ofstream out(tmp);
    out << j.dump(2) << "\n";
    out.close();
    written = static_cast<bool>(out);
  }
  std::error_code ec;
  if (!written) {
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error("cannot write " + path + " (is the disk full?)");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw std::runtime_error("cannot write " + path);
  }
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

LrSchedule warmup_cosine(double lr, std::int64_t warmup, std::int64_t total_steps, double min_lr_ratio) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::WarmupCosine;
  s.base_lr = lr;
  s.warmup_steps = warmup >= 0 ? warmup : std::max<std::int64_t>(1, total_steps / 20);
  s.total_steps = total_steps;
  s.min_lr = lr * min_lr_ratio;
  return s;
}

std::string fmt_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<std::int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, static_cast<int>((s % 3600) / 60));
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, static_cast<int>(s % 60));
  return fmt::format("{}s", s);
}

}  // namespace wedge::tools
