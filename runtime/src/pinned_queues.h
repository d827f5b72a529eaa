// Ready queues of cluster-pinned tasks (docs/runtime.md §15): one FIFO per
// (cluster, core type). A scheduler looks at the queue of an idle core's own
// cluster before the shared ready queues, so a pinned task only ever reaches
// a core of its cluster. Pinned tasks are few next to the shared traffic, so
// a short mutex per queue is enough; `pending` lets the schedulers skip the
// whole structure while no pinned task waits.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace pto2 {

class PinnedReadyQueues {
 public:
  PinnedReadyQueues(int clusters, int types);
  void push(int cluster, int type, uint64_t task_id);
  bool pop(int cluster, int type, uint64_t* task_id);
  // Racy hint: some pinned task may be queued.
  bool any() const { return pending_.load(std::memory_order_acquire) > 0; }

 private:
  struct Queue {
    std::mutex mu;
    std::deque<uint64_t> ids;
    // ids.size(), readable without the lock: an idle core whose cluster has
    // nothing queued (the common case while others wait) takes no lock.
    std::atomic<int64_t> size{0};
  };
  int types_;
  std::vector<Queue> queues_;
  std::atomic<int64_t> pending_{0};
};

}  // namespace pto2
