#include "models/memory_check.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "models/param_count.h"

namespace wedge::models {

namespace {

// 1234567 -> "1,234,567".
std::string with_commas(std::int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i - 1] != '-' && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string gib(double bytes) {
  const double g = bytes / double(std::int64_t{1} << 30);
  return g >= 1.0 ? fmt::format("{:.1f} GiB", g) : fmt::format("{:.0f} MiB", bytes / double(1 << 20));
}

}  // namespace

std::int64_t bytes_per_parameter(ModelUse use) { return use == ModelUse::training ? 4 * 4 : 4; }

std::optional<std::int64_t> available_memory_bytes(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    // "MemAvailable:   21970652 kB"
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    std::int64_t kib = -1;
    std::string unit;
    if (!(fields >> kib >> unit) || kib < 0 || unit != "kB" || kib > INT64_MAX / 1024) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

void check_model_memory(std::int64_t parameters, ModelUse use, std::optional<std::int64_t> available_bytes) {
  if (!available_bytes) return;
  const std::int64_t per = bytes_per_parameter(use);
  // parameters · per > available, without forming a product that could overflow.
  if (parameters <= *available_bytes / per) return;
  throw std::runtime_error(fmt::format(
      "the model has {} parameters and needs ~{} {}; this machine has {} available — reduce --d-model/--layers "
      "(or the vocabulary)",
      with_commas(parameters), gib(double(parameters) * double(per)),
      use == ModelUse::training ? "for weights, gradients and AdamW state" : "for its weights",
      gib(double(*available_bytes))));
}

void check_model_memory(const LMConfig& config, ModelUse use) {
  check_model_memory(parameter_count(config).total, use, available_memory_bytes());
}

void check_model_memory(const NliConfig& config, ModelUse use) {
  check_model_memory(parameter_count(config).total, use, available_memory_bytes());
}

}  // namespace wedge::models
