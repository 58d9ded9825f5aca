// Every kernel of the contract (engine/kernels.def), timed on every backend present: the
// reference (scalar loops), the CPU table and, with a GPU, the CUDA table. Each kernel runs
// on the representative shape of its case in the backend harness's case list
// (tests/kernels/backend_cases.h), the one list the tests check every backend with.
// Prints one line per kernel: milliseconds per call on each backend.
//
//   build/bench/bench_backends                 (every kernel)
//   build/bench/bench_backends softmax gemm    (the kernels whose names contain a word)
//
// Threads: WEDGE_NUM_THREADS (default: all cores). A backend's time is the mean over as
// many calls as fit in a quarter of a second after one warm-up call (at least one).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../tests/kernels/backend_cases.h"
#include "engine/device.h"
#include "engine/thread_pool.h"

using namespace wedge;
using namespace wedge::kernels;
using namespace wedge::kernels::harness;

namespace {

// Milliseconds per call of `c` on `b`.
double time_call(const KernelCase& c, const Backend<float>& b) {
  Call call(*b.table, *b.memory, *b.alloc);
  c.prepare(call);
  call.run();  // warm-up: first touch of the memory, caches, lazy initialisation
  b.alloc->synchronize();
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  int calls = 0;
  double elapsed = 0;
  do {
    call.run();
    b.alloc->synchronize();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < 0.25);
  return 1e3 * elapsed / calls;
}

bool wanted(const KernelCase& c, int argc, char** argv) {
  if (argc < 2) return true;
  for (int i = 1; i < argc; ++i) {
    if (kernel_name(c.kernel).find(argv[i]) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  HostMemory host;
  std::vector<Backend<float>> backends = {
      {"reference", Family::reference, &ref_table_f32(), &ref_memory_table(), &host, Sizes::full},
      {"cpu", Family::cpu, &cpu_table_f32(), &cpu_memory_table(), &host, Sizes::full},
  };
  if (kernel_table<float>(1) != nullptr && memory_table(1) != nullptr) {
    backends.push_back(
        {"cuda", Family::cuda, kernel_table<float>(1), memory_table(1), &allocator_for(Device::cuda()), Sizes::full});
  }
  std::printf("cpu: %s, %d threads; cuda: %s\n", cpu_backend_name(), num_threads(),
              backends.size() > 2 ? "present" : "no device");
  std::printf("%-24s %-36s", "kernel", "shape");
  for (const Backend<float>& b : backends) std::printf(" %12s", (b.name + " ms").c_str());
  std::printf("\n");
  for (const KernelCase& c : kernel_cases) {
    if (!wanted(c, argc, argv)) continue;
    std::printf("%-24s %-36s", std::string(kernel_name(c.kernel)).c_str(), c.shape);
    std::fflush(stdout);
    for (const Backend<float>& b : backends) {
      std::printf(" %12.3f", time_call(c, b));
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  return 0;
}
