// The one thread pool of the engine: persistent worker threads that CPU kernels share.
//
// The idea to understand first: a kernel never creates threads. It hands the pool a
// function and a range; the range is cut into at most num_threads() contiguous chunks, the
// same way every time (static partitioning), so which thread computes which element is a
// pure function of (range, grain, thread count). Kernels whose per-element arithmetic does
// not depend on the chunking are therefore bit-for-bit deterministic.
//
// The caller's thread always does chunk 0 itself; the pool holds num_threads() - 1 workers.
// A parallel call made from inside a pool task (or while another thread is using the
// pool) runs serially on the calling thread, so nesting can never deadlock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace wedge {

// A non-owning reference to a callable: no allocation per parallel call (std::function
// may allocate). The referenced callable must outlive the call it is passed to.
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f)  // NOLINT: implicit by design, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

// Waits until `count` threads have arrived, then releases them all; reusable. Spins
// briefly (the common case inside a GEMM is that the other thread arrives within
// microseconds) and then sleeps, so an oversubscribed machine does not burn a core.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void arrive_and_wait();

 private:
  const int count_;
  std::atomic<std::uint32_t> arrived_{0};
  std::atomic<std::uint32_t> phase_{0};
};

class ThreadPool {
 public:
  // A pool that runs work on `num_threads` threads: the caller plus num_threads - 1
  // persistent workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(thread_index, team_size) on team_size = min(want, size()) threads at once
  // (the caller is thread 0) and returns when all have finished. Every thread of the team
  // runs concurrently, so a Barrier of team_size may be used inside. Nested or concurrent
  // use runs task(0, 1) on the calling thread.
  void run_team(int want, FunctionRef<void(int, int)> task);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex busy_;  // held by the thread that currently owns the workers

  // One job at a time: published by bumping generation_; workers with index < team_
  // run it and count themselves out through remaining_.
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<std::uint32_t> remaining_{0};
  FunctionRef<void(int, int)>* task_ = nullptr;
  int team_ = 1;
  std::atomic<bool> stopping_{false};
};

// ---- the global pool --------------------------------------------------------------
// Default size: the environment variable WEDGE_NUM_THREADS when set, else the hardware
// concurrency. set_num_threads(n) replaces the pool (must not be called from inside a
// pool task or while other threads use the pool).
void set_num_threads(int n);
int num_threads();
ThreadPool& global_thread_pool();
// True on a thread that is currently executing a pool task (parallel calls made here run
// serially).
bool in_parallel_region();

// Runs task(thread_index, team_size) on up to `want` threads of the global pool at once
// (want <= 0 means all). Use when the threads must cooperate (shared packing, barriers).
void parallel_team(int want, FunctionRef<void(int, int)> task);

// Splits [begin, end) into at most num_threads() contiguous chunks of at least `grain`
// elements (the last chunk may be shorter only when the range is) and calls
// fn(chunk_begin, chunk_end) once per chunk, chunk 0 on the calling thread. The chunk
// boundaries depend only on (begin, end, grain, num_threads()).
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  FunctionRef<void(std::int64_t, std::int64_t)> fn);

// The chunk boundaries parallel_for uses: chunk i of `chunks` covers
// [begin + i * len / chunks, begin + (i + 1) * len / chunks).
int parallel_chunk_count(std::int64_t begin, std::int64_t end, std::int64_t grain, int threads);

}  // namespace wedge
