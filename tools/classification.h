// How well a K-way classifier did, from its gold and predicted labels: accuracy with a 95 %
// interval, per-class precision / recall / F1, macro-F1 and the confusion matrix. Used by
// the sentence-pair (SNLI) task for every evaluation, and by its baselines.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace wedge::tools {

struct ClassificationReport {
  std::int64_t classes = 0, count = 0, correct = 0;
  std::vector<std::vector<std::int64_t>> confusion;  // [gold][predicted]
  double accuracy = 0;
  // The Wilson score interval at 95 % (z = 1.96): unlike p ± z·sqrt(p(1−p)/n) it stays
  // inside [0, 1] and is not of width 0 at p = 0 or 1.
  double accuracy_low = 0, accuracy_high = 0;
  // Per class. A class never predicted has precision 0; never present, recall 0; F1 is 0
  // when precision + recall is 0.
  std::vector<double> precision, recall, f1;
  double macro_f1 = 0;  // the plain mean of the per-class F1

  nlohmann::json to_json() const;
};

// Throws std::invalid_argument when the spans differ in length, are empty, or hold a label
// outside [0, classes).
ClassificationReport classification_report(std::span<const std::int32_t> gold, std::span<const std::int32_t> predicted,
                                           int classes);

// The Wilson 95 % interval of a proportion of `successes` out of `n` (n > 0).
std::pair<double, double> wilson_interval(std::int64_t successes, std::int64_t n);

}  // namespace wedge::tools
