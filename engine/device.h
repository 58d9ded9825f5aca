// Where a tensor's memory lives. Device is a property of the tensor: an op given tensors
// on different devices is an error, never a silent copy.
#pragma once

#include <cstdint>
#include <string>

namespace wedge {

// The numeric codes are part of the kernel contract (engine/kernel_table.h kernel_table).
enum class DeviceKind : std::uint8_t { CPU = 0, CUDA = 1 };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::CUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // Parses "cpu", "cuda", "cuda:N"; throws std::invalid_argument naming the text.
  static Device parse(const std::string& text);
};

}  // namespace wedge
