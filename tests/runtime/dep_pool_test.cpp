#include <catch2/catch.hpp>

#include <atomic>
#include <vector>

#include "dep_pool.h"

using namespace pto2;

TEST_CASE("dep pool: entry 0 is never handed out - lists end at 0", "[dep_pool]") {
  std::vector<DepListEntry> entries(17);
  entries[0] = {~0ull, 0, 0};
  std::atomic<uint64_t> top{0}, tail{0};
  DepPool pool;
  pool.init(entries.data(), 16, &top, &tail);
  REQUIRE(pool.can_reserve(16));
  CHECK_FALSE(pool.can_reserve(17));
  int32_t head = 0;
  for (uint64_t i = 0; i < 16; ++i) {
    head = pool.alloc(100 + i, head);
    CHECK(head >= 1);
    CHECK(head <= 16);
  }
  pool.publish();
  CHECK(top.load() == 16);
  // Walk the list newest-first until the sentinel.
  uint64_t n = 0;
  for (int32_t e = head; e != 0; e = pool[e].next) CHECK(pool[e].task_id == 100 + 15 - n++);
  CHECK(n == 16);
  CHECK(entries[0].task_id == ~0ull);
}

TEST_CASE("dep pool: back-pressure until the tail moves, then wraps", "[dep_pool]") {
  std::vector<DepListEntry> entries(17);
  std::atomic<uint64_t> top{0}, tail{0};
  DepPool pool;
  pool.init(entries.data(), 16, &top, &tail);
  for (int i = 0; i < 12; ++i) pool.alloc(i, 0);
  CHECK_FALSE(pool.can_reserve(5));
  tail.store(4);  // the task owning entries 1..4 retired
  REQUIRE(pool.can_reserve(8));
  for (int i = 0; i < 8; ++i) {
    const int32_t idx = pool.alloc(i, 0);
    CHECK(idx >= 1);
    CHECK(idx <= 16);
  }
  CHECK(pool.used() == 16);
}
