// The CPU caching allocator and the per-device allocator registry.
#include "engine/allocator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine/block_cache.h"
#include "engine/profile.h"

namespace wedge {
namespace {

// Host memory for BlockCache: 64-byte aligned (the class sizes are multiples of 512).
struct HostMemory {
  void* allocate(std::size_t bytes) { return std::aligned_alloc(64, bytes); }
  void free(void* ptr) { std::free(ptr); }
  const char* name() const { return "cpu"; }
};

// The CPU allocator: host memory behind the same caching bookkeeping as CUDA's.
class CpuCachingAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    if (!profile::active()) return cache_.allocate(bytes);
    const std::int64_t t0 = profile::now_ns();
    void* ptr = cache_.allocate(bytes);
    profile::add_allocation_ns(profile::now_ns() - t0);
    return ptr;
  }
  void deallocate(void* ptr, std::size_t bytes) override {
    if (!profile::active()) return cache_.deallocate(ptr, bytes);
    const std::int64_t t0 = profile::now_ns();
    cache_.deallocate(ptr, bytes);
    profile::add_allocation_ns(profile::now_ns() - t0);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_within(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  std::size_t bytes_in_use() const override { return cache_.bytes_in_use(); }
  std::size_t bytes_cached() const override { return cache_.bytes_cached(); }
  void release_cached() override { cache_.release_cached(); }

 private:
  BlockCache<HostMemory> cache_;
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
