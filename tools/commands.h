// Each sub-command of the `wedge` CLI lives in its own tools/cmd_*.cpp and registers
// itself on the root CLI11 app through one of these functions (called from main.cpp).
// A command's callback throws std::exception on failure; main prints "error: <what>".
#pragma once

#include <cstdint>
#include <string>

namespace CLI { class App; }

namespace wedge::tools {

void register_ops_command(CLI::App& app);     // wedge ops
void register_data_commands(CLI::App& app);   // wedge tokenize / vocab train / data stats
void register_model_commands(CLI::App& app);  // wedge params / audit-causal
void register_train_commands(CLI::App& app);  // wedge train / eval / classify / plot / bench-step
void register_generate_command(CLI::App& app);  // wedge generate
void register_bench_generate_command(CLI::App& app);  // wedge bench-generate
void register_depsim_command(CLI::App& app);  // wedge depsim

// n with a comma between groups of three digits, for the commands' tables: -1,234,567.
std::string with_commas(std::int64_t n);

}  // namespace wedge::tools
