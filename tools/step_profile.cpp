#include "tools/step_profile.h"

#include <algorithm>

#include <fmt/format.h>

namespace wedge::tools {

namespace {

// What the step spent outside the kernels and the allocator: autograd's bookkeeping, op
// dispatch and shape checks, and whatever else the host does between kernels.
double host_ms(const StepProfile& p) {
  return std::max(0.0, p.step_ms - (p.report.kernel_ms + p.report.allocation_ms) / double(p.steps));
}

std::string gemm_shape(const profile::GemmGroup& g) {
  std::string s = fmt::format("{} x {} x {}", g.m, g.n, g.k);
  if (g.batch > 1) s += fmt::format(" ({} batched)", g.batch);
  return s;
}

std::string gemm_op(const profile::GemmGroup& g) {
  std::string s = fmt::format("{}{}", g.trans_a ? "T" : "N", g.trans_b ? "T" : "N");
  if (g.bias) s += "+bias";
  if (g.gelu) s += "+gelu";
  if (g.bf16) s += " bf16";
  return s;
}

nlohmann::json rows_json(const std::vector<profile::Row>& rows, const StepProfile& p) {
  const double n = double(p.steps);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"name", r.name},
                   {"forward_ms", r.forward_ms / n},
                   {"backward_ms", r.backward_ms / n},
                   {"other_ms", r.other_ms / n},
                   {"ms", r.ms() / n},
                   {"share", p.step_ms > 0 ? r.ms() / n / p.step_ms : 0.0},
                   {"calls", double(r.calls) / n}});
  return out;
}

void rows_table(std::string& out, const char* title, const std::vector<profile::Row>& rows, const StepProfile& p) {
  const double n = double(p.steps);
  out += fmt::format("{:<36} {:>9} {:>9} {:>9} {:>9} {:>7} {:>8}\n", title, "forward", "backward", "other", "total",
                     "share", "calls");
  for (const auto& r : rows)
    out += fmt::format("{:<36} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>6.1f}% {:>8.0f}\n", r.name, r.forward_ms / n,
                       r.backward_ms / n, r.other_ms / n, r.ms() / n, p.step_ms > 0 ? 100 * r.ms() / n / p.step_ms : 0,
                       double(r.calls) / n);
}

}  // namespace

std::string profile_table(const StepProfile& p, std::size_t gemm_rows) {
  const double n = double(p.steps);
  const auto share = [&](double ms) { return p.step_ms > 0 ? 100 * ms / p.step_ms : 0.0; };
  std::string out = fmt::format("profile: mean of {} steps, {:.2f} ms per step (ms per step below; 'other' is work "
                                "outside forward and backward: the optimizer, the loss value)\n",
                                p.steps, p.step_ms);
  rows_table(out, "kind of work", p.report.kinds, p);
  out += fmt::format("{:<36} {:>39.2f} {:>6.1f}%   (the GEMMs' packing, thread time / {} threads)\n", "  of which packing",
                     p.report.packing_ms / n / p.threads, share(p.report.packing_ms / n / p.threads), p.threads);
  out += fmt::format("{:<36} {:>39.2f} {:>6.1f}%\n", "allocation", p.report.allocation_ms / n,
                     share(p.report.allocation_ms / n));
  out += fmt::format("{:<36} {:>39.2f} {:>6.1f}%   (autograd, op dispatch, the rest)\n", "host", host_ms(p),
                     share(host_ms(p)));
  out += "\n";
  rows_table(out, "model part", p.report.parts, p);
  out += "\n";
  std::vector<profile::Row> top(p.report.part_kinds.begin(),
                                p.report.part_kinds.begin() + std::min<std::ptrdiff_t>(14, std::ssize(p.report.part_kinds)));
  rows_table(out, "part: kind of work", top, p);
  out += fmt::format("\n{:<30} {:<14} {:<24} {:>6} {:>9} {:>7} {:>9} {:>8}\n", "GEMM m x n x k", "op(A)op(B)", "part",
                     "calls", "ms", "share", "GFLOP/s", "packing");
  for (std::size_t i = 0; i < std::min(gemm_rows, p.report.gemms.size()); ++i) {
    const auto& g = p.report.gemms[i];
    out += fmt::format("{:<30} {:<14} {:<24} {:>6.0f} {:>9.2f} {:>6.1f}% {:>9.1f} {:>7.0f}%\n", gemm_shape(g), gemm_op(g),
                       g.part, double(g.calls) / n, g.ms / n, share(g.ms / n), g.ms > 0 ? g.flops / (g.ms / 1e3) / 1e9 : 0,
                       g.ms > 0 ? 100 * g.packing_ms / p.threads / g.ms : 0);
  }
  if (p.report.gemms.size() > gemm_rows)
    out += fmt::format("({} more GEMM shapes in --json)\n", p.report.gemms.size() - gemm_rows);
  return out;
}

nlohmann::json profile_json(const StepProfile& p) {
  const double n = double(p.steps);
  nlohmann::json gemms = nlohmann::json::array();
  for (const auto& g : p.report.gemms)
    gemms.push_back({{"m", g.m},
                     {"n", g.n},
                     {"k", g.k},
                     {"batch", g.batch},
                     {"trans_a", g.trans_a},
                     {"trans_b", g.trans_b},
                     {"bias", g.bias},
                     {"gelu", g.gelu},
                     {"bf16", g.bf16},
                     {"part", g.part},
                     {"calls", double(g.calls) / n},
                     {"ms", g.ms / n},
                     {"packing_thread_ms", g.packing_ms / n},
                     {"gflops_per_s", g.ms > 0 ? g.flops / (g.ms / 1e3) / 1e9 : 0}});
  return {{"steps", p.steps},
          {"step_ms", p.step_ms},
          {"kernel_ms", p.report.kernel_ms / n},
          {"packing_thread_ms", p.report.packing_ms / n},
          {"allocation_ms", p.report.allocation_ms / n},
          {"host_ms", host_ms(p)},
          {"kinds", rows_json(p.report.kinds, p)},
          {"parts", rows_json(p.report.parts, p)},
          {"part_kinds", rows_json(p.report.part_kinds, p)},
          {"kernels", rows_json(p.report.kernels, p)},
          {"gemms", gemms}};
}

}  // namespace wedge::tools
