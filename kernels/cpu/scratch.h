// A growable, aligned float buffer kept for the life of its thread: the fast CPU kernels
// hold their scratch (GEMM packing panels, attention tiles, Plücker caches) in
// thread_local instances, so a training loop in steady state allocates nothing.
#pragma once

#include <cstdlib>
#include <new>

namespace wedge::kernels::cpu {

class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data_); }

  // At least `floats` floats, 4096-byte aligned (page- and cache-line-aligned); the old
  // contents are not kept when it grows.
  float* get(std::size_t floats) {
    if (floats > capacity_) {
      std::free(data_);
      const std::size_t bytes = (floats * sizeof(float) + 4095) & ~std::size_t{4095};
      data_ = static_cast<float*>(std::aligned_alloc(4096, bytes));
      if (!data_) throw std::bad_alloc();
      capacity_ = bytes / sizeof(float);
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace wedge::kernels::cpu
