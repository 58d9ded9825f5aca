#include "tools/classification.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace wedge::tools {

std::pair<double, double> wilson_interval(std::int64_t successes, std::int64_t n) {
  if (n <= 0 || successes < 0 || successes > n)
    throw std::invalid_argument("wilson_interval: need 0 <= successes <= n and n > 0");
  constexpr double z = 1.959963984540054;  // the 97.5 % quantile of the standard normal
  const double N = double(n), p = double(successes) / N, z2 = z * z;
  const double center = (p + z2 / (2 * N)) / (1 + z2 / N);
  const double half = z * std::sqrt(p * (1 - p) / N + z2 / (4 * N * N)) / (1 + z2 / N);
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

ClassificationReport classification_report(std::span<const std::int32_t> gold, std::span<const std::int32_t> predicted,
                                           int classes) {
  if (gold.size() != predicted.size())
    throw std::invalid_argument("classification_report: " + std::to_string(gold.size()) + " gold labels but " +
                                std::to_string(predicted.size()) + " predictions");
  if (gold.empty()) throw std::invalid_argument("classification_report: no examples");
  if (classes < 1) throw std::invalid_argument("classification_report: classes must be positive");
  ClassificationReport r;
  r.classes = classes;
  r.count = static_cast<std::int64_t>(gold.size());
  r.confusion.assign(static_cast<std::size_t>(classes), std::vector<std::int64_t>(static_cast<std::size_t>(classes), 0));
  for (std::size_t i = 0; i < gold.size(); ++i) {
    for (const std::int32_t label : {gold[i], predicted[i]})
      if (label < 0 || label >= classes)
        throw std::invalid_argument("classification_report: label " + std::to_string(label) + " at example " +
                                    std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
    ++r.confusion[static_cast<std::size_t>(gold[i])][static_cast<std::size_t>(predicted[i])];
    r.correct += gold[i] == predicted[i];
  }
  r.accuracy = double(r.correct) / double(r.count);
  std::tie(r.accuracy_low, r.accuracy_high) = wilson_interval(r.correct, r.count);
  for (int k = 0; k < classes; ++k) {
    std::int64_t predicted_k = 0, gold_k = 0;
    for (int j = 0; j < classes; ++j) {
      predicted_k += r.confusion[static_cast<std::size_t>(j)][static_cast<std::size_t>(k)];
      gold_k += r.confusion[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)];
    }
    const double hit = double(r.confusion[static_cast<std::size_t>(k)][static_cast<std::size_t>(k)]);
    const double precision = predicted_k > 0 ? hit / double(predicted_k) : 0.0;
    const double recall = gold_k > 0 ? hit / double(gold_k) : 0.0;
    r.precision.push_back(precision);
    r.recall.push_back(recall);
    r.f1.push_back(precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0);
    r.macro_f1 += r.f1.back() / classes;
  }
  return r;
}

nlohmann::json ClassificationReport::to_json() const {
  return {{"count", count},           {"correct", correct},   {"accuracy", accuracy},
          {"accuracy_low", accuracy_low}, {"accuracy_high", accuracy_high}, {"macro_f1", macro_f1},
          {"precision", precision},   {"recall", recall},     {"f1", f1},
          {"confusion", confusion}};
}

}  // namespace wedge::tools
