// The CUDA caching allocator (see cuda_allocator.h) and its start-up registration.
#include "engine/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>

#include "engine/allocator.h"
#include "engine/block_cache.h"
#include "engine/cuda_stream.h"

namespace wedge::cuda {
namespace {

// BlockCache backend: device memory straight from cudaMalloc. Out of memory is reported
// as nullptr so the cache can release its free blocks and retry; other errors throw.
struct DeviceMemory {
  void* allocate(std::size_t bytes) {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: out of memory is recoverable here
      return nullptr;
    }
    check(status, "cudaMalloc");
    return ptr;
  }
  // Only cached (host-side free) blocks reach here, but kernels queued before the host
  // freed them may still be running: wait for the stream before giving memory back.
  void free(void* ptr) {
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize before cudaFree");
    check(cudaFree(ptr), "cudaFree");
  }
  const char* name() const { return "cuda"; }
};

// Small host-to-device uploads (a batch of token ids, a scalar) go through pinned
// staging buffers so cudaMemcpyAsync is truly asynchronous: a copy from pageable memory
// may make the driver wait for the stream, which would stall the host on every batch
// until the previous step's GPU work finished. The caller's buffer is copied into a
// pinned slot, the DMA is queued, and the call returns at once. A slot is reused only
// after the event recorded behind its last copy has completed; with kSlots slots that
// copy was kSlots uploads ago, normally long finished.
class PinnedStaging {
 public:
  static constexpr std::size_t kSlotBytes = std::size_t(1) << 20;
  static constexpr int kSlots = 8;

  // Queues the upload and returns true, or returns false when it does not fit a slot
  // (or pinned memory cannot be had) and the caller must copy another way.
  bool upload(void* device_dst, const void* host_src, std::size_t bytes, cudaStream_t s) {
    if (bytes > kSlotBytes) return false;
    Slot& slot = slots_[next_];
    if (slot.host == nullptr) {
      if (cudaHostAlloc(&slot.host, kSlotBytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        slot.host = nullptr;
        return false;
      }
      check(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), "cudaEventCreate");
    }
    next_ = (next_ + 1) % kSlots;
    if (slot.pending) check(cudaEventSynchronize(slot.done), "waiting for a staging slot");
    std::memcpy(slot.host, host_src, bytes);
    check(cudaMemcpyAsync(device_dst, slot.host, bytes, cudaMemcpyHostToDevice, s),
          "cudaMemcpyAsync host to device");
    check(cudaEventRecord(slot.done, s), "cudaEventRecord");
    slot.pending = true;
    return true;
  }

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  Slot slots_[kSlots];
  int next_ = 0;
};

class CudaCachingAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override { return cache_.allocate(bytes); }

  // The block goes back to its free list at once, although kernels queued on the stream
  // may still be using it: every later user of the block is queued on the same stream,
  // behind those kernels, so it cannot touch the memory before they finish.
  void deallocate(void* ptr, std::size_t bytes) override { cache_.deallocate(ptr, bytes); }

  // The host needs the value now: wait for the copy (and everything queued before it).
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream()),
          "cudaMemcpyAsync device to host");
    check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize after device to host copy");
  }

  // Returns without waiting for the GPU: small copies are staged in pinned memory; large
  // ones (parameters at start-up) come from pageable memory, which CUDA reads into its own
  // staging before cudaMemcpyAsync returns, so the caller may free its buffer right away.
  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override {
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(staging_mutex_);
    if (staging_.upload(dst, host_src, bytes, stream())) return;
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream()),
          "cudaMemcpyAsync host to device");
  }

  // memmove semantics, like the CPU allocator: cudaMemcpy* is undefined on overlapping
  // ranges, so an overlapping copy goes through a temporary block.
  void copy_within(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0 || dst == src) return;
    const auto* d = static_cast<const char*>(dst);
    const auto* s = static_cast<const char*>(src);
    if (d < s + bytes && s < d + bytes) {
      void* tmp = allocate(bytes);
      check(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync device to device");
      check(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync device to device");
      deallocate(tmp, bytes);  // stream-ordered: the copies above are queued before any reuse
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync device to device");
  }

  void synchronize() override { check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

  std::size_t bytes_in_use() const override { return cache_.bytes_in_use(); }
  std::size_t bytes_cached() const override { return cache_.bytes_cached(); }

  // The backend waits for the stream before each cudaFree (see DeviceMemory::free).
  void release_cached() override { cache_.release_cached(); }

 private:
  BlockCache<DeviceMemory> cache_;
  std::mutex staging_mutex_;
  PinnedStaging staging_;
};

Allocator* g_device_allocator = nullptr;

// Runs at start-up. Registers only when a device exists: on a machine without one the
// CUDA kind stays unregistered and allocator_for(cuda) reports that clearly. The
// allocator is never destroyed (its blocks would be freed after the CUDA runtime shut
// down); the process exit returns the memory.
struct RegisterCudaAllocator {
  RegisterCudaAllocator() {
    if (device_count() < 1) return;
    g_device_allocator = new CudaCachingAllocator();
    ::wedge::register_allocator(DeviceKind::CUDA, g_device_allocator);
  }
};
const RegisterCudaAllocator registrar;

}  // namespace

Allocator* device_allocator() { return g_device_allocator; }

}  // namespace wedge::cuda
