// Dependency-list pool (docs/runtime.md §4): fanin/fanout list nodes, bump-allocated
// in a ring per task ring. Entry 0 is the NULL sentinel, so index 0 ends a
// list. Entries made while submitting task T live in T's ring and are
// reclaimed when T retires (the tail follows last_task_alive): T's fanin list
// is read when T completes, and a producer's fanout entry naming T is read
// when that producer completes, which is before T can run.
#pragma once

#include <atomic>
#include <cstdint>

#include "shared_region.h"

namespace pto2 {

class DepPool {
 public:
  void init(DepListEntry* entries, uint64_t size, std::atomic<uint64_t>* published_top, std::atomic<uint64_t>* tail) {
    entries_ = entries;
    size_ = size;
    published_top_ = published_top;
    tail_ = tail;
    top_ = published_top->load(std::memory_order_relaxed);
    seen_tail_ = tail->load(std::memory_order_relaxed);
  }

  // True when n more entries fit without overwriting live ones.
  // The tail read last time is tried first (it only moves forward); the
  // shared one, on the line retiring schedulers write, only when that says no.
  bool can_reserve(uint64_t n) {
    if (top_ + n - seen_tail_ <= size_) return true;
    seen_tail_ = tail_->load(std::memory_order_acquire);
    return top_ + n - seen_tail_ <= size_;
  }

  // Call only after can_reserve covered this entry.
  int32_t alloc(uint64_t task_id, int32_t next) {
    const int32_t idx = static_cast<int32_t>(1 + top_ % size_);
    ++top_;
    entries_[idx].task_id = task_id;
    entries_[idx].next = next;
    return idx;
  }
  void publish() { published_top_->store(top_, std::memory_order_release); }
  // The next entries alloc() will write (a cache line holds four).
  void prefetch_next() const {
    __builtin_prefetch(&entries_[1 + top_ % size_], 1, 3);
    __builtin_prefetch(&entries_[1 + (top_ + 4) % size_], 1, 3);
  }

  const DepListEntry& operator[](int32_t idx) const { return entries_[idx]; }
  uint64_t top() const { return top_; }
  uint64_t size() const { return size_; }
  uint64_t used() const { return top_ - tail_->load(std::memory_order_acquire); }

 private:
  DepListEntry* entries_ = nullptr;
  uint64_t size_ = 0;
  uint64_t top_ = 0;        // orchestrator-private
  uint64_t seen_tail_ = 0;  // the tail as last read (it only moves forward)
  std::atomic<uint64_t>* published_top_ = nullptr;
  std::atomic<uint64_t>* tail_ = nullptr;
};

}  // namespace pto2
