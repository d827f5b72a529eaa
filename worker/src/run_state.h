// One run in flight (docs/worker.md, "Runs"): what the TaskGraph keeps per
// run — its options, its heap-ring slot, its scopes and nodes, its result —
// and the Orchestrator its orchestration function receives. Several runs
// share the children, the TensorMap and the ready queues; everything here is
// the run's own. Fields are under the engine lock. The state is freed when
// the run ends (TaskGraph::end_run): no other run holds a node of it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pto/worker.h"
#include "task_node.h"

namespace pto {

// The sleep of a run's thread until its last task is final. Its own lock,
// not the engine's: a thread woken while the driver still holds the engine
// lock would wake only to sleep again on it, so the driver wakes drainers
// once it has let the lock go (TaskGraph::take_drained). Shared, because
// by then the run may have ended and its state be gone.
struct DrainWaiter {
  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
  void wake() {
    {
      std::lock_guard<std::mutex> g(mu);
      woken = true;
    }
    cv.notify_one();
  }
  // Until woken or `timeout` passed; resets the wake-up for the next sleep.
  void sleep(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, timeout, [&] { return woken; });
    woken = false;
  }
};

struct RunState {
  uint64_t id = 0;
  RunOptions options;
  int slot = -1;  // its heap rings (TaskGraph); -1 once it ended
  std::vector<std::vector<TaskNode*>> scopes{1};
  int scope_depth = 0;
  std::deque<std::unique_ptr<TaskNode>> nodes;
  uint64_t unconsumed = 0;  // nodes not consumed yet
  std::atomic<uint64_t> pending{0};  // tasks submitted and not final (read without the lock by a helper's drain)
  // Set while the run's own thread sleeps until pending reaches 0 (a shared
  // condition would wake every run's thread at every run's end); a detached
  // run has no thread and goes to the ending list instead.
  std::shared_ptr<DrainWaiter> drainer;
  RunResult result;
  // Chip tasks (inside its chip-level tasks) submitted and completed by the
  // L2 runtimes, so far: written by the scheduler's driver, read by progress().
  std::atomic<uint64_t> chip_submitted{0}, chip_completed{0};
  std::string cancelled;  // non-empty: cancelled, why
  // Detached (RunOptions::detached): its function returned and no thread
  // waits with it; once pending is 0 it waits in TaskGraph's ending list for
  // whichever thread ends it (`ending`: it is there).
  bool detached = false;
  bool ending = false;
  bool ended = false;
  uint64_t start_ns = 0, deadline_ns = 0;
  std::thread::id thread;  // the thread running its orchestration function
};

}  // namespace pto
