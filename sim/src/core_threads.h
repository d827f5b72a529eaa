// Threads of their own for the cores that run pipe tasks (docs/sim.md,
// "Pipes"). A kernel that pushes to or pops from a pipe waits for its peer on
// another core of the cluster, so it cannot run inline on a scheduler thread
// or on a shared executor, where its peer might be queued behind it. The first
// pipe task a core runs starts that core's thread; between tasks it spins
// briefly, then parks. At most one per core, only for cores that used a pipe.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "pto/base/event_count.h"

namespace pto2::sim {

class CoreThreads {
 public:
  CoreThreads(int cores, std::function<void(int)> run, uint32_t spin_us);
  ~CoreThreads();  // stops and joins the threads (after their current task)
  // Runs run(core) on the core's thread. Called by the one scheduler thread
  // that owns the core, only while the core is idle.
  void start(int core);
  int started() const { return started_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::thread thread;
    std::atomic<bool> doorbell{false};
    pto::EventCount ec;
  };
  void main(int core);

  std::function<void(int)> run_;
  uint64_t spin_ns_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};
};

}  // namespace pto2::sim
