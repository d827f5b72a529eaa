#include "pto/base/mpmc_queue.h"

#include <cstdlib>
#include <new>

namespace pto {

void MpmcQueue::FreeCells::operator()(Cell* p) const { std::free(p); }

MpmcQueue::MpmcQueue(uint64_t capacity_pow2)
    : cells_(static_cast<Cell*>(std::calloc(capacity_pow2, sizeof(Cell)))), mask_(capacity_pow2 - 1) {
  if (!cells_) throw std::bad_alloc();
}

bool MpmcQueue::try_push(uint64_t v) {
  uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t idx = pos & mask_;
    Cell& c = cells_[idx];
    const uint64_t seq = c.seq_minus_index.load(std::memory_order_acquire) + idx;
    const int64_t dif = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
    if (dif == 0) {
      if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        c.value = v;
        c.seq_minus_index.store(pos + 1 - idx, std::memory_order_release);
        return true;
      }
    } else if (dif < 0) {
      return false;  // full
    } else {
      pos = enqueue_pos_.load(std::memory_order_relaxed);
    }
  }
}

bool MpmcQueue::try_pop(uint64_t* v) {
  uint64_t pos = dequeue_pos_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t idx = pos & mask_;
    Cell& c = cells_[idx];
    const uint64_t seq = c.seq_minus_index.load(std::memory_order_acquire) + idx;
    const int64_t dif = static_cast<int64_t>(seq) - static_cast<int64_t>(pos + 1);
    if (dif == 0) {
      if (dequeue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        *v = c.value;
        c.seq_minus_index.store(pos + mask_ + 1 - idx, std::memory_order_release);
        return true;
      }
    } else if (dif < 0) {
      return false;  // empty
    } else {
      pos = dequeue_pos_.load(std::memory_order_relaxed);
    }
  }
}

}  // namespace pto
