#include "sizing_probe.h"

#include <algorithm>

namespace pto2 {

void SizingProbe::seed_ring(uint32_t ring, uint64_t oldest_held, uint64_t next_seq) {
  Ring& g = rings_[ring];
  g.base = oldest_held == kNoTask ? next_seq : oldest_held;
  g.next = g.base;
  g.heap.assign(1, 0);
  g.dep.assign(1, 0);
  g.tensormap.assign(1, 0);
}

void SizingProbe::seed_task(uint32_t ring, uint64_t heap_bytes, uint64_t dep_entries, uint64_t tensormap_entries) {
  Ring& g = rings_[ring];
  g.heap.push_back(g.heap.back() + heap_bytes);
  g.dep.push_back(g.dep.back() + dep_entries);
  g.tensormap.push_back(g.tensormap.back() + tensormap_entries);
  ++g.next;
}

void SizingProbe::seed_scope(uint64_t first_seq) { scopes_.push_back(first_seq); }

uint64_t SizingProbe::oldest_held(uint32_t ring) const {
  uint64_t oldest = kNoTask;
  for (size_t depth = 0; depth < scopes_.size(); ++depth)
    if (std::min<size_t>(depth, kMaxRings - 1) == ring) oldest = std::min(oldest, scopes_[depth]);
  return oldest;
}

uint64_t SizingProbe::submit(uint32_t ring, uint64_t heap_bytes, uint64_t dep_entries, uint64_t tensormap_entries) {
  const uint64_t seq = rings_[ring].next;
  seed_task(ring, heap_bytes, dep_entries, tensormap_entries);
  if (!scopes_.empty() && scopes_.back() == kNoTask) scopes_.back() = seq;
  ++measured_;
  account(ring);
  return seq;
}

void SizingProbe::account(uint32_t ring) {
  const Ring& g = rings_[ring];
  const uint64_t oldest = oldest_held(ring);
  if (oldest == kNoTask || oldest < g.base) return;
  const uint64_t i0 = oldest - g.base, i1 = g.next - g.base;
  // The new task was allocated while the tasks before it were pinned.
  needs_.task_window = std::max(needs_.task_window, (g.next - 1 - oldest) + 2);
  needs_.heap_size = std::max(needs_.heap_size, 2 * (g.heap[i1] - g.heap[i0]));
  needs_.dep_pool_size = std::max(needs_.dep_pool_size, g.dep[i1] - g.dep[i0]);
  uint64_t entries = 0;
  for (uint32_t r = 0; r < kMaxRings; ++r) {
    const Ring& h = rings_[r];
    const uint64_t o = oldest_held(r);
    if (o == kNoTask || o < h.base) continue;
    entries += h.tensormap[h.next - h.base] - h.tensormap[o - h.base];
  }
  needs_.tensormap_pool_size = std::max(needs_.tensormap_pool_size, entries);
}

}  // namespace pto2
