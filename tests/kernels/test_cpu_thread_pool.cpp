// The engine's thread pool (engine/thread_pool.h), which every CPU kernel runs on:
// coverage and static chunking of parallel_for, teams with barriers, nesting, resizing.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "engine/thread_pool.h"

namespace wedge {

TEST_CASE("thread pool: parallel_for covers the range once, in fixed contiguous chunks") {
  const int saved = num_threads();
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    CHECK(num_threads() == threads);
    for (std::int64_t len : {0, 1, 7, 33, 1000, 4099}) {
      for (std::int64_t grain : {1, 16, 5000}) {
        std::vector<int> hits(static_cast<std::size_t>(len), 0);
        std::vector<std::pair<std::int64_t, std::int64_t>> chunks(64, {-1, -1});
        std::atomic<int> calls{0};
        parallel_for(10, 10 + len, grain, [&](std::int64_t b, std::int64_t e) {
          const int slot = calls.fetch_add(1);
          chunks[static_cast<std::size_t>(slot)] = {b, e};
          for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i - 10)];
        });
        CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
        const int expected = parallel_chunk_count(10, 10 + len, grain, threads);
        CHECK(calls.load() == expected);
        // Boundaries are exactly begin + i * len / chunks, whoever ran them.
        chunks.resize(static_cast<std::size_t>(calls.load()));
        std::sort(chunks.begin(), chunks.end());
        for (int i = 0; i < expected; ++i) {
          CHECK(chunks[static_cast<std::size_t>(i)].first == 10 + len * i / expected);
          CHECK(chunks[static_cast<std::size_t>(i)].second == 10 + len * (i + 1) / expected);
          if (expected > 1)
            CHECK(chunks[static_cast<std::size_t>(i)].second -
                      chunks[static_cast<std::size_t>(i)].first >=
                  grain);
        }
      }
    }
  }
  set_num_threads(saved);
}

TEST_CASE("thread pool: a team runs concurrently and its barrier orders phases") {
  const int saved = num_threads();
  set_num_threads(3);
  constexpr int kPhases = 200;
  std::vector<std::atomic<int>> arrivals(kPhases);
  Barrier barrier(3);
  std::atomic<int> wrong{0};
  std::vector<int> seen_ids(3, 0);
  parallel_team(0, [&](int tid, int team) {
    REQUIRE(team == 3);
    seen_ids[static_cast<std::size_t>(tid)] = 1;
    for (int p = 0; p < kPhases; ++p) {
      arrivals[static_cast<std::size_t>(p)].fetch_add(1);
      barrier.arrive_and_wait();
      // Past the barrier every thread has arrived at this phase.
      if (arrivals[static_cast<std::size_t>(p)].load() != 3) wrong.fetch_add(1);
    }
  });
  CHECK(wrong.load() == 0);
  CHECK(seen_ids == std::vector<int>{1, 1, 1});
  set_num_threads(saved);
}

TEST_CASE("thread pool: nested calls run serially on the calling thread") {
  const int saved = num_threads();
  set_num_threads(2);
  std::atomic<int> inner_total{0};
  std::atomic<int> inner_calls{0};
  parallel_for(0, 2, 1, [&](std::int64_t b, std::int64_t e) {
    CHECK(in_parallel_region());
    const auto self = std::this_thread::get_id();
    parallel_for(0, 100, 1, [&](std::int64_t ib, std::int64_t ie) {
      CHECK(std::this_thread::get_id() == self);
      inner_calls.fetch_add(1);
      inner_total.fetch_add(static_cast<int>(ie - ib));
    });
    parallel_team(0, [&](int tid, int team) {
      CHECK(team == 1);
      CHECK(tid == 0);
    });
  });
  CHECK(inner_total.load() == 200);
  CHECK(inner_calls.load() == 2);  // one whole-range chunk per nested call
  CHECK_FALSE(in_parallel_region());
  set_num_threads(saved);
}

TEST_CASE("thread pool: many short jobs back to back, and use from several threads") {
  const int saved = num_threads();
  set_num_threads(2);
  std::int64_t total = 0;
  for (int job = 0; job < 20000; ++job) {
    std::int64_t parts[2] = {0, 0};
    parallel_for(0, 64, 1, [&](std::int64_t b, std::int64_t e) {
      std::int64_t s = 0;
      for (std::int64_t i = b; i < e; ++i) s += i;
      parts[b == 0 ? 0 : 1] = s;
    });
    total += parts[0] + parts[1];
  }
  CHECK(total == std::int64_t{20000} * (63 * 64 / 2));

  // Outside threads calling at the same time either get the workers or run serially.
  std::atomic<std::int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int job = 0; job < 500; ++job) {
        parallel_for(0, 1000, 10, [&](std::int64_t b, std::int64_t e) { sum.fetch_add(e - b); });
      }
    });
  }
  for (auto& c : callers) c.join();
  CHECK(sum.load() == 3 * 500 * 1000);
  set_num_threads(saved);
}

}  // namespace wedge
