#include "warm_ranges.h"

#include <algorithm>

namespace pto {

void WarmRanges::set_cap(uint64_t cap) {
  std::lock_guard<std::mutex> g(mu_);
  cap_ = cap;
}

void WarmRanges::adopt_unknown(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> g(mu_);
  unknown_[offset] = bytes;
}

WarmRanges::Range WarmRanges::keep(uint64_t offset, uint64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t room = cap_ > kept_bytes_ ? cap_ - kept_bytes_ : 0;
  const uint64_t kept = std::min(room, bytes);
  // Neighbours are not merged: a range is taken whole or carved, either
  // works on pieces, and frees are few. A range kept already (two frees of
  // one buffer racing; the arena refuses the second) is not counted twice.
  if (kept > 0 && kept_.emplace(offset, kept).second) kept_bytes_ += kept;
  return {offset + kept, bytes - kept};
}

// Removes [offset, offset + bytes) from m, appending the parts m had to
// out; returns their bytes.
uint64_t WarmRanges::carve(std::map<uint64_t, uint64_t>& m, uint64_t offset, uint64_t bytes, std::vector<Range>* out) {
  const uint64_t end = offset + bytes;
  uint64_t removed = 0;
  auto it = m.upper_bound(offset);
  if (it != m.begin()) --it;
  while (it != m.end() && it->first < end) {
    const uint64_t r_off = it->first, r_end = it->first + it->second;
    if (r_end <= offset) {
      ++it;
      continue;
    }
    it = m.erase(it);
    const uint64_t lo = std::max(r_off, offset), hi = std::min(r_end, end);
    if (r_off < lo) m[r_off] = lo - r_off;
    if (hi < r_end) it = m.emplace(hi, r_end - hi).first;
    out->emplace_back(lo, hi - lo);
    removed += hi - lo;
  }
  return removed;
}

WarmRanges::Taken WarmRanges::take(uint64_t offset, uint64_t bytes) {
  Taken t;
  std::lock_guard<std::mutex> g(mu_);
  kept_bytes_ -= carve(kept_, offset, bytes, &t.kept);
  carve(unknown_, offset, bytes, &t.unknown);
  return t;
}

uint64_t WarmRanges::kept_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return kept_bytes_;
}

}  // namespace pto
