// The L3 TensorMap (docs/worker.md, "TaskArgs, tags and dependencies"): a
// multimap of written and read byte regions [lo, hi). Any overlap orders two
// accesses (RAW, WAR, WAW), whatever their start addresses; a new writer
// replaces the entries its region covers. A node records the regions it is
// in (TaskNode::written, read) so that its entries go when it is consumed:
// the map never holds a node whose run's state was freed. Used with the
// engine lock held.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "task_node.h"

namespace pto {

class L3TensorMap {
 public:
  struct Entry {
    uint64_t end = 0;
    TaskNode* writer = nullptr;
    std::vector<TaskNode*> readers;
  };
  // Calls f(producer, is_writer) for every task an access to [lo, hi) must follow.
  template <class F>
  void for_overlaps(uint64_t lo, uint64_t hi, bool with_readers, F&& f) {
    auto it = map_.lower_bound(lo > max_len_ ? lo - max_len_ : 0);
    for (; it != map_.end() && it->first < hi; ++it) {
      if (it->second.end <= lo) continue;
      if (it->second.writer) f(it->second.writer, true);
      if (with_readers)
        for (TaskNode* r : it->second.readers) f(r, false);
    }
  }
  void add_reader(uint64_t lo, uint64_t hi, TaskNode* s);
  void set_writer(uint64_t lo, uint64_t hi, TaskNode* s);
  // Takes the node out of every entry it is in (as writer or reader).
  void remove(TaskNode* s);
  bool empty() const { return map_.empty(); }
  size_t size() const { return map_.size(); }
  // Forgets every entry overlapping [lo, hi) (memory handed back to a ring).
  void erase_range(uint64_t lo, uint64_t hi);
  void clear() {
    map_.clear();
    max_len_ = 0;
  }

 private:
  std::multimap<uint64_t, Entry> map_;
  uint64_t max_len_ = 0;
};

}  // namespace pto
