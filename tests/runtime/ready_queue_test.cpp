#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "ready_queue.h"

using namespace pto2;

TEST_CASE("mpmc queue is FIFO and bounded", "[ready_queue]") {
  MpmcQueue q(8);
  for (uint64_t i = 0; i < 8; ++i) REQUIRE(q.try_push(i));
  CHECK_FALSE(q.try_push(99));
  uint64_t v;
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(q.try_pop(&v));
    CHECK(v == i);
  }
  CHECK_FALSE(q.try_pop(&v));
}

TEST_CASE("sharded queue: own shard first, then steal", "[ready_queue]") {
  ShardedReadyQueue q(3, 30);
  q.push(0, 10);
  q.push(2, 12);
  uint64_t v;
  REQUIRE(q.pop(2, &v));
  CHECK(v == 12);
  REQUIRE(q.pop(1, &v));  // shard 1 empty: steals from shard 2, then 0
  CHECK(v == 10);
  CHECK_FALSE(q.pop(0, &v));
}

TEST_CASE("sharded queue under concurrent producers and stealing consumers loses nothing", "[ready_queue]") {
  const int threads = GENERATE(1, 2, 4);
  const uint64_t per = 20000;
  ShardedReadyQueue q(3, 4096);
  std::atomic<uint64_t> sum{0}, popped{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      uint64_t v;
      for (uint64_t i = 1; i <= per; ++i) {
        q.push(t, i);
        if (q.pop(t, &v)) {
          sum += v;
          ++popped;
        }
      }
      while (q.pop(t, &v)) {
        sum += v;
        ++popped;
      }
    });
  }
  for (auto& t : ts) t.join();
  uint64_t v;
  while (q.pop(0, &v)) {
    sum += v;
    ++popped;
  }
  CHECK(popped.load() == per * threads);
  CHECK(sum.load() == threads * per * (per + 1) / 2);
}
