#include <catch2/catch.hpp>

#include <atomic>
#include <vector>

#include "heap_ring.h"
#include "shared_region.h"

using namespace pto2;

namespace {
struct Heap {
  explicit Heap(uint64_t size) : mem(size + kOutputAlign) {
    base = reinterpret_cast<uint8_t*>(align_up(reinterpret_cast<uint64_t>(mem.data()), kOutputAlign));
    ring.init(base, size, &top, &tail);
  }
  uint64_t off(uint64_t addr) const { return addr - reinterpret_cast<uint64_t>(base); }
  std::vector<uint8_t> mem;
  uint8_t* base;
  std::atomic<uint64_t> top{0}, tail{0};
  HeapRing ring;
};
}  // namespace

TEST_CASE("heap ring allocates contiguously and publishes heap_top", "[heap_ring]") {
  Heap h(8192);
  uint64_t a = 0, b = 0;
  REQUIRE(h.ring.try_alloc(2048, &a) == HeapRing::Alloc::kOk);
  REQUIRE(h.ring.try_alloc(1024, &b) == HeapRing::Alloc::kOk);
  CHECK(h.off(a) == 0);
  CHECK(h.off(b) == 2048);
  CHECK(h.top.load() == 3072);
  CHECK(a % kOutputAlign == 0);
  CHECK(b % kOutputAlign == 0);
}

TEST_CASE("heap ring never straddles the end and wraps only once the tail moved", "[heap_ring]") {
  Heap h(4096);
  uint64_t a = 0;
  REQUIRE(h.ring.try_alloc(3072, &a) == HeapRing::Alloc::kOk);  // [0, 3072)
  // 2048 does not fit in [3072, 4096): it must restart at 0, which is still live.
  CHECK(h.ring.try_alloc(2048, &a) == HeapRing::Alloc::kFull);
  h.tail.store(1024);  // the first 1024 bytes were reclaimed: still not enough
  CHECK(h.ring.try_alloc(2048, &a) == HeapRing::Alloc::kFull);
  h.tail.store(2048);
  REQUIRE(h.ring.try_alloc(2048, &a) == HeapRing::Alloc::kOk);
  CHECK(h.off(a) == 0);                // wrapped, did not straddle [3072, 5120)
  CHECK(h.ring.top() == 4096 + 2048);  // the skipped end counts as used until the tail passes it
  CHECK(h.ring.try_alloc(1024, &a) == HeapRing::Alloc::kFull);
  h.tail.store(4096);
  REQUIRE(h.ring.try_alloc(1024, &a) == HeapRing::Alloc::kOk);
  CHECK(h.off(a) == 2048);
}

TEST_CASE("heap ring: an empty ring can serve any request up to its size", "[heap_ring]") {
  Heap h(4096);
  uint64_t a = 0;
  REQUIRE(h.ring.try_alloc(3072, &a) == HeapRing::Alloc::kOk);
  h.tail.store(h.ring.top());  // everything retired, top at offset 3072
  REQUIRE(h.ring.try_alloc(4096, &a) == HeapRing::Alloc::kOk);
  CHECK(h.off(a) == 0);
  CHECK(h.ring.try_alloc(8192, &a) == HeapRing::Alloc::kTooLarge);
}

TEST_CASE("heap ring reuses the same memory lap after lap", "[heap_ring]") {
  Heap h(4096);
  uint64_t prev_top = 0;
  for (int i = 0; i < 1000; ++i) {
    uint64_t a = 0;
    const uint64_t bytes = 1024 * (1 + i % 3);
    if (h.ring.try_alloc(bytes, &a) != HeapRing::Alloc::kOk) {
      h.tail.store(prev_top);  // retire everything allocated so far
      REQUIRE(h.ring.try_alloc(bytes, &a) == HeapRing::Alloc::kOk);
    }
    REQUIRE(h.off(a) + bytes <= 4096);
    REQUIRE(h.ring.used() <= 4096 + 4096);
    prev_top = h.ring.top();
  }
}
