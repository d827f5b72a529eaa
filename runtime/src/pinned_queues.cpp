#include "pinned_queues.h"

namespace pto2 {

PinnedReadyQueues::PinnedReadyQueues(int clusters, int types)
    : types_(types), queues_(static_cast<size_t>(clusters) * static_cast<size_t>(types)) {}

void PinnedReadyQueues::push(int cluster, int type, uint64_t task_id) {
  Queue& q = queues_[static_cast<size_t>(cluster) * types_ + type];
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.ids.push_back(task_id);
    q.size.store(static_cast<int64_t>(q.ids.size()), std::memory_order_release);
  }
  pending_.fetch_add(1, std::memory_order_acq_rel);
}

bool PinnedReadyQueues::pop(int cluster, int type, uint64_t* task_id) {
  Queue& q = queues_[static_cast<size_t>(cluster) * types_ + type];
  if (q.size.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(q.mu);
  if (q.ids.empty()) return false;
  *task_id = q.ids.front();
  q.ids.pop_front();
  q.size.store(static_cast<int64_t>(q.ids.size()), std::memory_order_release);
  pending_.fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

}  // namespace pto2
