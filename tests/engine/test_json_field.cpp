// json_field: a config field of the wrong type or range is an error naming it, never a cast.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/json_field.h"

using wedge::json_field;

TEST_CASE("json_field reads what fits, falls back when absent, and names the field otherwise") {
  const auto j = nlohmann::json::parse(
      R"({"n": 12, "neg": -5, "huge": 1e30, "half": 2.5, "big": 18446744073709551615, "s": "text", "b": true,
          "x": 0.25, "v": [1, 2, 3], "vbad": [1, "a"], "i32": 3000000000})");
  CHECK(json_field(j, "n", std::int64_t{0}) == 12);
  CHECK(json_field(j, "absent", std::int64_t{7}) == 7);
  CHECK(json_field(j, "neg", std::int64_t{0}) == -5);
  CHECK(json_field(j, "big", std::uint64_t{0}) == 18446744073709551615ull);
  CHECK(json_field(j, "x", 0.0) == 0.25);
  CHECK(json_field(j, "n", 0.0) == 12.0);  // an integer is a number
  CHECK(json_field(j, "s", std::string()) == "text");
  CHECK(json_field(j, "b", false));
  CHECK(json_field(j, "v", std::vector<std::int32_t>{}) == std::vector<std::int32_t>{1, 2, 3});
  CHECK_THROWS_WITH_AS(json_field(j, "huge", std::int64_t{0}), doctest::Contains("field 'huge' is 1e+30, expected an integer"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "half", std::int64_t{0}), doctest::Contains("field 'half'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "neg", std::uint64_t{0}), doctest::Contains("field 'neg' is -5"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "big", std::int64_t{0}), doctest::Contains("field 'big'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "i32", std::int32_t{0}), doctest::Contains("[-2147483648, 2147483647]"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "s", 0.0), doctest::Contains("expected a number"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "n", std::string()), doctest::Contains("expected a string"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "n", false), doctest::Contains("expected true or false"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(j, "vbad", std::vector<std::int32_t>{}), doctest::Contains("field 'vbad' is \"a\""),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(json_field(nlohmann::json::array(), "n", 0), doctest::Contains("expected a JSON object"),
                       std::invalid_argument);
}
