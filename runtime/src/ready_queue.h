// Ready queues (docs/runtime.md §9): one set per worker type, sharded to spread
// contention; a thread pushes to its own shard and pops from it first, then
// steals from the others. Each shard is a bounded lock-free MPMC queue
// (sequence-numbered cells), sized so that all shards together can hold every
// task the rings can have in flight: a push never fails for lack of room.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "pto/base/mpmc_queue.h"

namespace pto2 {

using pto::MpmcQueue;

class ShardedReadyQueue {
 public:
  ShardedReadyQueue(int shards, uint64_t total_capacity);
  // Pushes to shard `hint % shards`, or the next one with room.
  void push(int hint, uint64_t task_id);
  // Pops from shard `hint % shards` first, then steals round-robin.
  bool pop(int hint, uint64_t* task_id);
  int shards() const { return static_cast<int>(shards_.size()); }
  // True when every shard looked empty (racy: a hint for wake-up decisions).
  bool empty_hint() const {
    for (const auto& q : shards_)
      if (!q->empty_hint()) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<MpmcQueue>> shards_;
};

}  // namespace pto2
