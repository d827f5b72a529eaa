#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <vector>

#include "task_ref.h"
#include "tensor_map.h"

using namespace pto2;

namespace {

Tensor grid(uint64_t addr, uint32_t rows, uint32_t cols) {
  const uint32_t shape[2] = {rows, cols};
  Tensor t = make_tensor_external(reinterpret_cast<void*>(addr), shape, 2, PTO2_FLOAT32);
  return t;
}
Tensor box(const Tensor& t, uint32_t r0, uint32_t c0, uint32_t nr, uint32_t nc) {
  const uint32_t off[2] = {r0, c0}, sh[2] = {nr, nc};
  return tensor_view(t, off, sh);
}

struct Map {
  explicit Map(uint64_t pool = 256, uint64_t buckets = 64, uint64_t window = 128) {
    for (int r = 0; r < kMaxRings; ++r) ptrs[r] = &la[r];
    tm = std::make_unique<TensorMap>(pool, buckets, window, ptrs);
  }
  std::vector<uint64_t> find(const Tensor& t, bool writer) {
    std::vector<uint64_t> v;
    tm->lookup(t, writer, make_task_id(0, 1000), &v);
    std::sort(v.begin(), v.end());
    return v;
  }
  void put(const Tensor& t, uint32_t ring, uint64_t seq, TensorMap::Kind k = TensorMap::kWriter) {
    REQUIRE(tm->reserve(1));
    tm->insert(t, make_task_id(ring, seq), k);
  }
  std::atomic<uint64_t> la[kMaxRings] = {};
  std::vector<uint64_t> scratch;
  std::atomic<uint64_t>* ptrs[kMaxRings];
  std::unique_ptr<TensorMap> tm;
};

}  // namespace

TEST_CASE("overlap of views of one buffer is decided per dimension", "[tensor_map]") {
  const Tensor t = grid(0x10000, 16, 16);
  CHECK(view_overlap(t, box(t, 2, 2, 4, 4)) == Overlap::kCovered);
  CHECK(view_overlap(box(t, 0, 0, 8, 16), box(t, 4, 0, 8, 16)) == Overlap::kOther);
  // Column blocks: strided in memory, disjoint per dimension even though
  // their byte spans interleave.
  CHECK(view_overlap(box(t, 0, 0, 16, 8), box(t, 0, 8, 16, 8)) == Overlap::kNone);
  CHECK(view_overlap(box(t, 0, 0, 4, 4), box(t, 4, 4, 4, 4)) == Overlap::kNone);
  CHECK(view_overlap(box(t, 3, 3, 1, 1), box(t, 0, 0, 4, 4)) == Overlap::kOther);  // inner covers outer? no
  CHECK(view_overlap(box(t, 0, 0, 4, 4), box(t, 3, 3, 1, 1)) == Overlap::kCovered);
}

TEST_CASE("views with different raw shapes fall back to byte spans", "[tensor_map]") {
  const Tensor a = grid(0x10000, 16, 16);  // 1 KiB
  const uint32_t flat_shape[1] = {256};
  Tensor flat = make_tensor_external(reinterpret_cast<void*>(0x10000), flat_shape, 1, PTO2_FLOAT32);
  CHECK(view_overlap(flat, box(a, 3, 0, 2, 16)) == Overlap::kCovered);  // whole buffer covers all
  const uint32_t off[1] = {0}, sh[1] = {16};
  CHECK(view_overlap(tensor_view(flat, off, sh), box(a, 1, 0, 1, 16)) == Overlap::kNone);
  CHECK(view_overlap(tensor_view(flat, off, sh), box(a, 0, 4, 1, 4)) == Overlap::kOther);
}

TEST_CASE("readers find writers - writers find writers and readers", "[tensor_map]") {
  Map m;
  const Tensor t = grid(0x20000, 8, 8);
  m.put(box(t, 0, 0, 4, 8), 0, 1, TensorMap::kWriter);
  m.put(box(t, 0, 0, 8, 8), 0, 2, TensorMap::kReader);
  CHECK(m.find(box(t, 2, 0, 1, 8), false) == std::vector<uint64_t>{make_task_id(0, 1)});
  CHECK(m.find(box(t, 6, 0, 1, 8), false).empty());                                      // only a reader there
  CHECK(m.find(box(t, 6, 0, 1, 8), true) == std::vector<uint64_t>{make_task_id(0, 2)});  // write after read
  CHECK(m.find(grid(0x30000, 8, 8), true).empty());                                      // another buffer
}

TEST_CASE("buckets shared by different buffers only match the same base", "[tensor_map]") {
  Map m(256, /*buckets=*/1);
  for (uint64_t i = 0; i < 10; ++i) m.put(grid(0x1000 * (i + 1), 4, 4), 0, i);
  CHECK(m.find(grid(0x3000, 4, 4), false) == std::vector<uint64_t>{make_task_id(0, 2)});
}

TEST_CASE("a covering writer removes the entries it covers", "[tensor_map]") {
  Map m;
  const Tensor t = grid(0x40000, 8, 8);
  m.put(box(t, 0, 0, 2, 8), 0, 1);
  m.put(box(t, 2, 0, 2, 8), 0, 2);
  m.put(box(t, 0, 0, 8, 8), 0, 3, TensorMap::kReader);
  CHECK(m.tm->linked_entries() == 3);
  // A writer of rows 0..4 depends on all three and covers the two writers.
  CHECK(m.find(box(t, 0, 0, 4, 8), true).size() == 3);
  CHECK(m.tm->linked_entries() == 1);  // only the reader (not covered) stays
  m.put(box(t, 0, 0, 4, 8), 0, 4);
  CHECK(m.find(box(t, 1, 0, 1, 8), false) == std::vector<uint64_t>{make_task_id(0, 4)});
}

TEST_CASE("layer 1: lookup truncates a chain at its first stale entry", "[tensor_map]") {
  Map m(256, 1);
  const Tensor t = grid(0x50000, 8, 8);
  for (uint64_t s = 0; s < 10; ++s) m.put(box(t, uint32_t(s % 8), 0, 1, 8), 1, s);
  CHECK(m.tm->linked_entries() == 10);
  m.la[1] = 6;
  m.tm->sync(false);  // snapshot last_task_alive; fewer than 64 retired: no batch cleanup
  CHECK(m.tm->free_entries() == 256 - 10);
  const auto found = m.find(t, false);
  CHECK(found == std::vector<uint64_t>{make_task_id(1, 6), make_task_id(1, 7), make_task_id(1, 8), make_task_id(1, 9)});
  CHECK(m.tm->linked_entries() == 4);  // the stale tail was cut in one step
}

TEST_CASE("truncation is per ring: an older live entry of another ring survives", "[tensor_map]") {
  Map m(256, 1);
  const Tensor t = grid(0x60000, 4, 4);
  m.put(t, 0, 0);  // outer ring, stays live
  m.put(t, 2, 0, TensorMap::kReader);
  m.put(box(t, 0, 0, 2, 4), 2, 1);  // newer, inner ring, retires first
  m.la[2] = 5;
  m.tm->sync(false);
  CHECK(m.find(t, true) == std::vector<uint64_t>{make_task_id(0, 0)});
}

TEST_CASE("layer 2: batch cleanup every cleanup_interval retired tasks frees per-task chains", "[tensor_map]") {
  Map m(512, 64, 256);
  const Tensor t = grid(0x70000, 16, 16);
  for (uint64_t s = 0; s < 100; ++s) {
    m.put(box(t, uint32_t(s % 16), 0, 1, 16), 0, s);
    m.put(box(t, uint32_t(s % 16), 0, 1, 16), 0, s, TensorMap::kReader);
  }
  CHECK(m.tm->free_entries() == 512 - 200);
  CHECK(m.tm->entries_in_use(0) == 200);
  m.la[0] = 63;
  m.tm->sync(false);
  CHECK(m.tm->free_entries() == 512 - 200);  // 63 < 64: not yet
  m.la[0] = 64;
  m.tm->sync(false);
  CHECK(m.tm->free_entries() == 512 - 72);  // 64 tasks x 2 entries back in the pool
  CHECK(m.tm->entries_in_use(0) == 72);
  // Entries are reused from the free list and lookups still see live ones.
  m.put(t, 0, 100);
  CHECK(m.find(box(t, 0, 0, 1, 16), false).back() == make_task_id(0, 100));
}

TEST_CASE("layer 3: reserve fails while the pool is exhausted, succeeds once tasks retire", "[tensor_map]") {
  Map m(16, 8, 64);
  const Tensor t = grid(0x80000, 4, 4);
  for (uint64_t s = 0; s < 16; ++s) m.put(t, 1, s);
  CHECK_FALSE(m.tm->reserve(1));
  m.la[1] = 3;
  CHECK(m.tm->reserve(3));  // forced cleanup freed tasks 0..2
  CHECK_FALSE(m.tm->reserve(4));
}

TEST_CASE("a slot's previous occupant is cleaned before its per-task chain is reused", "[tensor_map]") {
  Map m(64, 8, /*window=*/4);
  const Tensor t = grid(0x90000, 4, 4);
  m.put(t, 0, 0);
  m.la[0] = 1;
  m.tm->before_slot_reuse(0, 4);  // seq 4 reuses slot 0
  CHECK(m.tm->entries_in_use(0) == 0);
  m.put(t, 0, 4);
  CHECK(m.find(t, false) == std::vector<uint64_t>{make_task_id(0, 4)});
}

namespace {
Tensor flat(uint64_t addr, uint32_t n) {
  const uint32_t shape[1] = {n};
  return make_tensor_external(reinterpret_cast<void*>(addr), shape, 1, PTO2_FLOAT32);
}
}  // namespace

TEST_CASE("externals at different bases over the same bytes find each other", "[tensor_map]") {
  Map m;
  const Tensor whole = flat(0xA0000, 16);  // bytes [0xA0000, 0xA0040)
  CHECK(m.find(whole, true).empty());      // registers the base, as a submit does
  m.put(whole, 0, 1);
  CHECK(m.find(flat(0xA0020, 8), false) == std::vector<uint64_t>{make_task_id(0, 1)});   // inside
  CHECK(m.find(flat(0xA0030, 16), false) == std::vector<uint64_t>{make_task_id(0, 1)});  // straddles the end
  CHECK(m.find(flat(0xA0040, 8), false).empty());                                        // adjacent, no byte in common
  CHECK(m.find(flat(0x9FFC0, 16), false).empty());                                       // ends where whole begins
  // The reverse direction: a writer through an inner base finds readers of the outer one.
  m.put(whole, 0, 2, TensorMap::kReader);
  CHECK(m.find(flat(0xA0010, 2), true) == std::vector<uint64_t>{make_task_id(0, 1), make_task_id(0, 2)});
  // A view through one base against a view through another: only the bytes count.
  const Tensor rows = grid(0xA0000, 4, 4);  // same base as whole, a reshape
  CHECK(m.find(box(rows, 3, 0, 1, 4), false) == std::vector<uint64_t>{make_task_id(0, 1)});
}

TEST_CASE("external bases no live task uses are pruned", "[tensor_map]") {
  Map m(4096, 64, 1024);
  for (uint64_t s = 0; s < 600; ++s) {
    const Tensor t = flat(0x100000 + s * 0x100, 4);
    m.tm->lookup(t, true, make_task_id(0, s), &m.scratch);
    m.put(t, 0, s);
  }
  CHECK(m.tm->external_bases() <= 600);
  const uint32_t before = m.tm->external_bases();
  m.la[0] = 600;  // every task retired
  m.tm->sync(true);
  for (uint64_t s = 600; s < 1200; ++s)
    m.tm->lookup(flat(0x900000 + s * 0x100, 4), true, make_task_id(0, s), &m.scratch);
  CHECK(m.tm->external_bases() < before + 600);  // dead records were reclaimed on the way
  m.tm->begin_run();
  CHECK(m.tm->external_bases() == 0);
}
