// The CUDA caching allocator: plain cudaMalloc blocks (never managed memory) cached in
// size-class free lists (engine/block_cache.h), so a training step reuses the previous
// step's blocks and never calls cudaMalloc or cudaFree. Copies run on the wedge stream
// (engine/cuda_stream.h). It registers itself for DeviceKind::CUDA at start-up when the
// machine has at least one CUDA device, and registers nothing otherwise, so a machine
// without a GPU behaves exactly like a CPU-only build.
//
// This header needs no CUDA headers; the implementation is engine/cuda_allocator.cu.
#pragma once

#include "engine/allocator.h"

namespace wedge::cuda {

// The registered CUDA allocator, or nullptr when no device is present. The CUDA kernels
// borrow short-lived scratch memory (reduction partials, sort buckets) from it: freeing
// a block right after queueing the kernels that use it is safe on the single stream.
Allocator* device_allocator();

// Number of usable CUDA devices; 0 when there is none or no driver (never throws).
int device_count();

// Makes CUDA device `ordinal` (0 .. device_count() - 1) the GPU behind wedge's "cuda"
// device in this process. Call it before any GPU work: the stream, the library handles and
// the allocator's blocks belong to the device that was current when they were made.
void use_device(int ordinal);

}  // namespace wedge::cuda
