// Heap ring (docs/runtime.md §4): output buffers packed per task, allocated
// contiguously from a circular heap. An allocation never straddles the end:
// when the space up to the end is too small, it restarts at offset 0, which is
// only possible once the tail has moved past what it needs. Positions are
// virtual and monotonic (offset = position % size), so full and empty differ
// without a spare byte. The tail follows last_task_alive (TaskRing::retire_consumed).
#pragma once

#include <atomic>
#include <cstdint>

namespace pto2 {

class HeapRing {
 public:
  enum class Alloc { kOk, kFull, kTooLarge };

  void init(uint8_t* base, uint64_t size, std::atomic<uint64_t>* published_top, std::atomic<uint64_t>* tail) {
    base_ = base;
    size_ = size;
    published_top_ = published_top;
    tail_ = tail;
    top_ = published_top->load(std::memory_order_relaxed);
    seen_tail_ = tail->load(std::memory_order_relaxed);
  }

  // bytes must already be rounded to the output alignment. On kOk, *addr is
  // the allocation and top() the position a retiring task hands to the tail.
  Alloc try_alloc(uint64_t bytes, uint64_t* addr) {
    if (bytes > size_) return Alloc::kTooLarge;
    uint64_t start = top_;
    const uint64_t off = start % size_;
    if (off + bytes > size_) start += size_ - off;  // skip the end, restart at 0
    // When nothing is live (tail == top) the skipped end holds no data, so the
    // whole heap is free; otherwise the skipped end counts as used until the
    // tail passes it. The tail read last time is tried first (what fits by
    // an older tail fits); the shared tail, on the line retiring schedulers
    // write, is read again only when that says full.
    auto fits = [&](uint64_t tail) { return start + bytes - (tail == top_ ? start : tail) <= size_; };
    if (!fits(seen_tail_)) {
      seen_tail_ = tail_->load(std::memory_order_acquire);
      if (!fits(seen_tail_)) return Alloc::kFull;
    }
    *addr = reinterpret_cast<uint64_t>(base_) + start % size_;
    top_ = start + bytes;
    published_top_->store(top_, std::memory_order_release);
    return Alloc::kOk;
  }

  uint64_t top() const { return top_; }
  uint64_t tail() const { return tail_->load(std::memory_order_acquire); }
  uint64_t size() const { return size_; }
  uint64_t used() const { return top_ - tail(); }

 private:
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t top_ = 0;        // orchestrator-private
  uint64_t seen_tail_ = 0;  // the tail as last read (it only moves forward)
  std::atomic<uint64_t>* published_top_ = nullptr;
  std::atomic<uint64_t>* tail_ = nullptr;
};

}  // namespace pto2
