// Classification metrics against hand-computed cases.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tools/classification.h"

using namespace wedge::tools;

TEST_CASE("classification report: a hand-computed 3-way case") {
  // gold:      0 0 0 0 1 1 1 2 2 2
  // predicted: 0 0 1 2 1 1 0 2 2 1
  const std::vector<std::int32_t> gold = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
  const std::vector<std::int32_t> pred = {0, 0, 1, 2, 1, 1, 0, 2, 2, 1};
  const ClassificationReport r = classification_report(gold, pred, 3);
  CHECK(r.count == 10);
  CHECK(r.correct == 6);
  CHECK(r.accuracy == doctest::Approx(0.6));
  CHECK(r.confusion == std::vector<std::vector<std::int64_t>>{{2, 1, 1}, {1, 2, 0}, {0, 1, 2}});
  // class 0: P 2/3, R 2/4, F1 2·(2/3)(1/2)/(2/3+1/2) = 4/7
  // class 1: P 2/4, R 2/3, F1 4/7;  class 2: P 2/3, R 2/3, F1 2/3
  CHECK(r.precision[0] == doctest::Approx(2.0 / 3));
  CHECK(r.recall[0] == doctest::Approx(0.5));
  CHECK(r.f1[0] == doctest::Approx(4.0 / 7));
  CHECK(r.f1[1] == doctest::Approx(4.0 / 7));
  CHECK(r.f1[2] == doctest::Approx(2.0 / 3));
  CHECK(r.macro_f1 == doctest::Approx((4.0 / 7 + 4.0 / 7 + 2.0 / 3) / 3));
  // Wilson, 6 of 10: center (0.6 + 1.9208/10) / 1.38415 = 0.57224, half 0.27007
  CHECK(r.accuracy_low == doctest::Approx(0.31267).epsilon(1e-4));
  CHECK(r.accuracy_high == doctest::Approx(0.83182).epsilon(1e-4));
  const nlohmann::json j = r.to_json();
  CHECK(j.at("correct") == 6);
  CHECK(j.at("confusion")[2][1] == 1);
}

TEST_CASE("classification report: edge cases") {
  // All right: the interval still has width, and stays below 1.
  const std::vector<std::int32_t> all = {1, 1, 1, 1};
  const ClassificationReport perfect = classification_report(all, all, 3);
  CHECK(perfect.accuracy == 1.0);
  CHECK(perfect.accuracy_high == 1.0);
  CHECK(perfect.accuracy_low == doctest::Approx(0.51010).epsilon(1e-4));  // 4 / (4 + 1.96²)
  // Classes 0 and 2 never occur and are never predicted: F1 0, macro-F1 1/3.
  CHECK(perfect.f1 == std::vector<double>{0.0, 1.0, 0.0});
  CHECK(perfect.macro_f1 == doctest::Approx(1.0 / 3));
  // The majority-class predictor: recall 1 for its class, precision its share.
  const std::vector<std::int32_t> gold = {0, 0, 1, 2, 0}, majority = {0, 0, 0, 0, 0};
  const ClassificationReport m = classification_report(gold, majority, 3);
  CHECK(m.precision[0] == doctest::Approx(0.6));
  CHECK(m.recall[0] == 1.0);
  CHECK(m.f1[0] == doctest::Approx(0.75));
  CHECK(m.macro_f1 == doctest::Approx(0.25));
  // Bad input.
  CHECK_THROWS_AS(classification_report(gold, all, 3), std::invalid_argument);
  CHECK_THROWS_AS(classification_report({}, {}, 3), std::invalid_argument);
  const std::vector<std::int32_t> out_of_range = {0, 3, 0, 0, 0};
  CHECK_THROWS_WITH_AS(classification_report(gold, out_of_range, 3), doctest::Contains("label 3 at example 1"),
                       std::invalid_argument);
  CHECK_THROWS_AS(wilson_interval(5, 4), std::invalid_argument);
}
