#include "l3_tensor_map.h"

#include <algorithm>

namespace pto {

void L3TensorMap::add_reader(uint64_t lo, uint64_t hi, TaskNode* s) {
  auto [b, e] = map_.equal_range(lo);
  for (auto it = b; it != e; ++it) {
    if (it->second.end != hi) continue;
    auto& r = it->second.readers;
    // Finished readers no longer order anything.
    r.erase(std::remove_if(r.begin(), r.end(), [](TaskNode* x) { return x->state == TaskNode::State::kFinal; }), r.end());
    r.push_back(s);
    s->read.emplace_back(lo, hi);
    return;
  }
  map_.emplace(lo, Entry{hi, nullptr, {s}});
  max_len_ = std::max(max_len_, hi - lo);
  s->read.emplace_back(lo, hi);
}

void L3TensorMap::set_writer(uint64_t lo, uint64_t hi, TaskNode* s) {
  // Entries the new region covers are superseded: the writer already follows them.
  auto it = map_.lower_bound(lo);
  while (it != map_.end() && it->first < hi) {
    if (it->second.end <= hi)
      it = map_.erase(it);
    else
      ++it;
  }
  map_.emplace(lo, Entry{hi, s, {}});
  max_len_ = std::max(max_len_, hi - lo);
  s->written.emplace_back(lo, hi);
}

void L3TensorMap::erase_range(uint64_t lo, uint64_t hi) {
  auto it = map_.lower_bound(lo > max_len_ ? lo - max_len_ : 0);
  while (it != map_.end() && it->first < hi) {
    if (it->second.end > lo)
      it = map_.erase(it);
    else
      ++it;
  }
}

void L3TensorMap::remove(TaskNode* s) {
  for (auto [lo, hi] : s->written) {
    auto [b, e] = map_.equal_range(lo);
    for (auto it = b; it != e;) {
      if (it->second.writer == s) {
        it->second.writer = nullptr;
        if (it->second.readers.empty()) {
          it = map_.erase(it);
          continue;
        }
      }
      ++it;
    }
  }
  for (auto [lo, hi] : s->read) {
    auto [b, e] = map_.equal_range(lo);
    for (auto it = b; it != e;) {
      auto& r = it->second.readers;
      if (it->second.end == hi) r.erase(std::remove(r.begin(), r.end(), s), r.end());
      if (r.empty() && !it->second.writer) {
        it = map_.erase(it);
        continue;
      }
      ++it;
    }
  }
  s->written.clear();
  s->read.clear();
}

}  // namespace pto
