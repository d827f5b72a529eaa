// A bounded lock-free multi-producer multi-consumer queue of 64-bit values
// (sequence-numbered cells). Cells come zeroed from calloc and store their
// sequence relative to their index, so a large queue commits memory only as
// it is used.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace pto {

class MpmcQueue {
 public:
  // Cells come zeroed from calloc: a large queue commits memory as it is used.
  explicit MpmcQueue(uint64_t capacity_pow2);
  bool try_push(uint64_t v);
  bool try_pop(uint64_t* v);
  bool empty_hint() const {
    return enqueue_pos_.load(std::memory_order_relaxed) == dequeue_pos_.load(std::memory_order_relaxed);
  }

 private:
  // A cell's sequence number is stored relative to its index, so the
  // all-zero state of fresh (lazily committed) memory is the initial state.
  struct Cell {
    std::atomic<uint64_t> seq_minus_index;
    uint64_t value;
  };
  struct FreeCells {
    void operator()(Cell* p) const;
  };
  std::unique_ptr<Cell[], FreeCells> cells_;
  uint64_t mask_;
  alignas(64) std::atomic<uint64_t> enqueue_pos_{0};
  alignas(64) std::atomic<uint64_t> dequeue_pos_{0};
};

}  // namespace pto
