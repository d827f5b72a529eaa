#include <catch2/catch.hpp>

#include "shared_region.h"

using namespace pto2;

TEST_CASE("layout is 64-byte aligned and sized from the config (runtime.md §2)", "[shared_region]") {
  RuntimeConfig c;
  c.task_window = 16;
  c.dep_pool_size = 100;
  const SharedRegionLayout l = SharedRegionLayout::compute(c);
  CHECK(l.header_bytes % 64 == 0);
  CHECK(l.header_bytes >= sizeof(SharedHeader));
  uint64_t expect = align_up(sizeof(SharedHeader), 64);
  for (int r = 0; r < kMaxRings; ++r) {
    CHECK(l.descriptors_offset[r] == expect);
    CHECK(l.descriptors_offset[r] % 64 == 0);
    expect += align_up(16 * sizeof(TaskDescriptor), 64);
    CHECK(l.slot_states_offset[r] == expect);
    expect += align_up(16 * sizeof(TaskSlotState), 64);
    CHECK(l.dep_pool_offset[r] == expect);
    CHECK(l.dep_pool_offset[r] % 64 == 0);
    expect += align_up(101 * sizeof(DepListEntry), 64);  // + 1: the NULL sentinel
  }
  CHECK(l.total_bytes == expect);

  c.task_window = 32;
  CHECK(SharedRegionLayout::compute(c).total_bytes > l.total_bytes);
}

TEST_CASE("flow-control fields of writer and reader sides sit on separate cache lines", "[shared_region]") {
  RingFlowControl fc;
  const auto base = reinterpret_cast<uintptr_t>(&fc);
  const auto line = [&](const void* p) { return (reinterpret_cast<uintptr_t>(p) - base) / 64; };
  CHECK(line(&fc.current_task_index) == line(&fc.heap_top));
  CHECK(line(&fc.current_task_index) != line(&fc.last_task_alive));
  CHECK(line(&fc.last_task_alive) == line(&fc.heap_tail));
  CHECK(alignof(TaskDescriptor) == 64);
  CHECK(sizeof(TaskSlotState) == 64);
}

TEST_CASE("a mapped region has its header, per-ring config and NULL sentinels", "[shared_region]") {
  RuntimeConfig c;
  c.task_window = 64;
  c.dep_pool_size = 32;
  c.heap_size = 4096;
  SharedRegion region(c);
  REQUIRE(region.valid());
  SharedHeader* h = region.header();
  CHECK(h->magic == kRegionMagic);
  CHECK(h->total_size == region.layout().total_bytes);
  CHECK(reinterpret_cast<uintptr_t>(h) % 64 == 0);
  for (int r = 0; r < kMaxRings; ++r) {
    CHECK(h->rings[r].task_window_size == 64);
    CHECK(h->rings[r].heap_size == 4096);
    CHECK(h->rings[r].current_task_index.load() == 0);
    CHECK(h->rings[r].last_task_alive.load() == 0);
    CHECK(region.dep_pool(r)[0].task_id == ~0ull);
    CHECK(region.dep_pool(r)[0].next == 0);
    CHECK(reinterpret_cast<uintptr_t>(region.descriptors(r)) % 64 == 0);
    CHECK(region.slot_states(r)[63].state.load() == kSlotInitial);
  }
}
