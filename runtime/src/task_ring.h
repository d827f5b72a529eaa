// Task ring (docs/runtime.md §4): a power-of-two window of task slots,
// slot = seq & (window - 1). The orchestrator allocates at the head; scheduler
// threads retire consumed tasks at the tail (last_task_alive) without locks on
// the hot path. Back-pressure: allocation fails while active >= window - 1.
#pragma once

#include <atomic>
#include <cstdint>

#include "shared_region.h"

namespace pto2 {

class TaskRing {
 public:
  void init(int ring, SharedRegion& region);

  int ring() const { return ring_; }
  uint64_t window() const { return window_; }
  uint64_t slot(uint64_t seq) const { return seq & mask_; }
  TaskDescriptor& descriptor(uint64_t seq) { return descriptors_[seq & mask_]; }
  TaskSlotState& slot_state(uint64_t seq) { return slots_[seq & mask_]; }
  RingFlowControl& flow() { return *fc_; }

  // --- orchestrator side ---
  // Allocates the next seq, or returns false when the window is full.
  bool try_alloc(uint64_t* seq) {
    // One slot stays unused so that "full" and "empty" differ (docs/runtime.md §4).
    // The tail read last time first: it only moves forward, so a window
    // that has room by it has room. The shared tail is read again only when
    // that says full — it sits on the line retiring schedulers write.
    if (next_seq_ - seen_last_alive_ >= window_ - 1) {
      seen_last_alive_ = last_alive();
      if (next_seq_ - seen_last_alive_ >= window_ - 1) return false;
    }
    *seq = next_seq_++;
    return true;
  }
  // Step 8: makes every seq < seq+1 visible to scanners.
  void publish(uint64_t seq) { fc_->current_task_index.store(seq + 1, std::memory_order_release); }
  uint64_t next_seq() const { return next_seq_; }
  uint64_t last_alive() const { return fc_->last_task_alive.load(std::memory_order_acquire); }
  uint64_t active() const { return next_seq_ - last_alive(); }

  // --- any thread ---
  // Moves last_task_alive past every consumed task at the tail and moves
  // heap_tail / dep_tail with it. Returns true if the tail moved.
  // Lock-free for callers: one thread advances at a time (try-lock), a thread
  // that loses the race leaves the work to the winner, which re-checks after
  // releasing so no consumed task is left behind.
  bool retire_consumed();

 private:
  int ring_ = 0;
  uint64_t window_ = 0;
  uint64_t mask_ = 0;
  RingFlowControl* fc_ = nullptr;
  TaskDescriptor* descriptors_ = nullptr;
  TaskSlotState* slots_ = nullptr;
  // Orchestrator-private, on a line of their own: every submit writes
  // next_seq_, and the fields above are read by every scheduler access to a
  // slot (sharing their line cost each of them a miss per submit).
  alignas(64) uint64_t next_seq_ = 0;  // head
  uint64_t seen_last_alive_ = 0;       // last_task_alive as last read (only moves forward)
};

}  // namespace pto2
