#include "ready_queue.h"

#include <bit>
#include <cstdlib>
#include <new>

namespace pto2 {

ShardedReadyQueue::ShardedReadyQueue(int shards, uint64_t total_capacity) {
  const uint64_t per_shard = std::bit_ceil((total_capacity + shards - 1) / shards + 1);
  for (int i = 0; i < shards; ++i) shards_.push_back(std::make_unique<MpmcQueue>(per_shard));
}

void ShardedReadyQueue::push(int hint, uint64_t task_id) {
  const int n = shards();
  for (int i = 0;; ++i) {
    if (shards_[(hint + i) % n]->try_push(task_id)) return;
    // Capacity covers every in-flight task, so some shard has room; a full
    // sweep failing means a concurrent pop is about to free a cell.
    if (i >= n - 1) i = -1;
  }
}

bool ShardedReadyQueue::pop(int hint, uint64_t* task_id) {
  const int n = shards();
  for (int i = 0; i < n; ++i) {
    MpmcQueue& q = *shards_[(hint + i) % n];
    if (!q.empty_hint() && q.try_pop(task_id)) return true;
  }
  return false;
}

}  // namespace pto2
