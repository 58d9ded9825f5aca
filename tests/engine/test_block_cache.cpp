// The caching allocator's bookkeeping (engine/block_cache.h), on a host backend that
// counts its calls and can be made to run out of memory. This is the logic the CUDA
// allocator runs, tested without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/block_cache.h"

namespace {

// Host memory with a capacity, so "out of memory" can be provoked on purpose.
struct CountingBackend {
  std::size_t capacity = std::size_t(1) << 40;
  std::size_t held = 0;
  int allocations = 0, frees = 0;
  std::set<void*> live;
  std::unordered_map<void*, std::size_t> sizes;

  void* allocate(std::size_t bytes) {
    if (held + bytes > capacity) return nullptr;
    void* p = std::aligned_alloc(256, bytes);
    if (p == nullptr) return nullptr;
    held += bytes;
    ++allocations;
    live.insert(p);
    sizes[p] = bytes;
    return p;
  }
  void free(void* p) {
    REQUIRE(live.count(p) == 1);  // the cache never frees a block twice or one it never got
    live.erase(p);
    held -= sizes[p];
    sizes.erase(p);
    ++frees;
    std::free(p);
  }
  const char* name() const { return "fake"; }
};

using Cache = wedge::BlockCache<CountingBackend>;

}  // namespace

TEST_CASE("block_size_class: 512-byte steps up to 1 MiB, then 1/16 of the next power of two") {
  using wedge::block_size_class;
  CHECK(block_size_class(0) == 512);
  CHECK(block_size_class(1) == 512);
  CHECK(block_size_class(512) == 512);
  CHECK(block_size_class(513) == 1024);
  CHECK(block_size_class(1000) == 1024);
  CHECK(block_size_class(1 << 20) == (1 << 20));
  // just above 1 MiB: next power of two is 2 MiB, step 128 KiB
  CHECK(block_size_class((1 << 20) + 1) == (1 << 20) + (128 << 10));
  CHECK(block_size_class(3u << 20) == (3u << 20));  // a multiple of 256 KiB (4 MiB / 16)
  CHECK(block_size_class((3u << 20) + 1) == (3u << 20) + (256 << 10));
  // 32522 x 256 floats, a vocabulary-sized gradient: 31,254,528 bytes -> 32 MiB / 16 steps
  CHECK(block_size_class(31254528) == 31457280);

  // Every class holds its request, is idempotent, and wastes less than 1/8 above 1 MiB.
  std::size_t previous = 0;
  for (std::size_t bytes = 1; bytes < (std::size_t(64) << 20); bytes = bytes * 5 / 4 + 7) {
    const std::size_t c = block_size_class(bytes);
    CHECK(c >= bytes);
    CHECK(c >= previous);  // monotone
    CHECK(block_size_class(c) == c);
    CHECK(c % 512 == 0);
    if (bytes > (1u << 20)) CHECK(c - bytes < bytes / 8);
    previous = c;
  }
}

TEST_CASE("BlockCache reuses a freed block for the next request of its class") {
  Cache cache;
  void* a = cache.allocate(1000);
  CHECK(cache.bytes_in_use() == 1024);
  CHECK(cache.bytes_cached() == 0);
  cache.deallocate(a, 1000);
  CHECK(cache.bytes_in_use() == 0);
  CHECK(cache.bytes_cached() == 1024);

  void* b = cache.allocate(900);  // same class (1024): the same block comes back
  CHECK(b == a);
  CHECK(cache.backend().allocations == 1);
  CHECK(cache.bytes_cached() == 0);

  void* c = cache.allocate(2000);  // another class: a new block
  CHECK(c != a);
  CHECK(cache.backend().allocations == 2);
  CHECK(cache.bytes_in_use() == 1024 + 2048);
  CHECK(cache.peak_bytes_in_use() == 1024 + 2048);

  cache.deallocate(b, 900);
  cache.deallocate(c, 2000);
  CHECK(cache.backend().frees == 0);  // deallocate never returns memory to the device
  CHECK(cache.bytes_cached() == 1024 + 2048);
  cache.release_cached();
  CHECK(cache.backend().frees == 2);
  CHECK(cache.bytes_cached() == 0);
  CHECK(cache.backend().live.empty());
}

TEST_CASE("BlockCache: a repeating training step reaches the device only in its first step") {
  Cache cache;
  const std::size_t step_sizes[] = {4096 * 30522 * 4, 4096 * 256 * 4, 4096 * 256 * 4,
                                    4096 * 1024 * 4, 256 * 4,         4, 0};
  for (int step = 0; step < 10; ++step) {
    std::vector<std::pair<void*, std::size_t>> blocks;
    for (std::size_t bytes : step_sizes) blocks.emplace_back(cache.allocate(bytes), bytes);
    // all live blocks are distinct
    std::set<void*> distinct;
    for (auto& [p, bytes] : blocks) distinct.insert(p);
    CHECK(distinct.size() == blocks.size());
    // freed in another order than allocated, as a backward pass does
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cache.deallocate(it->first, it->second);
    CHECK(cache.bytes_in_use() == 0);
  }
  CHECK(cache.backend().allocations == 7);
  CHECK(cache.backend().frees == 0);
}

TEST_CASE("BlockCache releases its cache and retries when the device runs out of memory") {
  Cache cache;
  cache.backend().capacity = 8192;
  void* a = cache.allocate(4096);
  void* b = cache.allocate(2048);
  cache.deallocate(a, 4096);  // 4096 cached, 2048 in use, device holds 6144 of 8192
  CHECK(cache.bytes_cached() == 4096);

  // 5120 is larger than the cached block and does not fit beside 6144: the cached 4096
  // must be given back first.
  void* c = cache.allocate(5120);
  CHECK(c != nullptr);
  CHECK(cache.backend().frees == 1);
  CHECK(cache.bytes_cached() == 0);
  CHECK(cache.bytes_in_use() == 2048 + 5120);

  // 4096 does not fit even with an empty cache: a clear error naming device and size.
  try {
    (void)cache.allocate(4096);
    FAIL("expected out of memory");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find("fake") != std::string::npos);
    CHECK(what.find("4096") != std::string::npos);
  }
  // A request no device can hold (its size class would not fit a size_t) is the same error.
  CHECK_THROWS_WITH_AS((void)cache.allocate(~std::size_t(0)),
                       doctest::Contains("fake: out of memory allocating 18446744073709551615 bytes"),
                       std::runtime_error);
  // the failed requests changed no bookkeeping
  CHECK(cache.bytes_in_use() == 2048 + 5120);
  cache.deallocate(b, 2048);
  cache.deallocate(c, 5120);
  cache.release_cached();
  CHECK(cache.backend().live.empty());
}

TEST_CASE("BlockCache rejects pointers it does not own and mismatched sizes") {
  Cache cache;
  int not_ours = 0;
  CHECK_THROWS_AS(cache.deallocate(&not_ours, 4), std::logic_error);
  void* a = cache.allocate(1100);                                  // class 1536
  CHECK_THROWS_AS(cache.deallocate(a, 100), std::logic_error);     // class 512: under half the block
  CHECK_THROWS_AS(cache.deallocate(a, 2000), std::logic_error);    // class 2048: over the block
  cache.deallocate(a, 1536);                                       // same class: fine
  CHECK_THROWS_AS(cache.deallocate(a, 1536), std::logic_error);    // double free
  cache.deallocate(nullptr, 123);                                  // no-op, like free(nullptr)
  CHECK(cache.bytes_cached() == 1536);
  cache.release_cached();
}

TEST_CASE("BlockCache: the best-fitting cached block within twice the class serves a request") {
  Cache cache;
  void* big = cache.allocate(4096);
  void* small = cache.allocate(1024);
  cache.deallocate(big, 4096);
  cache.deallocate(small, 1024);
  void* a = cache.allocate(1000);  // class 1024: its own block, not the 4096 one
  CHECK(a == small);
  void* b = cache.allocate(2560);  // class 2560: the 4096 block (< 2 x 2560), counted at 4096
  CHECK(b == big);
  CHECK(cache.bytes_in_use() == 1024 + 4096);
  CHECK(cache.backend().allocations == 2);
  void* c = cache.allocate(1024);  // nothing cached fits: a new block
  CHECK(cache.backend().allocations == 3);
  cache.deallocate(b, 2560);  // freed with its requested size, filed under its real size
  CHECK(cache.bytes_cached() == 4096);
  void* d = cache.allocate(1500);  // class 1536: 4096 is more than twice that, so a new block
  CHECK(d != big);
  CHECK(cache.backend().allocations == 4);
  for (auto [p, bytes] : {std::pair{a, 1000}, std::pair{c, 1024}, std::pair{d, 1500}}) cache.deallocate(p, bytes);
  cache.release_cached();
  CHECK(cache.backend().live.empty());
}

TEST_CASE("BlockCache: sizes that vary from step to step stop reaching the device") {
  // Four experts share 4096 rows of 1 KiB; how many each gets changes every step.
  Cache cache;
  std::size_t after_warmup = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<std::pair<void*, std::size_t>> blocks;
    std::size_t left = 4096;
    for (int k = 0; k < 4; ++k) {
      const std::size_t rows = k == 3 ? left : std::min<std::size_t>(left, 700 + std::size_t((step * 7919 + k * 104729) % 700));
      left -= rows;
      const std::size_t bytes = rows * 1024;
      blocks.emplace_back(cache.allocate(bytes), bytes);
    }
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) cache.deallocate(it->first, it->second);
    if (step == 49) after_warmup = cache.backend().allocations;
  }
  CHECK(cache.backend().allocations == after_warmup);  // the last 150 steps allocated nothing
  CHECK(cache.backend().allocations <= 16);
}

namespace {

// Host memory whose live blocks are recorded outside the cache (the cache owns its backend,
// so only an outside record can be read after the cache is gone). With fail_on_free > 0,
// that many frees succeed and the next one throws, as a device that has shut down does.
struct OutsideRecordBackend {
  std::set<void*>* live = nullptr;
  int fail_on_free = 0;
  void* allocate(std::size_t bytes) {
    void* p = std::aligned_alloc(256, bytes);
    if (p != nullptr) live->insert(p);
    return p;
  }
  void free(void* p) {
    if (fail_on_free > 0 && --fail_on_free == 0) throw std::runtime_error("fake: device gone");
    REQUIRE(live->erase(p) == 1);  // never a block twice, never one it did not hand out
    std::free(p);
  }
  const char* name() const { return "fake"; }
};

}  // namespace

TEST_CASE("BlockCache: destroying the cache gives its cached blocks back, never a block in use") {
  std::set<void*> live;
  void* in_use = nullptr;
  {
    wedge::BlockCache<OutsideRecordBackend> cache(OutsideRecordBackend{&live});
    void* a = cache.allocate(1000);
    void* b = cache.allocate(std::size_t(3) << 20);
    in_use = cache.allocate(5000);
    cache.deallocate(a, 1000);
    cache.deallocate(b, std::size_t(3) << 20);
    CHECK(live.size() == 3);
  }
  REQUIRE(live.size() == 1);  // the two cached blocks went back to the backend
  CHECK(*live.begin() == in_use);
  std::free(in_use);
}

TEST_CASE("BlockCache: a backend that fails while releasing leaves no freed block in the cache") {
  std::set<void*> live;
  {
    wedge::BlockCache<OutsideRecordBackend> cache(OutsideRecordBackend{&live});
    std::vector<void*> blocks;
    for (std::size_t bytes : {512, 1024, 1536, 2048}) blocks.push_back(cache.allocate(bytes));
    for (std::size_t i = 0; i < blocks.size(); ++i) cache.deallocate(blocks[i], 512 * (i + 1));
    CHECK(cache.bytes_cached() == 512 + 1024 + 1536 + 2048);
    cache.backend().fail_on_free = 2;  // the first free succeeds, the second throws
    CHECK_THROWS_AS(cache.release_cached(), std::runtime_error);
    // The freed 512-byte block and the 1024-byte one whose free failed are out of the books;
    // the 1536- and 2048-byte blocks remain cached.
    CHECK(live.size() == 3);
    CHECK(cache.bytes_cached() == 1536 + 2048);
    // A 1024-byte request is served by the best remaining fit, not by a block that is gone.
    void* again = cache.allocate(1024);
    CHECK(again == blocks[2]);
    CHECK(cache.backend().live->count(again) == 1);
    cache.deallocate(again, 1024);
  }
  // The destructor freed the two still cached; the block whose free failed stays with the
  // (failed) device, here plain host memory to hand back by hand.
  REQUIRE(live.size() == 1);
  std::free(*live.begin());
}
