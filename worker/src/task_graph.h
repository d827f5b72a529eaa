// The TaskGraph: the runs in flight, their tasks, and everything that decides
// when a task may run and when its memory may be reused (docs/worker.md,
// "Runs", "Scopes and the shared heap" and "Failure model"):
//   * runs (RunState): up to max_concurrent_runs at once, each with a slot of
//     four heap rings (one per scope depth, MAP_SHARED before fork) that its
//     OUTPUTs without an address and Orchestrator::alloc come from;
//   * nodes (TaskNode) and their edges, found through one L3 TensorMap that
//     all runs share: tasks of different runs that touch the same bytes are
//     ordered by submission (readers run together), and only there do runs
//     meet. Such an edge orders; it never skips a task because another run's
//     task failed;
//   * the life cycle ready -> running -> final -> consumed, with failure
//     poisoning along read edges within a run, and each run's result.
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
#include "run_state.h"
#include "shared_memory.h"
#include "task_node.h"

namespace pto {

class Scheduler;
inline constexpr int kHeapRings = 4;  // per run: one per scope depth, min(depth, 3)

class TaskGraph {
 public:
  TaskGraph(const WorkerConfig& cfg, EngineLock& lock) : cfg_(cfg), lock_(lock) {}
  void set_scheduler(Scheduler* s) { scheduler_ = s; }

  // init() / close(): every slot's heap rings, mapped before the children are forked.
  Status map_rings();
  void unmap_rings();

  // --- runs (mu held) ---
  // A new run with a free slot, or nullptr when every slot is taken (the
  // caller waits on lock.idle and tries again).
  RunState* begin_run(const RunOptions& options);
  // Closes the scopes the orchestration left open (an error when any was).
  void close_scopes(RunState* run);
  // After the run drained: its result. Its slot is free again and its state
  // is freed (every node of it is consumed by then: other runs never hold a
  // node of it, they only follow it).
  RunResult end_run(RunState* run);
  void fail_run(RunState* run, const Status& s);  // an orchestration-side error: the first one is kept
  // The run's function returned and its thread leaves it (RunOptions::
  // detached; scopes closed): from now on finalize() finds its end. True
  // when nothing is pending: it is not detached, the caller ends it.
  bool detach(RunState* run);
  // Detached runs with nothing pending, to end (end_run) and finish; their
  // count is read without the lock by every driver after its round.
  std::vector<RunState*> take_ending();
  uint32_t ending_count() const { return ending_count_.load(std::memory_order_acquire); }
  // Cancels the run (false when it already was): submits are refused, tasks
  // not yet launched end SKIPPED, running ones are stopped by the Scheduler
  // and end STOPPED.
  bool cancel(RunState* run, const std::string& reason);
  // The runs in flight, oldest first; one by id (nullptr once it ended).
  const std::vector<RunState*>& runs() const { return live_; }
  RunState* find_run(uint64_t id) const {
    auto it = states_.find(id);
    return it == states_.end() ? nullptr : it->second.get();
  }
  // Tasks of all runs submitted and not final (read without the lock by spinning waiters).
  uint64_t pending() const { return pending_.load(std::memory_order_acquire); }
  // Runs in flight (read without the lock: how contended the CPUs are), and
  // of those the ones with a thread of their own (not detached).
  uint32_t live_runs() const { return live_count_.load(std::memory_order_relaxed); }
  uint32_t attached_runs() const {
    const uint32_t live = live_count_.load(std::memory_order_relaxed);
    const uint32_t detached = detached_count_.load(std::memory_order_relaxed);
    return live > detached ? live - detached : 0;
  }
  RunProgress progress(const RunState* run) const;
  RunProgress progress() const;  // every run in flight

  // --- submit (mu held) ---
  // Fails the run past Orchestrator::kMaxScopeDepth.
  void scope_begin(RunState* run);
  Status scope_end(RunState* run);
  // The owner of the heap-ring buffer holding [lo, hi), nullptr when the
  // range is not in a heap ring; an error when it is in a ring but freed, or
  // in another run's rings.
  Status buffer_owner(const RunState* run, uint64_t lo, uint64_t hi, TaskNode** owner) const;
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
  Status add_task(RunState* run, const NewTask& t, std::vector<TaskArgs>& members, std::unique_lock<std::mutex>& lk,
                  TaskNode** out);
  Result<ContinuousTensor> alloc_in_scope(RunState* run, const std::vector<uint32_t>& shape, int32_t dtype,
                                          std::unique_lock<std::mutex>& lk);

  // --- completion (mu held) ---
  // The task reached a final state: consumers become ready or are poisoned.
  // A run whose last task it was wakes its thread — at once, or, between
  // defer_drained(true) and take_drained(), once the caller has let the lock
  // go (it calls wake() on what take_drained gave it).
  void finalize(TaskNode* s, Outcome o);
  void defer_drained(bool on) { defer_drained_ = on; }
  void take_drained(std::vector<std::shared_ptr<DrainWaiter>>* out) {
    defer_drained_ = false;
    out->swap(drained_);
  }
  void note_retry(RunState* run) { ++run->result.tasks_retried; }

  // Statistics since init (mu held).
  struct Counters {
    uint64_t runs = 0, succeeded = 0, failed = 0, skipped = 0, stopped = 0;
    LatencyHistogram task_latency;  // submit -> final
  };
  const Counters& counters() const { return counters_; }
  // Bytes in use in ring r, summed over the slots.
  uint64_t ring_used(int r) const;
  // TensorMap entries (statistics: flat across runs).
  size_t tensor_map_entries() const { return tmap_.size(); }

 private:
  struct Slot {
    SharedMapping map;  // kHeapRings rings of heap_ring_bytes, back to back
    L3HeapRing rings[kHeapRings];
    std::deque<TaskNode*> allocs[kHeapRings];  // live allocations per ring, oldest first
    RunState* run = nullptr;
  };
  void queue_end(RunState* run);  // a detached run with nothing pending: to the ending list
  void add_dependency(TaskNode* consumer, TaskNode* producer, bool data);
  void make_ready(TaskNode* s);
  void unref(TaskNode* s);
  void consume(TaskNode* s);
  void reclaim_rings(Slot& slot);
  void forget_allocation(TaskNode* s);
  TaskNode* new_node(RunState* run);
  Status heap_alloc(RunState* run, uint64_t bytes, int ring, std::unique_lock<std::mutex>& lk, uint8_t** ptr,
                    uint64_t* end);
  void wire_member(TaskNode* s, TaskArgs& a, uint8_t*& next_out, bool with_directions);

  const WorkerConfig& cfg_;
  EngineLock& lock_;
  Scheduler* scheduler_ = nullptr;

  std::vector<std::unique_ptr<Slot>> slots_;
  // Live heap-ring allocations of every slot: start address -> (end address, owner).
  std::map<uint64_t, std::pair<uint64_t, TaskNode*>> allocs_;
  L3TensorMap tmap_;
  uint64_t next_task_id_ = 1;
  uint64_t next_run_id_ = 1;
  std::atomic<uint64_t> pending_{0};  // submitted and not final, every run
  std::vector<RunState*> live_;       // runs in flight
  std::atomic<uint32_t> live_count_{0};  // live_.size(), for readers without the lock
  std::atomic<uint32_t> detached_count_{0};               // of those, detached
  std::vector<RunState*> ending_;                         // detached runs with nothing pending, not yet ended
  std::atomic<uint32_t> ending_count_{0};                 // ending_.size()
  std::map<uint64_t, std::unique_ptr<RunState>> states_;  // the runs in flight, by id
  bool defer_drained_ = false;                            // finalize leaves wake-ups in drained_
  std::vector<std::shared_ptr<DrainWaiter>> drained_;     // threads of drained runs, to wake after the lock

  Counters counters_;
};

}  // namespace pto
