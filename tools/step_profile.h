// `wedge bench-step --profile`: the profiler's totals (engine/profile.h) as a per-step
// table and as JSON.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/profile.h"

namespace wedge::tools {

// Per step: the report's totals divided by `steps`; shares of `step_ms` (the mean step).
struct StepProfile {
  profile::Report report;
  std::int64_t steps = 1;
  double step_ms = 0;  // mean wall time of the profiled steps
  int threads = 1;
};

std::string profile_table(const StepProfile& p, std::size_t gemm_rows = 12);
nlohmann::json profile_json(const StepProfile& p);

}  // namespace wedge::tools
