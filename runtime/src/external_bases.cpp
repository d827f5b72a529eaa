#include "external_bases.h"

#include <algorithm>

#include "task_ref.h"

namespace pto2 {

namespace {

constexpr uint32_t kInitialSlots = 256;  // power of two
constexpr uint32_t kMinPruneAt = 256;

uint64_t hash(uint64_t addr) { return (addr * 0x9E3779B97F4A7C15ull) >> 20; }

}  // namespace

ExternalBases::ExternalBases() { reset(); }

void ExternalBases::clear() {
  // Every change of state starts with add(), which grows recs_: with recs_
  // empty and the table at its first size, this is the state reset() left.
  // A run that touched no external buffer (an empty one, for example) does
  // not pay for refilling the table.
  if (recs_.empty() && table_.size() == kInitialSlots) return;
  reset();
}

void ExternalBases::reset() {
  recs_.clear();
  free_.clear();
  table_.assign(kInitialSlots, Slot{0, kNone});
  mask_ = kInitialSlots - 1;
  by_addr_.clear();
  max_extent_ = 0;
  live_ = 0;
  prune_at_ = kMinPruneAt;
}

uint32_t ExternalBases::find(uint64_t addr) const {
  for (uint64_t h = hash(addr) & mask_;; h = (h + 1) & mask_) {
    const Slot& s = table_[h];
    if (s.addr == addr) return s.idx;
    if (s.addr == 0) return kNone;
  }
}

void ExternalBases::hash_insert(uint64_t addr, uint32_t idx) {
  if (2 * (live_ + 1) > table_.size()) grow_table();
  uint64_t h = hash(addr) & mask_;
  while (table_[h].addr != 0) h = (h + 1) & mask_;
  table_[h] = Slot{addr, idx};
}

void ExternalBases::hash_erase(uint64_t addr) {
  uint64_t h = hash(addr) & mask_;
  while (table_[h].addr != addr) h = (h + 1) & mask_;
  // Backward-shift deletion keeps every probe sequence unbroken without tombstones.
  for (uint64_t next = (h + 1) & mask_;; next = (next + 1) & mask_) {
    if (table_[next].addr == 0) break;
    const uint64_t home = hash(table_[next].addr) & mask_;
    // Move `next` into the hole unless its home lies cyclically in (h, next].
    const bool stays = h <= next ? (h < home && home <= next) : (h < home || home <= next);
    if (stays) continue;
    table_[h] = table_[next];
    h = next;
  }
  table_[h] = Slot{0, kNone};
}

void ExternalBases::grow_table() {
  std::vector<Slot> old;
  old.swap(table_);
  table_.assign(old.size() * 2, Slot{0, kNone});
  mask_ = table_.size() - 1;
  for (const Slot& s : old) {
    if (s.addr == 0) continue;
    uint64_t h = hash(s.addr) & mask_;
    while (table_[h].addr != 0) h = (h + 1) & mask_;
    table_[h] = s;
  }
}

void ExternalBases::link_aliases(uint32_t idx) {
  Base& b = recs_[idx];
  // Bases that start within max_extent_ before b.end may reach into b.
  const uint64_t from = b.addr > max_extent_ ? b.addr - max_extent_ : 0;
  for (auto it = by_addr_.lower_bound(from); it != by_addr_.end() && it->first < b.end; ++it) {
    const uint32_t other = it->second;
    if (other == idx || recs_[other].end <= b.addr) continue;
    b.aliases.push_back(other);
    recs_[other].aliases.push_back(idx);
  }
}

void ExternalBases::unlink_aliases(uint32_t idx) {
  for (uint32_t other : recs_[idx].aliases) {
    std::vector<uint32_t>& a = recs_[other].aliases;
    a.erase(std::find(a.begin(), a.end(), idx));
  }
  recs_[idx].aliases.clear();
}

uint32_t ExternalBases::add(uint64_t addr, uint64_t end) {
  uint32_t idx;
  if (!free_.empty()) {
    idx = free_.back();
    free_.pop_back();
  } else {
    idx = static_cast<uint32_t>(recs_.size());
    recs_.emplace_back();
  }
  Base& b = recs_[idx];
  b.addr = addr;
  b.end = end;
  std::fill(std::begin(b.next_seq), std::end(b.next_seq), 0);
  b.aliases.clear();
  b.live = true;
  hash_insert(addr, idx);
  ++live_;
  by_addr_.emplace(addr, idx);
  max_extent_ = std::max(max_extent_, end - addr);
  link_aliases(idx);
  return idx;
}

void ExternalBases::prune(const uint64_t* last_alive) {
  for (uint32_t idx = 0; idx < recs_.size(); ++idx) {
    Base& b = recs_[idx];
    if (!b.live) continue;
    bool in_use = false;
    for (int r = 0; r < kMaxRings && !in_use; ++r) in_use = b.next_seq[r] > last_alive[r];
    if (in_use) continue;
    unlink_aliases(idx);
    hash_erase(b.addr);
    by_addr_.erase(b.addr);
    b.live = false;
    --live_;
    free_.push_back(idx);
  }
  prune_at_ = std::max(kMinPruneAt, 2 * live_);
}

uint32_t ExternalBases::touch(uint64_t addr, uint64_t bytes, uint64_t task_id, const uint64_t* last_alive) {
  const uint64_t end = addr + std::max<uint64_t>(bytes, 1);
  uint32_t idx = find(addr);
  if (idx == kNone) {
    if (live_ >= prune_at_) prune(last_alive);
    idx = add(addr, end);
  } else if (end > recs_[idx].end) {
    // A larger buffer at a known base (a reshape): its aliases are found again.
    unlink_aliases(idx);
    recs_[idx].end = end;
    max_extent_ = std::max(max_extent_, end - addr);
    link_aliases(idx);
  }
  Base& b = recs_[idx];
  b.next_seq[task_ring(task_id)] = task_seq(task_id) + 1;
  return idx;
}

}  // namespace pto2
