// Reading one field of a JSON object (a run's config.json, a checkpoint's header) with the
// checks nlohmann's value() leaves out: 1e30 for an integer field is an error instead of a
// cast with undefined behaviour, -5 for an unsigned one an error instead of 2^64 - 5, and
// 2.5 for an integer one an error instead of 2. A missing key gives the fallback; a value of
// another type throws std::invalid_argument naming the field and what it should be.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace wedge {

namespace detail {

[[noreturn]] inline void bad_json_field(const char* key, const nlohmann::json& v, const std::string& expected) {
  std::string shown = v.dump();
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  throw std::invalid_argument(std::string("field '") + key + "' is " + shown + ", expected " + expected);
}

template <typename T>
T json_scalar(const char* key, const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad_json_field(key, v, "true or false");
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    const std::string range =
        "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " + std::to_string(std::numeric_limits<T>::max()) + "]";
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) bad_json_field(key, v, range);
      return static_cast<T>(u);
    }
    if (v.is_number_integer()) {
      const auto i = v.get<std::int64_t>();
      if constexpr (std::is_unsigned_v<T>) {
        if (i < 0) bad_json_field(key, v, range);
      } else {
        if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
            i > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
          bad_json_field(key, v, range);
      }
      return static_cast<T>(i);
    }
    bad_json_field(key, v, range);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) bad_json_field(key, v, "a number");
    return v.get<T>();
  } else {
    static_assert(std::is_same_v<T, std::string>, "json_field: bool, integers, floating point, strings and vectors of them");
    if (!v.is_string()) bad_json_field(key, v, "a string");
    return v.get<std::string>();
  }
}

template <typename T> struct is_vector : std::false_type {};
template <typename T> struct is_vector<std::vector<T>> : std::true_type {};

}  // namespace detail

template <typename T>
T json_field(const nlohmann::json& j, const char* key, const T& fallback) {
  if (!j.is_object()) throw std::invalid_argument(std::string("expected a JSON object holding '") + key + "'");
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (detail::is_vector<T>::value) {
    if (!it->is_array()) detail::bad_json_field(key, *it, "an array");
    T out;
    for (const auto& e : *it) out.push_back(detail::json_scalar<typename T::value_type>(key, e));
    return out;
  } else {
    return detail::json_scalar<T>(key, *it);
  }
}

}  // namespace wedge
