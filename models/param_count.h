// Parameter counts worked out from a configuration alone, without building the model: what
// `wedge params` prints, and what the memory check before training multiplies. Building a
// model of 65,536 widths to count it would need terabytes; the formula needs nothing.
//
// The parts are the rows parameter_parts() (models/tied_embedding_lm.h) makes from a built
// model's named parameters, in the same order and with the same names: "token_embedding",
// then one block's parts ("attention.qkv", "mixing.plucker", "mixer", "experts.3.w1", ...),
// each summed over the layers, then what follows the blocks ("final_norm", "classifier.*").
// tests/models/test_param_count.cpp holds the two side by side for many configurations.
//
// Every product and sum is checked: a configuration whose count does not fit in 64 bits is
// an std::invalid_argument naming the sizes, never a wrapped number.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/lm.h"
#include "models/nli.h"

namespace wedge::models {

struct ParameterCount {
  std::int64_t total = 0;
  // (part, parameters), in order of first appearance in the model, summed over the layers.
  std::vector<std::pair<std::string, std::int64_t>> parts;
};

// One factor of a product, named the way a user sets it ("--d-model") or derives it
// ("E = 2 d"), so that an overflow says which sizes were too large.
struct NamedSize {
  std::string_view name;
  std::int64_t value;
};

// The product of `sizes`; std::invalid_argument naming every factor and its value when it
// does not fit in int64 (the sizes are >= 0).
std::int64_t checked_product(std::initializer_list<NamedSize> sizes);
// a + b; std::invalid_argument naming `what` when the sum does not fit in int64.
std::int64_t checked_sum(std::int64_t a, std::int64_t b, std::string_view what);

// The count of make_model(config) / make_nli_model(config): validate()s the configuration
// first (std::invalid_argument naming the flag), then counts.
ParameterCount parameter_count(const LMConfig& config);
ParameterCount parameter_count(const NliConfig& config);

namespace detail {
// The count without validate() — what validate() itself calls once the sizes are within
// their bounds, to reject a configuration whose count overflows.
ParameterCount count_parameters(const LMConfig& config);
ParameterCount count_parameters(const NliConfig& config);
}  // namespace detail

}  // namespace wedge::models
