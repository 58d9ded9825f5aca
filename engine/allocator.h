// Memory for tensors, per device. The CPU allocator keeps freed blocks in size-class
// free lists so a training loop that frees and reallocates the same activation sizes
// every step reuses memory instead of returning it to the OS and page-faulting it back.
// A CUDA backend registers its own caching allocator (plain cudaMalloc blocks, never
// managed memory) with register_allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/device.h"

namespace wedge {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory aligned to at least 64 bytes; throws std::bad_alloc (or a
  // std::runtime_error naming the size and device) when none can be had.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  // Copies between this device and the host. dst/src on the host side are plain pointers.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_within(void* dst, const void* src, std::size_t bytes) = 0;
  // Waits for all queued work on the device (no-op on CPU).
  virtual void synchronize() {}
  // Bookkeeping, for tests and memory reports.
  virtual std::size_t bytes_in_use() const = 0;
  virtual std::size_t bytes_cached() const = 0;
  // Returns cached (free) blocks to the system.
  virtual void release_cached() = 0;
};

// The allocator for a device kind; throws std::runtime_error naming the device when the
// backend for it was not built in (e.g. "cuda: this build has no CUDA backend").
Allocator& allocator_for(Device d);
bool has_allocator(DeviceKind kind);
void register_allocator(DeviceKind kind, Allocator* allocator);

}  // namespace wedge
