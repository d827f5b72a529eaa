// State shared by the orchestrator and the scheduler threads of one Runtime,
// and the task life-cycle transitions both sides perform:
//
//   submit (orchestrator) ──► READY ──dispatch──► running ──► COMPLETED ──► CONSUMED ──► retired
//
//   * fanin_pending: producers still running, +1 while the submit is in
//     progress; whoever brings it to 0 makes the task ready.
//   * refs (fanout references): +1 owning scope, +1 own completion, +1 per
//     consumer linked; whoever brings it to 0 marks the task CONSUMED and
//     advances last_task_alive (which frees its slot, heap and dep entries).
// docs/runtime.md describes the protocol and why each count is exact.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "dep_pool.h"
#include "event_count.h"
#include "pinned_queues.h"
#include "pto2/config.h"
#include "pto2/platform.h"
#include "pto2/runtime.h"
#include "ready_queue.h"
#include "shared_region.h"
#include "task_ref.h"
#include "task_ring.h"

namespace pto2 {

inline constexpr int kReadyQueueTypes = 3;  // CUBE, VECTOR, dependency-only

// Dep-list links name the pool (ring) and the entry: link = index << 2 | ring.
// 0 is the NULL sentinel (entry 0 of ring 0).
inline int32_t make_dep_link(uint32_t ring, int32_t index) { return (index << 2) | static_cast<int32_t>(ring); }

// The per-task fanout lock (docs/runtime.md §6). Held for a few instructions by the
// orchestrator (linking a consumer) or a scheduler (completing the task), so
// a waiter only spins.
inline void lock_fanout(TaskSlotState& st) {
  while (st.fanout_lock.exchange(1, std::memory_order_acquire) != 0) {
    while (st.fanout_lock.load(std::memory_order_relaxed) != 0) cpu_relax();
  }
}
inline void unlock_fanout(TaskSlotState& st) { st.fanout_lock.store(0, std::memory_order_release); }

class RuntimeState : public Wakeup {
 public:
  RuntimeState(const RuntimeConfig& config, Platform& platform);
  ~RuntimeState() override;
  bool valid() const { return region.valid() && heap_base != nullptr; }

  // Wakeup: a core finished. Wakes every parked scheduler: only the one
  // owning that core can handle it.
  void notify() override { sched_ec.notify(); }
  // Wakeup: the platform found the run broken (a pipe nobody serves). The
  // first fault of a run becomes its error when it ends.
  void fault(int32_t code, const std::string& message) override;
  // The run's platform fault, if any (after the run drained), and its reset.
  Status take_fault();

  // New work any scheduler can take (a published task, a ready task). A
  // scheduler that is spinning will find it, so the futex wake — a syscall on
  // the publisher's path — is only paid when all of them are parked.
  // Ordering: the publisher's store, then a seq_cst fence (or RMW), then the
  // load of spinning; a scheduler leaves the spinning state with a seq_cst
  // RMW before its last look for work (see SchedulerThread::run_until_drained).
  void notify_work() {
#if defined(PTO_UNDER_TSAN)
    if (spinning.fetch_add(0, std::memory_order_acq_rel) > 0) return;
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (spinning.load(std::memory_order_relaxed) > 0) return;
#endif
    sched_ec.notify();
  }
  // Scheduler threads looking for work without parking. Written whenever a
  // scheduler goes idle or busy: its own line (the hot atomics below each
  // have one too, so that one side's writes do not evict what the other
  // side reads on every task).
  alignas(64) std::atomic<int32_t> spinning{0};

  const DepListEntry& dep_entry(int32_t link) { return dep_entries[link & 3][link >> 2]; }
  TaskRing& ring_of(uint64_t id) { return rings[task_ring(id)]; }
  TaskSlotState& slot_of(uint64_t id) { return ring_of(id).slot_state(task_seq(id)); }
  TaskDescriptor& descriptor_of(uint64_t id) { return ring_of(id).descriptor(task_seq(id)); }

  // Task finished executing (called by the scheduler that saw it finish, or
  // for a dependency-only task by the scheduler that popped it).
  void complete(uint64_t id, int shard_hint);
  // Drops one fanout reference.
  void release(uint64_t id);
  // The task the orchestrator awaits (kNoTask: none), read after a seq_cst
  // fence (an RMW under TSan, which does not model fences). Ordering: the
  // caller's state change (a completion, a retirement), then this; the
  // waiter sets awaited_task with a seq_cst RMW, prepares its park with
  // another, then reads the state — one of the two sees the other's change
  // (the same argument as EventCount's; a miss would cost one 1 ms park
  // slice, never a hang).
  uint64_t awaited_after_fence() {
#if defined(PTO_UNDER_TSAN)
    return awaited_task.fetch_add(0, std::memory_order_acq_rel);
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return awaited_task.load(std::memory_order_relaxed);
#endif
  }
  // Queues a task whose producers have all completed.
  void push_ready(uint64_t id, int shard_hint);
  // Puts a ready task on its queue: its cluster's pinned queue, or the
  // shared queue of its worker type.
  void enqueue_ready(uint64_t id, int shard_hint) {
    const TaskDescriptor& d = descriptor_of(id);
    if (d.cluster_id >= 0 && d.worker_type != kWorkerDummy)  // a no-op runs on no core
      push_pinned(d.cluster_id, d.worker_type, id);
    else
      ready[d.worker_type]->push(shard_hint, id);
  }
  // Only the threads owning the cluster's cores can take a pinned task, and
  // the one that found it ready may own none of them: wake them all.
  void push_pinned(int cluster, int type, uint64_t id) {
    pinned->push(cluster, type, id);
    sched_ec.notify();
  }

  // True when the orchestration is done and every ring has retired everything.
  bool run_drained();

  const RuntimeConfig config;
  Platform& platform;
  SharedRegion region;
  TaskRing rings[kMaxRings];
  DepListEntry* dep_entries[kMaxRings] = {};
  uint8_t* heap_base = nullptr;  // kMaxRings heaps of config.heap_size each
  uint64_t heap_mapping_bytes = 0;

  std::unique_ptr<ShardedReadyQueue> ready[kReadyQueueTypes];
  std::unique_ptr<MpmcQueue> orch_ready;  // early-ready tasks found at submit (step 7)

  // Clusters (docs/runtime.md §15): the platform's, their pinned ready
  // queues, and per cluster the pinned tasks not yet completed (the
  // orchestrator counts up at submit, completion counts down).
  const int clusters;
  std::unique_ptr<PinnedReadyQueues> pinned;
  std::unique_ptr<std::atomic<int64_t>[]> cluster_outstanding;

  alignas(64) EventCount sched_ec;  // schedulers park here: new work, core finished, run start/stop
  // The orchestrator parks here: a tail moved, the task it awaits or the
  // last task of a cluster completed.
  alignas(64) EventCount orch_ec;
  // run() parks here while the run drains: a scheduler thread finished it.
  // Its own: parked on orch_ec, a drain was woken by every completion (a
  // futex wake on the scheduler's path per task, when completions woke it).
  alignas(64) EventCount run_ec;

  // Set when a run was abandoned with kernels still executing: the mappings
  // they point into are then leaked rather than unmapped under them.
  bool leak_mappings = false;

  // Read on every task, written rarely: between runs (observer, abort when a
  // run is given up) and around a pto2_rt_read_tensor wait (awaited_task).
  alignas(64) TaskObserver* observer = nullptr;  // set between runs (Runtime::set_task_observer)
  std::atomic<uint32_t> abort{0};                // stop the run's scheduler loops now
  std::atomic<uint64_t> awaited_task{kNoTask};   // the task the orchestrator waits for (read_tensor)
  // Runtime::progress(): the completed count when the run began ...
  std::atomic<uint64_t> run_completed_base{0};
  // ... and the run's submits (the orchestrator mirrors its own count with a
  // relaxed store: a plain move on the submit path).
  alignas(64) std::atomic<uint64_t> run_submitted{0};
  alignas(64) std::atomic<uint64_t> completed_count{0};  // progress measure for liveness checks

 private:
  std::mutex fault_mu_;
  Status fault_;
};

}  // namespace pto2
