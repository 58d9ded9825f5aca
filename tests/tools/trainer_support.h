// Shared by the trainer tests: fresh run directories, the per-step losses a run logged, and
// a shell command's exit status and output.
#pragma once

#include <unistd.h>

#include <cstdio>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/lm.h"

namespace wedge::testing {

struct ShellRun {
  int status = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command line; throws when the shell cannot be started.
inline ShellRun shell(const std::string& command) {
  ShellRun r;
  std::FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) throw std::runtime_error("cannot start a shell for: " + command);
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) r.out += buf;
  r.status = ::pclose(p);
  return r;
}

inline std::string fresh_run_dir(const std::string& name) {
  const auto p = std::filesystem::temp_directory_path() / ("wedge_run_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

// The "loss" of every step line of <run>/metrics.jsonl, in order.
inline std::vector<double> step_losses(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

// A small model of any kind with dropout on (so resumes must restore the RNG too).
inline models::LMConfig small_config(const std::string& kind, std::int64_t d_model, std::int64_t block) {
  models::LMConfig c;
  c.model = kind;
  c.layers = 2;
  c.d_model = d_model;
  c.d_ff = 2 * d_model;
  c.heads = 2;
  c.block = block;
  c.rank = 6;
  c.windows = {1, 2, 4};
  c.patch = 4;  // SheafState: 4 patches of 4 tokens in a block of 16
  c.cover_depth = 2;
  c.types = 2;
  c.state_size = 4;
  c.section_dim = 8;
  c.expert_d_ff = d_model;
  c.dropout = 0.1;
  c.seed = 3;
  return c;
}

}  // namespace wedge::testing
