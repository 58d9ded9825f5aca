// The CPU caching allocator and the per-device allocator registry.
#include "engine/allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace wedge {
namespace {

// Freed blocks are kept in free lists keyed by their (rounded) size and handed out again
// for the next request of that size class. Training allocates the same activation sizes
// every step, so after the first step nothing reaches malloc — and glibc never gets the
// chance to return a 100 MB logits buffer to the OS only to page-fault it back in.
class CpuCachingAllocator final : public Allocator {
 public:
  ~CpuCachingAllocator() override { release_cached(); }

  void* allocate(std::size_t bytes) override {
    const std::size_t size = round_up(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      in_use_ += size;
      return p;
    }
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) {
      // Give the cache back and try once more before failing.
      release_cached_locked();
      p = std::aligned_alloc(64, size);
      if (p == nullptr)
        throw std::runtime_error("cpu: out of memory allocating " + std::to_string(bytes) + " bytes");
    }
    in_use_ += size;
    return p;
  }

  void deallocate(void* ptr, std::size_t bytes) override {
    if (ptr == nullptr) return;
    const std::size_t size = round_up(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size].push_back(ptr);
    in_use_ -= size;
    cached_ += size;
  }

  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_within(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  std::size_t bytes_in_use() const override { std::lock_guard<std::mutex> l(mutex_); return in_use_; }
  std::size_t bytes_cached() const override { std::lock_guard<std::mutex> l(mutex_); return cached_; }
  void release_cached() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

 private:
  // Size classes: multiples of 64 bytes up to 4 KiB, then multiples of 4 KiB up to
  // 1 MiB, then multiples of 1/16 of the next power of two (at most ~6 % slack).
  static std::size_t round_up(std::size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (bytes <= 4096) return (bytes + 63) & ~std::size_t(63);
    if (bytes <= (1u << 20)) return (bytes + 4095) & ~std::size_t(4095);
    std::size_t pow2 = std::size_t(1) << (64 - __builtin_clzll(bytes - 1));
    std::size_t step = pow2 / 16;
    return (bytes + step - 1) / step * step;
  }
  void release_cached_locked() {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t in_use_ = 0, cached_ = 0;
};

struct Registry {
  std::mutex mutex;
  Allocator* by_kind[2] = {nullptr, nullptr};
};
Registry& registry() {
  static Registry r;
  return r;
}
Allocator& cpu_allocator() {
  static CpuCachingAllocator a;
  return a;
}

}  // namespace

void register_allocator(DeviceKind kind, Allocator* allocator) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().by_kind[static_cast<int>(kind)] = allocator;
}

bool has_allocator(DeviceKind kind) {
  if (kind == DeviceKind::CPU) return true;
  std::lock_guard<std::mutex> lock(registry().mutex);
  return registry().by_kind[static_cast<int>(kind)] != nullptr;
}

Allocator& allocator_for(Device d) {
  if (d.is_cpu()) return cpu_allocator();
  std::lock_guard<std::mutex> lock(registry().mutex);
  Allocator* a = registry().by_kind[static_cast<int>(d.kind)];
  if (a == nullptr) {
#ifdef WEDGE_HAVE_CUDA
    throw std::runtime_error(d.str() + ": no CUDA device is available on this machine");
#else
    throw std::runtime_error(d.str() + ": this build of wedge has no CUDA backend (nvcc was not found at configure time)");
#endif
  }
  return *a;
}

}  // namespace wedge
