// Will the model fit? Checked from the configuration's parameter count before a single
// tensor is allocated, so that a size this machine cannot hold is one clear error line
// instead of the kernel's OOM killer or an std::bad_alloc halfway through building.
//
// The estimate counts what every parameter costs in float32 (4 bytes a copy): training keeps
// the weights, their gradients and AdamW's two moments (16 bytes per parameter), evaluation
// the weights alone (4 bytes). Activations come on top and are not counted, so a model that
// passes can still be too large for a big batch; one that fails cannot train here at all.
// The memory compared with is the host's (MemAvailable of /proc/meminfo): every model is
// built on the host, also one that then moves to a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/lm.h"
#include "models/nli.h"

namespace wedge::models {

enum class ModelUse {
  training,    // weights, gradients, AdamW's first and second moments
  evaluation,  // the weights alone (eval, generate, classify, audit-causal)
};

// 16 for training, 4 for evaluation.
std::int64_t bytes_per_parameter(ModelUse use);

// MemAvailable of `meminfo` (a /proc/meminfo file), in bytes; nullopt when the file cannot
// be read or has no such line (then nothing is checked).
std::optional<std::int64_t> available_memory_bytes(const std::string& meminfo = "/proc/meminfo");

// Throws std::runtime_error, one line: "the model has N parameters and needs ~X GiB for
// weights, gradients and AdamW state; this machine has Y GiB available — reduce ..." when
// parameters × bytes_per_parameter(use) exceeds `available_bytes`. nullopt: no check.
void check_model_memory(std::int64_t parameters, ModelUse use, std::optional<std::int64_t> available_bytes);

// The same against this machine's MemAvailable, for the model `config` describes (its
// parameter_count(); a configuration validate() rejects throws std::invalid_argument).
void check_model_memory(const LMConfig& config, ModelUse use);
void check_model_memory(const NliConfig& config, ModelUse use);

}  // namespace wedge::models
