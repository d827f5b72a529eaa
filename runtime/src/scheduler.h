// Scheduler threads (docs/runtime.md §9). Each thread owns a share of the cores
// (AICs and AIVs divided evenly) and loops over four phases:
//   1. completion: poll its busy cores; a finished task releases its consumers
//   2. drain the orchestrator's early-ready queue
//   3. incremental scan: claim newly published root tasks
//   4. dispatch: ready tasks to its idle cores (a core's own cluster's pinned
//      queue first, then the shared queues: own shard first, then steal); a
//      batch descriptor is dispatched once per block; dependency-only tasks
//      complete here without a core
// When a pass finds nothing to do the thread spins for spin_before_park_us,
// then parks until notified (new work, core finished) — never a pure spin.
// Threads stay parked between runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "pto2/runtime.h"
#include "runtime_state.h"

namespace pto2 {

class SchedulerThread {
 public:
  // peers: other scheduler threads exist (a batch's blocks are shared with them).
  SchedulerThread(RuntimeState& state, int index, std::vector<int> cores, bool peers);
  // Schedules until the run is drained or aborted.
  void run_until_drained();
  int core_count() const { return static_cast<int>(cores_.size()); }
  // Moves this thread's profiling records of the last run into *out.
  void take_records(std::vector<TaskRecord>* out) {
    out->insert(out->end(), records_.begin(), records_.end());
    records_.clear();
  }

 private:
  struct Core {
    int id;
    int32_t type;
    int32_t cluster;  // -1 on a platform without clusters
    uint64_t running;
    DispatchPayload payload;
    uint64_t dispatch_ns = 0;
  };
  void record(uint64_t id, const Core* core, uint64_t dispatch_ns);
  // The next task and block for an idle core, or false.
  bool take(Core& c, bool* empty, uint64_t* carry, uint64_t* id, int32_t* block);
  bool step();
  void observe(uint64_t id);  // RuntimeState::observer, before completing
  bool poll_completions();
  bool drain_orchestrator_queue();
  bool scan();
  bool dispatch();

  RuntimeState& s_;
  int index_;
  bool peers_;
  std::vector<Core> cores_;
  // Indices into cores_ of the cores running a task: a completion pass looks
  // at these, not at every core (a thread owns up to every core of the chip,
  // and a pass over all of them cost more than a task in a chain).
  std::vector<int> busy_;
  std::vector<TaskRecord> records_;  // profiling
};

class Scheduler {
 public:
  Scheduler(RuntimeState& state, int threads);
  ~Scheduler();  // stops and joins the threads
  int threads() const { return static_cast<int>(workers_.size()); }

  // Wakes every thread for a new run.
  void start_run();
  // Waits until every thread has finished the run. on_slice() runs between
  // parks; returning false gives up (the caller aborts the run).
  bool wait_run_finished(const std::function<bool()>& on_slice);
  // After wait_run_finished: every thread's profiling records of the run.
  void take_records(std::vector<TaskRecord>* out);
  // After an abandoned run: tells every thread to stop and detaches them
  // instead of joining (one may be stuck in a kernel). The caller must keep
  // this object and the RuntimeState alive for good.
  void abandon();

 private:
  void thread_main(int index);
  RuntimeState& s_;
  std::vector<std::unique_ptr<SchedulerThread>> workers_;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> run_generation_{0};
  std::atomic<int> threads_done_{0};
  std::atomic<bool> shutdown_{false};
};

}  // namespace pto2
