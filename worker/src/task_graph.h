// The TaskGraph: the tasks of the run in flight and everything that decides
// when one may run and when its memory may be reused (docs/worker.md, "Scopes
// and the shared heap" and "Failure model"):
//   * nodes (TaskNode) and their edges, found through the L3 TensorMap;
//   * scopes, and the four heap rings (one per scope depth, MAP_SHARED before
//     fork) that OUTPUTs without an address and Orchestrator::alloc come from;
//   * the life cycle ready -> running -> final -> consumed, with failure
//     poisoning along read edges, and the run's result.
// Every method needs the engine lock (mu) unless it says otherwise; a ready
// task is handed to the Scheduler (enqueue).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine_lock.h"
#include "l3_tensor_map.h"
#include "shared_memory.h"
#include "task_node.h"

namespace pto {

class Scheduler;
inline constexpr int kHeapRings = 4;  // one per scope depth, min(depth, 3)

class TaskGraph {
 public:
  TaskGraph(const WorkerConfig& cfg, EngineLock& lock) : cfg_(cfg), lock_(lock) {}
  void set_scheduler(Scheduler* s) { scheduler_ = s; }

  // init() / close(): the heap rings, mapped before the children are forked.
  Status map_rings();
  void unmap_rings();

  // --- the run (mu held) ---
  void begin_run();
  bool in_run() const { return in_run_; }
  // Closes the scopes the orchestration left open (an error when any was).
  void close_scopes();
  // After the drain: the run's result; the graph, queues' nodes and rings are reset.
  RunResult end_run();
  void fail_run(const Status& s);  // an orchestration-side error: the first one is kept
  // Cancels the run in flight (false when none, or already cancelled):
  // submits are refused, tasks not yet launched end SKIPPED.
  bool cancel(const std::string& reason);
  const std::string& cancelled() const { return cancelled_; }
  // Tasks submitted and not final (read without the lock by spinning waiters).
  uint64_t pending() const { return pending_.load(std::memory_order_acquire); }
  Worker::RunProgress progress() const;

  // --- submit (mu held) ---
  int scope_depth() const { return scope_depth_; }
  void scope_begin();
  Status scope_end();
  // The owner of the heap-ring buffer holding [lo, hi), nullptr when the
  // range is not in a heap ring; an error when it is in a ring but freed.
  Status buffer_owner(uint64_t lo, uint64_t hi, TaskNode** owner) const;
  // A new task with its arguments (members: OUTPUTs without an address are
  // allocated here and written back), wired after its producers; `lk` is
  // released while waiting for heap-ring space.
  struct NewTask {
    bool next_level = false;
    CallableIdentity callable;
    CallConfig config;
    std::vector<int> pinned;
    std::shared_ptr<const std::vector<uint8_t>> allowed;
    uint32_t retries = 0;
    bool remote_pinned = false;
    bool with_directions = false;      // remote endpoints exist: record IN/OUT/INOUT per tensor
    uint64_t alloc_bytes = 0;          // OUTPUTs without an address, rounded
    std::vector<TaskNode*> owners;     // heap-ring buffers the task touches
  };
  Status add_task(const NewTask& t, std::vector<TaskArgs>& members, std::unique_lock<std::mutex>& lk,
                  TaskNode** out);
  Result<ContinuousTensor> alloc_in_scope(const std::vector<uint32_t>& shape, int32_t dtype,
                                          std::unique_lock<std::mutex>& lk);

  // --- completion (mu held) ---
  // The task reached a final state: consumers become ready or are poisoned.
  void finalize(TaskNode* s, Outcome o);
  void note_retry() { ++run_.tasks_retried; }

  // Statistics since init (mu held).
  struct Counters {
    uint64_t runs = 0, succeeded = 0, failed = 0, skipped = 0;
    LatencyHistogram task_latency;  // submit -> final
  };
  const Counters& counters() const { return counters_; }
  uint64_t ring_used(int r) const { return rings_[r].used(); }

 private:
  void add_dependency(TaskNode* consumer, TaskNode* producer, bool data);
  void make_ready(TaskNode* s);
  void unref(TaskNode* s);
  void reclaim_rings();
  Status heap_alloc(uint64_t bytes, int ring, std::unique_lock<std::mutex>& lk, uint8_t** ptr, uint64_t* end);
  void wire_member(TaskNode* s, TaskArgs& a, uint8_t*& next_out, bool with_directions);

  const WorkerConfig& cfg_;
  EngineLock& lock_;
  Scheduler* scheduler_ = nullptr;

  SharedMapping rings_map_[kHeapRings];
  L3HeapRing rings_[kHeapRings];
  std::deque<TaskNode*> ring_allocs_[kHeapRings];
  // Live heap-ring allocations: start address -> (end address, owner).
  std::map<uint64_t, std::pair<uint64_t, TaskNode*>> allocs_;

  // Per run (reset when it drains).
  std::deque<std::unique_ptr<TaskNode>> nodes_;
  std::vector<std::vector<TaskNode*>> scopes_;
  int scope_depth_ = 0;
  L3TensorMap tmap_;
  uint64_t next_task_id_ = 1;
  std::atomic<uint64_t> pending_{0};  // submitted and not final
  RunResult run_;
  std::string cancelled_;  // non-empty: the run was cancelled, why
  bool in_run_ = false;

  Counters counters_;
};

}  // namespace pto
