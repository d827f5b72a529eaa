// Asynchronous runs (Worker::submit): a queue of runs and up to
// max_concurrent_runs threads that execute them, started by priority (HIGH
// first) and then in submission order, each calling its run's on_done before
// its handle reports done. Runs that follow each other closely (a remote
// session's tasks) find a thread awake: one idle thread spins spin_us before
// sleeping.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pto/worker.h"

namespace pto {

struct RunHandle::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  RunResult result;
  OrchestrationFunction fn;
  TaskArgs args;
  CallConfig cfg;
  RunOptions options;
  std::function<void(const RunResult&)> on_done;
  // Cancellation reaches the run through its owner once it has begun
  // (run_id), or is remembered until it begins.
  WorkerImpl* owner = nullptr;
  uint64_t run_id = 0;
  bool cancel_requested = false;
  std::string cancel_reason;
};

class RunQueue {
 public:
  using Execute = std::function<RunResult(const std::shared_ptr<RunHandle::State>&)>;
  RunQueue(uint32_t spin_us, int threads, Execute execute)
      : spin_us_(spin_us), max_threads_(threads), execute_(std::move(execute)) {}
  ~RunQueue() { stop(); }

  // Queues a run; a handle that is already done when the queue is stopped.
  RunHandle push(std::shared_ptr<RunHandle::State> st);
  // A queued run that has not started leaves the queue (its handle reports
  // it cancelled); false when it is not queued.
  bool cancel_queued(const std::shared_ptr<RunHandle::State>& st, const std::string& reason);
  // Runs still queued execute first; then the threads end. Idempotent.
  void stop();
  // Forget the threads without joining them (a forked copy of the owner).
  void detach();

 private:
  void main();
  static void finish(const std::shared_ptr<RunHandle::State>& st, RunResult r);

  const uint32_t spin_us_;
  const int max_threads_;
  Execute execute_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<RunHandle::State>> q_;  // by priority, then submission order
  std::atomic<uint32_t> queued_{0};                  // q_.size(), for the threads' spin
  std::atomic<bool> spinning_{false};                // an idle thread is spinning
  std::vector<std::thread> threads_;
  int idle_ = 0;  // threads waiting for a run
  bool stop_ = false;
};

}  // namespace pto
