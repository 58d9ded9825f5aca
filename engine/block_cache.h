// The bookkeeping of a caching allocator, separate from the memory it manages.
//
// A training step allocates the same activation sizes every step. Asking the device for
// memory each time is slow (cudaMalloc/cudaFree synchronise the whole GPU; on the host,
// glibc returns a large freed buffer to the OS and the next one is page-faulted back in),
// so freed blocks are kept in free lists keyed by a size class and handed out again: after
// the first steps nothing reaches the device allocator.
//
// BlockCache knows nothing of devices. It is templated on a Backend with
//   void* allocate(std::size_t bytes);   // nullptr when the device is out of memory
//   void free(void* ptr);
//   const char* name() const;            // names the device in error messages
// so the same logic serves the CPU and CUDA allocators (engine/allocator.cpp,
// engine/cuda_allocator.cu) and the unit tests, which use a host backend that counts its
// calls and can run out of memory.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace wedge {

// Size classes: multiples of 512 bytes up to 1 MiB, then multiples of 1/16 of the next
// power of two (so a block is less than 1/8 larger than the request). A request takes the
// smallest cached block of at least its class and at most twice it (blocks are never
// split): a training loop that repeats its sizes exactly reuses its own blocks, and one
// whose sizes vary a little from step to step (the rows routed to each expert of a
// mixture) reuses neighbouring blocks instead of asking the device again. Defined for
// requests up to 2^62 bytes (BlockCache refuses larger ones).
inline std::size_t block_size_class(std::size_t bytes) {
  constexpr std::size_t kSmallStep = 512;
  constexpr std::size_t kSmallLimit = std::size_t(1) << 20;
  if (bytes == 0) bytes = 1;  // a zero-byte tensor still gets a distinct, valid pointer
  if (bytes <= kSmallLimit) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  std::size_t pow2 = kSmallLimit;
  while (pow2 < bytes) pow2 <<= 1;
  const std::size_t step = pow2 / 16;
  return (bytes + step - 1) / step * step;
}

template <typename Backend>
class BlockCache {
 public:
  explicit BlockCache(Backend backend = Backend()) : backend_(std::move(backend)) {}
  // Gives the cached (free) blocks back to the backend. Blocks still handed out are left
  // alone: an owner that outlives the cache still points at its block, and freeing it would
  // turn a leak into a use after free. A backend that fails while freeing (a device runtime
  // already shut down at process exit) cannot be reported from a destructor, so what is left
  // goes back with the process exit. The CUDA allocator is never destroyed for that reason
  // (engine/cuda_allocator.cu); the CPU allocator and every test cache are.
  ~BlockCache() {
    try {
      release_cached_locked();
    } catch (...) {
    }
  }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of at least `bytes`: the best-fitting cached block within twice its class.
  // When the backend is out of memory the cache is returned to it and the request tried
  // once more; failing that, throws std::runtime_error naming the device and the sizes.
  void* allocate(std::size_t bytes) {
    // No device holds 2^62 bytes, and size classes of larger requests would not fit a size_t.
    if (bytes > (std::size_t(1) << 62)) {
      throw std::runtime_error(std::string(backend_.name()) + ": out of memory allocating " +
                               std::to_string(bytes) + " bytes (more than any device holds)");
    }
    const std::size_t size = block_size_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    std::size_t block = size;
    auto it = free_.lower_bound(size);
    if (it != free_.end() && it->first <= 2 * size) {
      block = it->first;
      ptr = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_.erase(it);
      cached_ -= block;
    } else {
      ptr = backend_allocate(size);
      if (ptr == nullptr) {
        release_cached_locked();
        ptr = backend_allocate(size);
      }
      if (ptr == nullptr) {
        throw std::runtime_error(std::string(backend_.name()) + ": out of memory allocating " +
                                 std::to_string(bytes) + " bytes (" + std::to_string(in_use_) +
                                 " bytes in use, cache already released)");
      }
    }
    live_.emplace(ptr, block);
    in_use_ += block;
    if (in_use_ > peak_in_use_) peak_in_use_ = in_use_;
    return ptr;
  }

  // Returns the block to its free list (never to the backend). `bytes` must be the size
  // it was allocated with (its class at most the block's, at least half of it); a pointer
  // this cache did not hand out is a bug in the caller and throws std::logic_error rather
  // than corrupting the free lists.
  void deallocate(void* ptr, std::size_t bytes) {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      throw std::logic_error(std::string(backend_.name()) +
                             ": deallocate of a pointer this allocator does not own");
    }
    const std::size_t size = it->second;
    if (block_size_class(bytes) > size || 2 * block_size_class(bytes) < size) {
      throw std::logic_error(std::string(backend_.name()) + ": deallocate of " +
                             std::to_string(bytes) + " bytes, but the block was allocated as " +
                             std::to_string(size));
    }
    live_.erase(it);
    free_[size].push_back(ptr);
    in_use_ -= size;
    cached_ += size;
  }

  // Gives every cached (free) block back to the backend; blocks in use are untouched.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

  // Bytes held by live blocks and by free-list blocks, counted at their class size
  // (what the device actually holds for them).
  std::size_t bytes_in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  std::size_t bytes_cached() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }
  std::size_t peak_bytes_in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_in_use_;
  }
  // How often the backend was asked for memory: flat after the first training step.
  std::size_t backend_allocations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return backend_allocations_;
  }

  Backend& backend() { return backend_; }

 private:
  void* backend_allocate(std::size_t size) {
    void* ptr = backend_.allocate(size);
    if (ptr != nullptr) ++backend_allocations_;
    return ptr;
  }

  // Each block leaves the free lists (and an emptied list the map) before it is freed, so a
  // backend that throws midway leaves the books consistent and no freed pointer behind to be
  // handed out again.
  void release_cached_locked() {
    while (!free_.empty()) {
      auto it = free_.begin();
      void* ptr = it->second.back();
      it->second.pop_back();
      cached_ -= it->first;
      if (it->second.empty()) free_.erase(it);
      backend_.free(ptr);
    }
  }

  Backend backend_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;  // class size -> cached blocks
  std::unordered_map<void*, std::size_t> live_;    // handed-out block -> its size
  std::size_t in_use_ = 0, cached_ = 0, peak_in_use_ = 0, backend_allocations_ = 0;
};

}  // namespace wedge
