// Central differences against backward's gradient for every parameter tensor of a model:
// three entries of each (the first, the middle, the last), in float32 with step `h`.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "engine/autograd.h"
#include "engine/module.h"

namespace wedge::models::testing {

inline void check_parameter_gradients(Module& model, const std::function<Tensor()>& loss, float h) {
  model.zero_grad();
  loss().backward();
  for (const auto& [name, p] : model.named_parameters()) {
    CAPTURE(name);
    std::vector<float> values = p.to_vector<float>();
    // A part the batch never reached (an expert no patch was routed to) has no gradient:
    // its derivative is 0.
    const std::vector<float> grad = p.grad().defined() ? p.grad().to_vector<float>() : std::vector<float>(values.size());
    for (std::size_t k : {std::size_t{0}, values.size() / 2, values.size() - 1}) {
      const float original = values[k];
      auto loss_at = [&](float value) {
        values[k] = value;
        NoGradGuard no_grad;
        Tensor(p).detach().copy_(Tensor::from_vector(values, p.shape()));
        return loss().item();
      };
      const double numeric = (loss_at(original + h) - loss_at(original - h)) / (2.0 * h);
      loss_at(original);
      CHECK(grad[k] == doctest::Approx(numeric).epsilon(0.03).scale(0.05));
    }
  }
}

}  // namespace wedge::models::testing
