#include "task_ring.h"

namespace pto2 {

void TaskRing::init(int ring, SharedRegion& region) {
  ring_ = ring;
  fc_ = &region.header()->rings[ring];
  window_ = fc_->task_window_size;
  mask_ = window_ - 1;
  descriptors_ = region.descriptors(ring);
  slots_ = region.slot_states(ring);
  next_seq_ = fc_->current_task_index.load(std::memory_order_relaxed);
  seen_last_alive_ = fc_->last_task_alive.load(std::memory_order_relaxed);
}

bool TaskRing::retire_consumed() {
  bool moved = false;
  for (;;) {
    if (fc_->advance_lock.exchange(1, std::memory_order_seq_cst) != 0) return moved;
    uint64_t la = fc_->last_task_alive.load(std::memory_order_relaxed);
    const uint64_t head = fc_->current_task_index.load(std::memory_order_acquire);
    uint64_t heap_tail = 0, dep_tail = 0;
    bool advanced = false;
    while (la < head && slots_[la & mask_].state.load(std::memory_order_acquire) == kSlotConsumed) {
      const TaskDescriptor& d = descriptors_[la & mask_];
      heap_tail = d.heap_end_pos;
      dep_tail = d.dep_end_pos;
      ++la;
      advanced = true;
    }
    if (advanced) {
      // Tails first: an orchestrator that sees the new last_task_alive must
      // also see the space it freed.
      fc_->heap_tail.store(heap_tail, std::memory_order_release);
      fc_->dep_tail.store(dep_tail, std::memory_order_release);
      fc_->last_task_alive.store(la, std::memory_order_seq_cst);
      moved = true;
    }
    fc_->advance_lock.store(0, std::memory_order_seq_cst);
    // A task consumed after our scan whose consumer lost the try-lock is ours.
    // The state first: its seq_cst load pairs with the consumer's store and
    // the failed exchange; the head read after it is at least as new.
    const uint32_t state = slots_[la & mask_].state.load(std::memory_order_seq_cst);
    const uint64_t head2 = fc_->current_task_index.load(std::memory_order_acquire);
    if (!(la < head2 && state == kSlotConsumed)) return moved;
  }
}

}  // namespace pto2
