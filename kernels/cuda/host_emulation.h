// Runs the CUDA kernels of this folder on the host, for testing on machines without a
// GPU. Compiling a kernels/cuda/*.cu file with a host C++ compiler and
// WEDGE_CUDA_EMULATE defined (see common.cuh) turns every launch into a call of
// wedge::emu::launcher, which executes the grid block by block; the threads of a block
// are fibers (coroutines with their own stacks) on one OS thread, switched at every
// __syncthreads and warp shuffle. So the kernels' own index arithmetic, tiling, shared memory and barrier
// placement run for real:
//   - a missing __syncthreads shows up as a wrong result, because a warp runs until all
//     its threads block, far ahead of the other warps (the tests run both orders:
//     first-to-last and last-to-first);
//   - a barrier not reached by every thread of the block (or a shuffle not reached by all
//     32 lanes of its warp) is reported as an error instead of hanging.
// What it cannot show: timing, memory-model subtleties between blocks (blocks run one
// after another), and anything about the hardware. It is a test harness, never a backend.
//
// Fibers switch with a few instructions of assembly on x86-64 (swapcontext would make a
// signal-mask system call per switch, and the kernels' block reductions switch often);
// other architectures use ucontext.
#pragma once

#if defined(__CUDACC__)
#error "host_emulation.h is for host compilers; nvcc builds the real kernels"
#endif

#include <ucontext.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace wedge::emu {

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

enum class FiberState { Runnable, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
#if defined(__x86_64__)
  void* sp = nullptr;  // saved stack pointer while switched out
#else
  ucontext_t context{};
#endif
  char* stack = nullptr;  // kStackBytes of fiber_stacks()
  FiberState state = FiberState::Runnable;
  uint3 thread_idx;
  unsigned linear = 0;  // x + y * blockDim.x + z * blockDim.x * blockDim.y
};

// The state of the block being run. One block runs at a time.
struct Block {
  uint3 block_idx;
  dim3 block_dim, grid_dim;
  std::vector<Fiber> fibers;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler{};
#endif
  unsigned block_arrived = 0;
  std::vector<unsigned> warp_arrived;
  std::vector<std::array<std::uint64_t, 32>> warp_slots;
  unsigned done = 0;
  std::string error;
  std::function<void()> body;
  std::vector<unsigned char> dynamic_shared;
};

inline Block* g_block = nullptr;
inline Fiber* g_fiber = nullptr;
// Thread order of the scheduler: false runs fibers first-to-last, true last-to-first.
inline bool g_reverse_order = false;
inline constexpr std::size_t kStackBytes = 256 * 1024;

// The fibers' stacks, kStackBytes per thread, kept from launch to launch on each OS thread
// (the blocks of a grid already share them). Allocating them per launch meant 256 MB of
// fresh memory for a block of 1024 threads, page-faulted in every time, and under
// AddressSanitizer one mapping per stack: that was most of the emulated suite's time there.
// Only the top pages of each stack are ever touched.
inline char* fiber_stacks(unsigned threads) {
  thread_local std::unique_ptr<char[]> stacks;
  thread_local unsigned capacity = 0;
  if (threads > capacity) {
    stacks.reset(new char[threads * kStackBytes]);
    capacity = threads;
  }
  return stacks.get();
}

#if defined(__x86_64__)
// wedge_emu_switch(save, load): pushes the callee-saved registers (System V ABI) on the
// current stack, stores the stack pointer in *save, switches to the stack `load` and pops
// the registers saved there; `ret` then continues wherever that stack was switched out.
extern "C" void wedge_emu_switch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .type wedge_emu_switch,@function
wedge_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size wedge_emu_switch,.-wedge_emu_switch
)");
#endif

inline void yield_to_scheduler() {
#if defined(__x86_64__)
  wedge_emu_switch(&g_fiber->sp, g_block->scheduler_sp);
#else
  swapcontext(&g_fiber->context, &g_block->scheduler);
#endif
}

// Records the first misuse and parks the fiber for good; the scheduler throws.
inline void fail(const std::string& message) {
  if (g_block->error.empty()) g_block->error = message;
  g_fiber->state = FiberState::Done;
  ++g_block->done;
  for (;;) yield_to_scheduler();
}

inline void sync_threads() {
  Block& b = *g_block;
  if (b.done > 0) fail("__syncthreads reached after some threads of the block exited");
  g_fiber->state = FiberState::AtBlockBarrier;
  if (++b.block_arrived == b.fibers.size()) {
    b.block_arrived = 0;
    for (Fiber& f : b.fibers) {
      if (f.state == FiberState::AtBlockBarrier) f.state = FiberState::Runnable;
    }
  }
  yield_to_scheduler();
}

inline void sync_warp_lanes() {
  Block& b = *g_block;
  const unsigned warp = g_fiber->linear / 32;
  g_fiber->state = FiberState::AtWarpBarrier;
  if (++b.warp_arrived[warp] == 32) {
    b.warp_arrived[warp] = 0;
    for (unsigned lane = 0; lane < 32; ++lane) {
      Fiber& f = b.fibers[warp * 32 + lane];
      if (f.state == FiberState::AtWarpBarrier) f.state = FiberState::Runnable;
    }
  }
  yield_to_scheduler();
}

// A shuffle: every lane publishes its value, all 32 meet, each reads its source lane,
// all 32 meet again (so no lane overwrites its slot before the others have read it).
template <typename T>
T shuffle_from(unsigned mask, T value, unsigned source_lane) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t), "shuffle of a type wider than 8 bytes");
  if (mask != 0xffffffffu) fail("warp shuffle with a partial mask (the kernels use full warps)");
  Block& b = *g_block;
  const unsigned warp = g_fiber->linear / 32, lane = g_fiber->linear % 32;
  std::memcpy(&b.warp_slots[warp][lane], &value, sizeof(T));
  sync_warp_lanes();
  T result;
  std::memcpy(&result, &b.warp_slots[warp][source_lane % 32], sizeof(T));
  sync_warp_lanes();
  return result;
}
template <typename T>
T shfl_xor(unsigned mask, T value, int lane_mask) {
  return shuffle_from(mask, value, (g_fiber->linear % 32) ^ unsigned(lane_mask));
}
template <typename T>
T shfl_down(unsigned mask, T value, unsigned delta) {
  const unsigned lane = g_fiber->linear % 32;
  return shuffle_from(mask, value, lane + delta < 32 ? lane + delta : lane);
}
template <typename T>
T shfl(unsigned mask, T value, int source_lane) {
  return shuffle_from(mask, value, unsigned(source_lane));
}

// Runs this thread's kernel. An exception (in the course's student tree an unsolved
// exercise throws from inside a kernel) is caught here, on the fiber's own stack where it
// was thrown, and recorded as the block's error, which ends the launch like a misuse does:
// unwinding must never cross a stack switch. Returns whether the kernel finished normally.
// A function of its own that returns before the fiber parks: fiber_main's frame stays on
// the stack for good, so it must hold no local whose address is taken (AddressSanitizer
// would leave that local's guard zones poisoned at the top of a stack the next launch reuses).
[[gnu::noinline]] inline bool run_body() {
  try {
    g_block->body();
    return true;
  } catch (const std::exception& e) {
    if (g_block->error.empty()) g_block->error = std::string("a thread threw: ") + e.what();
  } catch (...) {
    if (g_block->error.empty()) g_block->error = "a thread threw an exception that is not a std::exception";
  }
  return false;
}

// The body of every fiber: run the kernel for this thread, then hand control back for good.
inline void fiber_main() {
  if (!run_body()) {
    g_fiber->state = FiberState::Done;
    ++g_block->done;
    for (;;) yield_to_scheduler();
  }
  Block& b = *g_block;
  if (b.block_arrived > 0) {
    if (b.error.empty()) b.error = "a thread exited while others wait at __syncthreads";
  }
  g_fiber->state = FiberState::Done;
  ++b.done;
#if defined(__x86_64__)
  yield_to_scheduler();  // never resumed: a Done fiber is not scheduled again
  __builtin_unreachable();
#endif
  // (ucontext: returning resumes uc_link, the scheduler)
}

inline void prepare_fiber(Block& b, Fiber& f) {
  f.state = FiberState::Runnable;
#if defined(__x86_64__)
  // A fresh stack that "returns" into fiber_main when first switched to: six zero
  // registers for the pops, then fiber_main as the return address. At its entry the stack
  // pointer is 8 below a 16-byte boundary, as after a call, which the ABI expects.
  auto top = reinterpret_cast<std::uintptr_t>(f.stack + kStackBytes) & ~std::uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;  // fake return address of fiber_main (it never returns)
  *--sp = reinterpret_cast<void*>(&fiber_main);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  f.sp = sp;
  (void)b;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = &b.scheduler;
  makecontext(&f.context, fiber_main, 0);
#endif
}

inline void resume(Block& b, Fiber& f) {
  g_fiber = &f;
#if defined(__x86_64__)
  wedge_emu_switch(&b.scheduler_sp, f.sp);
#else
  swapcontext(&b.scheduler, &f.context);
#endif
}

// Runs one block to completion. Scheduling is greedy per warp: the scheduler keeps
// resuming the lanes of one warp until every lane of it is blocked at __syncthreads (or
// done), and only then moves to the next warp. So one warp runs as far ahead of the others
// as the barriers allow — the situation in which a missing barrier corrupts shared memory
// on a real GPU. No runnable fiber while some are not done is a deadlock.
inline void run_block(Block& b) {
  const unsigned n = static_cast<unsigned>(b.fibers.size()), warps = n / 32;
  g_block = &b;
  for (unsigned i = 0; i < n; ++i) prepare_fiber(b, b.fibers[i]);
  b.done = 0;
  b.block_arrived = 0;
  std::fill(b.warp_arrived.begin(), b.warp_arrived.end(), 0u);
  while (b.done < n && b.error.empty()) {
    bool ran = false;
    for (unsigned wi = 0; wi < warps && b.error.empty(); ++wi) {
      const unsigned warp = g_reverse_order ? warps - 1 - wi : wi;
      for (bool progress = true; progress && b.error.empty();) {
        progress = false;
        for (unsigned li = 0; li < 32 && b.error.empty(); ++li) {
          Fiber& f = b.fibers[warp * 32 + (g_reverse_order ? 31 - li : li)];
          if (f.state != FiberState::Runnable) continue;
          resume(b, f);
          progress = ran = true;
        }
      }
    }
    if (!ran && b.error.empty()) b.error = "deadlock: threads wait at barriers that can never complete";
  }
  g_fiber = nullptr;
  if (!b.error.empty()) {
    const std::string message = "emulated kernel: " + b.error;
    b.error.clear();
    throw std::logic_error(message);
  }
}

inline void run_grid(dim3 grid, dim3 block, std::size_t dynamic_shared_bytes,
                     std::function<void()> body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || threads % 32 != 0) {
    throw std::logic_error("emulated launch: block of " + std::to_string(threads) +
                           " threads (the kernels use whole warps, at most 1024)");
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw std::logic_error("emulated launch: empty grid");
  if (grid.y > 65535 || grid.z > 65535) throw std::logic_error("emulated launch: grid.y/z over 65535");
  if (dynamic_shared_bytes > 48 * 1024) throw std::logic_error("emulated launch: over 48 KiB dynamic shared memory");
  Block b;
  b.block_dim = block;
  b.grid_dim = grid;
  b.body = std::move(body);
  b.fibers.resize(threads);
  b.warp_arrived.assign(threads / 32, 0u);
  b.warp_slots.resize(threads / 32);
  // Shared memory starts as garbage on a GPU; NaN bytes here make a read of
  // never-written shared memory visible in the results.
  b.dynamic_shared.assign(dynamic_shared_bytes + 16, 0xFF);
  char* const stacks = fiber_stacks(threads);
  for (unsigned z = 0, i = 0; z < block.z; ++z)
    for (unsigned y = 0; y < block.y; ++y)
      for (unsigned x = 0; x < block.x; ++x, ++i) {
        b.fibers[i].thread_idx = {x, y, z};
        b.fibers[i].linear = i;
        b.fibers[i].stack = stacks + i * kStackBytes;
      }
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        b.block_idx = {x, y, z};
        run_block(b);
      }
  g_block = nullptr;
}

// The emulated `kernel<<<grid, block, shared>>>(args...)`.
template <typename Kernel>
struct Launcher {
  dim3 grid, block;
  std::size_t shared;
  Kernel* kernel;
  template <typename... Args>
  void operator()(Args... args) const {
    run_grid(grid, block, shared, [&] { kernel(args...); });
  }
};
template <typename Kernel>
Launcher<Kernel> launcher(dim3 grid, dim3 block, std::size_t shared, Kernel* kernel) {
  return Launcher<Kernel>{grid, block, shared, kernel};
}

inline unsigned char* dynamic_shared() {
  // 16-byte alignment, as CUDA gives dynamic shared memory
  auto p = reinterpret_cast<std::uintptr_t>(g_block->dynamic_shared.data());
  return reinterpret_cast<unsigned char*>((p + 15) & ~std::uintptr_t(15));
}

}  // namespace wedge::emu
