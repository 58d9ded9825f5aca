#include "engine/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define WEDGE_CPU_RELAX() _mm_pause()
#else
#define WEDGE_CPU_RELAX() ((void)0)
#endif

namespace wedge {
namespace {

// True while this thread executes a pool task; parallel calls made then run serially.
thread_local bool t_in_pool_task = false;

// How long a waiting thread spins before it sleeps. Kernels are called back to back in a
// training step, so most waits end within microseconds; sleeping at once would cost a
// futex wake-up (several microseconds) on every kernel call. A pause takes roughly
// 10-150 cycles depending on the core, so this spins for some tens of microseconds.
constexpr int kSpinIterations = 4000;

// Sleeping on a 32-bit word until it changes, and waking its sleepers: the futex system
// calls on Linux (std::atomic::wait in GCC 12 lost wake-ups here); elsewhere a short
// sleep and re-check.
void block_while_equal(std::atomic<std::uint32_t>& word, std::uint32_t old) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, old, nullptr,
          nullptr, 0);
#else
  if (word.load(std::memory_order_acquire) == old) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
#endif
}

void wake_all(std::atomic<std::uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX,
          nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

// Waits until value != old. `sleepers` counts threads that may be blocked in the kernel,
// so the publishing side only pays for a wake-up system call when someone sleeps.
void spin_then_wait(std::atomic<std::uint32_t>& value, std::uint32_t old,
                    std::atomic<int>& sleepers) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (value.load(std::memory_order_acquire) != old) return;
    WEDGE_CPU_RELAX();
  }
  while (value.load(std::memory_order_acquire) == old) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    // Re-checked after announcing ourselves: the publisher either sees sleepers > 0 and
    // wakes us, or published before this check and we do not sleep at all. The futex
    // itself re-checks the word atomically before sleeping.
    if (value.load(std::memory_order_seq_cst) == old) block_while_equal(value, old);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void wake_sleepers(std::atomic<std::uint32_t>& value, const std::atomic<int>& sleepers) {
  if (sleepers.load(std::memory_order_seq_cst) > 0) wake_all(value);
}

// The job word: generation in the high bits, team size in the low 8, published with one
// store so a worker can never pair one job's team size with another job's generation.
constexpr std::uint32_t kTeamBits = 8;
constexpr std::uint32_t kTeamMask = (std::uint32_t{1} << kTeamBits) - 1;

std::atomic<int> g_job_sleepers{0};
std::atomic<int> g_done_sleepers{0};

}  // namespace

// ---- Barrier ----------------------------------------------------------------------------

namespace {
std::atomic<int> g_barrier_sleepers{0};
}

void Barrier::arrive_and_wait() {
  if (count_ <= 1) return;
  const std::uint32_t phase = phase_.load(std::memory_order_acquire);
  if (static_cast<int>(arrived_.fetch_add(1, std::memory_order_acq_rel)) + 1 == count_) {
    // Last to arrive: nobody can arrive for the next phase before the phase moves on.
    arrived_.store(0, std::memory_order_relaxed);
    phase_.fetch_add(1, std::memory_order_seq_cst);
    wake_sleepers(phase_, g_barrier_sleepers);
    return;
  }
  spin_then_wait(phase_, phase, g_barrier_sleepers);
}

// ---- ThreadPool -------------------------------------------------------------------------

ThreadPool::ThreadPool(int num_threads) {
  const int n = std::clamp(num_threads, 1, static_cast<int>(kTeamMask));
  workers_.reserve(static_cast<std::size_t>(n - 1));
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(busy_);
    stopping_.store(true, std::memory_order_seq_cst);
    generation_.fetch_add(std::uint32_t{1} << kTeamBits, std::memory_order_seq_cst);
    wake_all(generation_);
  }
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
  t_in_pool_task = true;
  // The generation the pool was built with (0): reading it here instead would race with
  // a job published before this thread got to run, and that job would be missed.
  std::uint32_t seen = 0;
  for (;;) {
    spin_then_wait(generation_, seen, g_job_sleepers);
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_.load(std::memory_order_acquire)) return;
    const int team = static_cast<int>(seen & kTeamMask);
    if (index >= team) continue;  // not part of this job; task_ may not be read
    (*task_)(index, team);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      wake_sleepers(remaining_, g_done_sleepers);
    }
  }
}

void ThreadPool::run_team(int want, FunctionRef<void(int, int)> task) {
  const int team = std::clamp(want <= 0 ? size() : want, 1, size());
  if (team == 1 || t_in_pool_task) {
    task(0, 1);
    return;
  }
  std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
  if (!lock.owns_lock()) {  // another thread is using the workers: do it all here
    task(0, 1);
    return;
  }
  task_ = &task;
  remaining_.store(static_cast<std::uint32_t>(team - 1), std::memory_order_relaxed);
  const std::uint32_t next = ((generation_.load(std::memory_order_relaxed) >> kTeamBits) + 1)
                             << kTeamBits;
  generation_.store(next | static_cast<std::uint32_t>(team), std::memory_order_seq_cst);
  wake_sleepers(generation_, g_job_sleepers);

  t_in_pool_task = true;
  task(0, team);
  t_in_pool_task = false;

  // Wait for the workers; remaining_ only ever counts down to 0 for this job.
  for (;;) {
    const std::uint32_t left = remaining_.load(std::memory_order_acquire);
    if (left == 0) break;
    spin_then_wait(remaining_, left, g_done_sleepers);
  }
  task_ = nullptr;
}

// ---- the global pool ----------------------------------------------------------------------

namespace {

int default_thread_count() {
  if (const char* env = std::getenv("WEDGE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::mutex g_pool_mutex;
std::unique_ptr<ThreadPool> g_pool;
std::atomic<ThreadPool*> g_pool_ptr{nullptr};

}  // namespace

ThreadPool& global_thread_pool() {
  ThreadPool* pool = g_pool_ptr.load(std::memory_order_acquire);
  if (pool) return *pool;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool) {
    g_pool = std::make_unique<ThreadPool>(default_thread_count());
    g_pool_ptr.store(g_pool.get(), std::memory_order_release);
  }
  return *g_pool;
}

void set_num_threads(int n) {
  n = std::max(n, 1);
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (g_pool && g_pool->size() == n) return;
  g_pool_ptr.store(nullptr, std::memory_order_release);
  g_pool.reset();  // joins the old workers first
  g_pool = std::make_unique<ThreadPool>(n);
  g_pool_ptr.store(g_pool.get(), std::memory_order_release);
}

int num_threads() { return global_thread_pool().size(); }

bool in_parallel_region() { return t_in_pool_task; }

void parallel_team(int want, FunctionRef<void(int, int)> task) {
  global_thread_pool().run_team(want, task);
}

int parallel_chunk_count(std::int64_t begin, std::int64_t end, std::int64_t grain, int threads) {
  const std::int64_t len = end - begin;
  if (len <= 0) return 0;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t by_grain = std::max<std::int64_t>(len / grain, 1);
  return static_cast<int>(std::min<std::int64_t>(by_grain, std::max(threads, 1)));
}

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  FunctionRef<void(std::int64_t, std::int64_t)> fn) {
  const std::int64_t len = end - begin;
  if (len <= 0) return;
  const int threads = t_in_pool_task ? 1 : num_threads();
  const int chunks = parallel_chunk_count(begin, end, grain, threads);
  if (chunks <= 1) {
    fn(begin, end);
    return;
  }
  auto run_chunk = [&](int index, int team) {
    // The team may be smaller than asked (pool busy): each thread then takes several
    // chunks, but the chunk boundaries stay the same.
    for (int c = index; c < chunks; c += team) {
      fn(begin + len * c / chunks, begin + len * (c + 1) / chunks);
    }
  };
  global_thread_pool().run_team(chunks, run_chunk);
}

}  // namespace wedge
