// wedge params        — the parameter count of a model configuration, part by part, worked
//                       out from the configuration (models/param_count.h): nothing is built
// wedge audit-causal  — the causality audit of models/audit.h on a freshly built model
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/device.h"
#include "models/audit.h"
#include "models/lm.h"
#include "models/memory_check.h"
#include "models/param_count.h"
#include "tools/commands.h"
#include "tools/model_flags.h"

namespace wedge::tools {

namespace {

std::string describe(const models::LMConfig& c) {
  std::string s = fmt::format("{}: {} layers, d {}, {}block {}, vocabulary {}", c.model, c.layers, c.d_model,
                              c.model == "sheaf" ? "" : fmt::format("d_ff {}, ", c.d_ff), c.block, c.vocab_size);
  if (c.model == "transformer") s += fmt::format(", {} heads", c.heads);
  if (c.model == "grassmann") {
    s += fmt::format(", r {}, ", c.rank);
    s += c.window_schedule.empty() ? fmt::format("windows {{{}}}", fmt::join(c.windows, ","))
                                   : fmt::format("window schedule ({})", fmt::join(c.window_schedule, ","));
    if (!c.mix_out_proj) s += ", no mixing output projection";
    if (c.leaky) s += ", LEAKY (pairs with t+Δ)";
  }
  if (c.model == "sheaf") {
    s += fmt::format(", patch {}, cover depth {}, {} types, state {}, sections {}, experts d_ff {}", c.patch,
                     c.cover_depth, c.types, c.state_size, c.section_dim, c.expert_d_ff);
    if (c.leaky) s += ", LEAKY (c_p sees its own patch)";
  }
  return s;
}

// What each part of parameter_breakdown() is, in the paper's symbols.
std::string part_meaning(const std::string& part) {
  static const std::map<std::string, std::string> meaning = {
      {"token_embedding", "E, V x d (also the tied output head)"},
      {"position_embedding", "P, block x d"},
      {"attention.qkv", "W_QKV + b, d -> 3d"},
      {"attention.out", "W_O + b, d -> d"},
      {"mixing.reduce", "W_red + b, d -> r"},
      {"mixing.plucker", "W_plü + b, C(r,2) -> d"},
      {"mixing.out", "W_o + b, d -> d"},
      {"gate", "W_gate + b, 2d -> d"},
      {"ffn.w1", "W1 + b1, d -> d_ff"},
      {"ffn.w2", "W2 + b2, d_ff -> d"},
      {"norm1", "LayerNorm after mixing/attention (SheafState: before the mixer)"},
      {"norm2", "LayerNorm after the feed-forward (SheafState: before the experts)"},
      {"final_norm", "SheafState: LayerNorm before the tied head"},
      {"mixer.in", "W_in, d -> 2E (x and the gate z), E = 2d"},
      {"mixer.dt_down", "step-size projection, E -> ceil(d/16)"},
      {"mixer.dt_up", "step-size projection, ceil(d/16) -> E"},
      {"mixer.B", "W_B, E -> N_s"},
      {"mixer.C", "W_C, E -> N_s"},
      {"mixer", "A_log (E x N_s), D skip, dt bias (E each), restriction bank R (D x K x d_s x d_s)"},
      {"mixer.summary", "W_s + b, E -> d_s (patch summary)"},
      {"mixer.type", "W_τ + b, d_s -> K (soft patch type)"},
      {"mixer.query", "W_a, d_s -> d_s (gluing weights)"},
      {"mixer.state_x", "W_hx, d_s -> E (initial state)"},
      {"mixer.state_b", "W_hb, d_s -> N_s (initial state)"},
      {"mixer.out", "W_out, E -> d"},
      {"router", "W_r + b, d_s -> K (expert of each patch)"},
  };
  const auto it = meaning.find(part);
  return it == meaning.end() ? "" : it->second;
}


void run_params(const ModelFlags& flags, bool json) {
  // A bad flag throws std::invalid_argument naming it; main turns that into one line.
  const models::LMConfig config = flags.config();
  const auto [total, parts] = models::parameter_count(config);
  if (json) {
    nlohmann::ordered_json out;
    out["model"] = config.model;
    out["total"] = total;
    out["parts"] = nlohmann::ordered_json::object();
    for (const auto& [name, count] : parts) out["parts"][name] = count;
    out["config"] = nlohmann::json(config);
    std::cout << out.dump() << std::endl;
    return;
  }
  std::cout << describe(config) << "\n\n";
  std::cout << fmt::format("{:<20} {:>12} {:>8}   {}\n", "part", "parameters", "share", "what");
  for (const auto& [name, count] : parts)
    std::cout << fmt::format("{:<20} {:>12} {:>7.2f}%   {}\n", name, with_commas(count),
                             100.0 * double(count) / double(total), part_meaning(name));
  std::cout << fmt::format("{:<20} {:>12}   ({:.2f} M)\n", "total", with_commas(total),
                           double(total) / 1e6);
}

// `params --task nli`: the sentence-pair classifier's parameters, part by part.
void run_nli_params(const models::NliConfig& config, const std::string& vocab_file, std::int64_t vocab_size, bool json) {
  models::NliConfig c = config;
  c.vocab_size = vocab_file.empty() ? vocab_size : count_vocab_lines(vocab_file);
  const auto [total, parts] = models::parameter_count(c);
  if (json) {
    nlohmann::ordered_json out;
    out["task"] = "nli";
    out["head"] = c.head;
    out["total"] = total;
    out["parts"] = nlohmann::ordered_json::object();
    for (const auto& [name, count] : parts) out["parts"][name] = count;
    out["config"] = nlohmann::json(c);
    std::cout << out.dump() << std::endl;
    return;
  }
  std::cout << fmt::format("sentence-pair classifier, {} head{}: {} layers, d {}, d_ff {}, vocabulary {}\n\n", c.head,
                           c.hypothesis_only ? " (hypothesis only)" : "", c.layers, c.d_model, c.d_ff, c.vocab_size);
  std::cout << fmt::format("{:<28} {:>12} {:>8}\n", "part", "parameters", "share");
  for (const auto& [name, count] : parts)
    std::cout << fmt::format("{:<28} {:>12} {:>7.2f}%\n", name, with_commas(count), 100.0 * double(count) / double(total));
  std::cout << fmt::format("{:<28} {:>12}   ({:.2f} M)\n", "total", with_commas(total), double(total) / 1e6);
}

struct AuditFlags {
  std::int64_t length = 0;  // 0: the whole block
  std::vector<std::int64_t> positions;
  std::string device = "cpu";
};

void run_audit(const ModelFlags& flags, const AuditFlags& audit) {
  const models::LMConfig config = flags.config();
  const Device device = Device::parse(audit.device);
  const std::int64_t L = audit.length > 0 ? audit.length : config.block;
  // The audit freezes the parameters: the weights alone, no gradients or optimizer state.
  models::check_model_memory(config, models::ModelUse::evaluation);
  const auto model = models::make_model(config);
  model->to(device);
  const models::AuditResult result = models::audit_causal(*model, L, config.seed, audit.positions);
  std::cout << describe(config) << " on " << device.str() << "\n";
  if (result.passed) {
    std::cout << result.summary() << std::endl;
    return;
  }
  for (const auto& v : result.violations) std::cout << v.message << "\n";
  std::cout.flush();
  // main prints this as one error line and exits with status 1.
  throw std::runtime_error(fmt::format("audit-causal: the model is NOT causal ({} violation(s), "
                                       "the first at t={})",
                                       result.violations.size(), result.violations.front().t));
}

}  // namespace

std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out = n < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void register_model_commands(CLI::App& app) {
  {
    auto flags = std::make_shared<ModelFlags>();
    auto nli = std::make_shared<NliFlags>();
    auto json = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand(
        "params", "parameter count of a model configuration (or with --task nli the sentence-pair classifier), with a "
                  "per-part breakdown");
    add_model_flags(*cmd, *flags);
    add_nli_flags(cmd, *nli);
    cmd->add_flag("--json", *json, "print one JSON object {model, total, parts, config}");
    cmd->callback([flags, nli, json, cmd] {
      check_task_flags(cmd, nli->task);
      if (nli->task == "nli")
        return run_nli_params(nli_config(cmd, *flags, *nli), flags->vocab_file, flags->values.vocab_size, *json);
      run_params(*flags, *json);
    });
  }
  {
    auto flags = std::make_shared<ModelFlags>();
    auto audit = std::make_shared<AuditFlags>();
    CLI::App* cmd = app.add_subcommand(
        "audit-causal",
        "check that no output at t depends on a token after t (exit status 1 when one does)");
    add_model_flags(*cmd, *flags);
    cmd->add_flag("--leaky", flags->values.leaky,
                  "TEST ONLY: build the Grassmann variant that pairs with t+Δ (must be caught)");
    cmd->add_option("--probe", audit->positions,
                    "positions t to probe (default: 0, L/2, L-2 and around the largest offset)")
        ->delimiter(',');
    cmd->add_option("--length", audit->length, "sequence length L to audit (default: --block)");
    cmd->add_option("--device", audit->device, "cpu | cuda | cuda:N")->capture_default_str();
    cmd->callback([flags, audit] { run_audit(*flags, *audit); });
  }
}

}  // namespace wedge::tools
