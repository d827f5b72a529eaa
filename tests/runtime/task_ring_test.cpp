#include <catch2/catch.hpp>

#include "shared_region.h"
#include "task_ring.h"

using namespace pto2;

namespace {
RuntimeConfig cfg(uint64_t window) {
  RuntimeConfig c;
  c.task_window = window;
  c.heap_size = 4096;
  c.dep_pool_size = 16;
  return c;
}
// What the orchestrator does when it publishes seq with these tail positions.
void publish(TaskRing& r, uint64_t seq, uint64_t heap_end, uint64_t dep_end) {
  r.descriptor(seq).task_id = seq;
  r.descriptor(seq).heap_end_pos = heap_end;
  r.descriptor(seq).dep_end_pos = dep_end;
  r.slot_state(seq).state.store(kSlotInitial);
  r.publish(seq);
}
}  // namespace

TEST_CASE("task ring: slot = id & (window-1), back-pressure at window-1 active", "[task_ring]") {
  SharedRegion region(cfg(8));
  TaskRing ring;
  ring.init(1, region);
  uint64_t seq = 0;
  for (uint64_t i = 0; i < 7; ++i) {
    REQUIRE(ring.try_alloc(&seq));
    CHECK(seq == i);
    CHECK(ring.slot(seq) == (i & 7));
    publish(ring, seq, i, i);
  }
  CHECK(ring.active() == 7);
  CHECK_FALSE(ring.try_alloc(&seq));  // full: one slot stays free
}

TEST_CASE("task ring: retire advances last_task_alive only over a consumed prefix", "[task_ring]") {
  SharedRegion region(cfg(8));
  TaskRing ring;
  ring.init(0, region);
  uint64_t seq = 0;
  for (uint64_t i = 0; i < 5; ++i) {
    REQUIRE(ring.try_alloc(&seq));
    publish(ring, seq, 1000 * (i + 1), 10 * (i + 1));
  }
  // Consume 1 and 2 first: the tail must not move past the live task 0.
  ring.slot_state(1).state.store(kSlotConsumed);
  ring.slot_state(2).state.store(kSlotConsumed);
  CHECK_FALSE(ring.retire_consumed());
  CHECK(ring.last_alive() == 0);
  ring.slot_state(0).state.store(kSlotConsumed);
  CHECK(ring.retire_consumed());
  CHECK(ring.last_alive() == 3);
  CHECK(ring.flow().heap_tail.load() == 3000);  // follows the last retired task
  CHECK(ring.flow().dep_tail.load() == 30);
}

TEST_CASE("task ring: slots are reused after wrap, many times", "[task_ring]") {
  SharedRegion region(cfg(4));
  TaskRing ring;
  ring.init(2, region);
  uint64_t seq, retired = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    if (!ring.try_alloc(&seq)) {
      ring.slot_state(retired).state.store(kSlotConsumed);
      REQUIRE(ring.retire_consumed());
      ++retired;
      REQUIRE(ring.try_alloc(&seq));
    }
    CHECK(seq == i);
    publish(ring, seq, i, i);
    CHECK(ring.active() <= 3);
  }
  CHECK(ring.last_alive() == retired);
  CHECK(retired >= 96);
}
