// Element types a tensor can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace wedge {

// The numeric codes are part of the kernel contract (engine/kernels.def, cast).
enum class DType : std::uint8_t { F32 = 0, F64 = 1, I32 = 2 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I32: return "int32";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::F32 || t == DType::F64; }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::I32; }

}  // namespace wedge
