// Where a training step's time goes: every CPU kernel call timed, by kernel, by kind of
// work, by model part and (for the GEMM) by shape, plus the GEMM's packing, the
// allocator and whatever is left for the host (autograd, op dispatch).
//
// A `Profiler` in scope installs timed copies of the CPU kernel tables at the one dispatch
// point (kernel_table.cpp) and puts the compiled ones back when it ends; without one, the
// only costs left in the engine are a pointer copy per autograd node and a flag test per
// packed panel and per allocation. Model code names its parts with `Part` (a scope,
// nestable); autograd remembers the part each node was recorded in and replays it while
// the node's backward runs, so backward kernels land in the part whose forward made them.
//
// Timing is wall time on the calling thread: a kernel that runs on the thread pool counts
// once, at its wall time. Packing is summed over the threads that pack (thread time).
// CPU only: CUDA kernels run asynchronously, so host clocks around a launch measure the
// launch, not the kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernel_table.h"

namespace wedge::profile {

// The kind of work a kernel does, for the step's breakdown ("GEMM", "layer norm", ...).
std::string_view kind_of(kernels::KernelId id);

// The model part now being run on this thread ("" when none was named).
const char* current_part();

// Names a part of the model for its scope; parts nest (the inner one wins) and the name
// must outlive the profile (a string literal).
class Part {
 public:
  explicit Part(const char* name);
  ~Part();
  Part(const Part&) = delete;
  Part& operator=(const Part&) = delete;

 private:
  const char* previous_;
};

// For autograd: the part and the phase of a node's backward while it runs.
class BackwardScope {
 public:
  explicit BackwardScope(const char* part);
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

 private:
  const char* previous_part_;
  bool previous_backward_;
};

// Is a profiler recording? (a relaxed load: the packing and allocation hooks test it)
bool active();
// Hooks of the CPU GEMM driver and the CPU allocator (no-ops unless active()).
void add_packing_ns(std::int64_t ns);
void add_allocation_ns(std::int64_t ns);
// A monotonic clock in nanoseconds, for the hooks.
std::int64_t now_ns();

// One row of a report: milliseconds in forward, backward and neither (optimizer, loss
// bookkeeping outside autograd), and the number of calls.
struct Row {
  std::string name;
  double forward_ms = 0, backward_ms = 0, other_ms = 0;
  std::int64_t calls = 0;
  double ms() const { return forward_ms + backward_ms + other_ms; }
};

// One GEMM shape: m x n x k, op(A), op(B), batch, epilogue, precision, and the part it
// ran in.
struct GemmGroup {
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  bool trans_a = false, trans_b = false, bias = false, gelu = false, bf16 = false;
  std::string part;
  std::int64_t calls = 0;
  double ms = 0;
  double packing_ms = 0;  // of its operands, summed over the threads that packed
  double flops = 0;       // 2 m n k batch, summed over the calls
};

// Totals since the profiler started (or was reset), in milliseconds.
struct Report {
  std::vector<Row> kernels;      // per kernel, by time (descending)
  std::vector<Row> kinds;        // per kind of work, by time
  std::vector<Row> parts;        // per model part, by time ("(unnamed)" for none)
  std::vector<Row> part_kinds;   // per (model part, kind of work), named "part: kind", by time
  std::vector<GemmGroup> gemms;  // per GEMM shape and part, by time
  double kernel_ms = 0;          // all kernels
  double packing_ms = 0;         // GEMM packing, summed over threads (inside kernel_ms)
  double allocation_ms = 0;      // the CPU allocator's allocate and free
};

// Records while in scope; one at a time. Throws if the CPU has no registered table or a
// profiler is already recording.
class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts or pauses recording (the timed tables stay installed; paused calls are not
  // counted), and clears what was recorded.
  void set_recording(bool on);
  void reset();
  Report report() const;
};

}  // namespace wedge::profile
