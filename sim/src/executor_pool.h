// The OS threads that run a simulated chip's core work when the process has
// CPUs to spare (docs/sim.md, "Threads"): a dispatch rings a doorbell (the
// core's id on a lock-free queue) and an executor that spins briefly, then
// parks, picks it up, runs the core, and calls after_run (the chip wakes
// parked schedulers there). Shared by every simulated chip.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace pto2::sim {

class ExecutorPool {
 public:
  // threads > 0; cores bounds how many doorbells can be pending at once.
  ExecutorPool(int threads, int cores, uint32_t spin_us, std::function<void(int)> run);
  ~ExecutorPool();  // stops and joins the threads (after their current core)
  ExecutorPool(const ExecutorPool&) = delete;
  ExecutorPool& operator=(const ExecutorPool&) = delete;

  // Queues core for the next free executor. Called by the scheduler thread
  // that owns the core, only while the core is idle.
  void ring(int core);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void main();
  struct Doorbells;
  std::unique_ptr<Doorbells> doorbells_;
  std::function<void(int)> run_;
  uint64_t spin_ns_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

}  // namespace pto2::sim
