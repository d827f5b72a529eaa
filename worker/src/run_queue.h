// Asynchronous runs (Worker::submit): a queue of runs and the one thread that
// executes them in order, calling each run's on_done before its handle
// reports done. Runs that follow each other closely (a remote session's
// tasks) find the thread awake: it spins spin_us before sleeping.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

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
  std::function<void(const RunResult&)> on_done;
};

class RunQueue {
 public:
  using Execute = std::function<RunResult(const OrchestrationFunction&, const TaskArgs&, const CallConfig&)>;
  RunQueue(uint32_t spin_us, Execute execute) : spin_us_(spin_us), execute_(std::move(execute)) {}
  ~RunQueue() { stop(); }

  // Queues a run; a handle that is already done when the queue is stopped.
  RunHandle push(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                 std::function<void(const RunResult&)> on_done);
  // Runs still queued execute first; then the thread ends. Idempotent.
  void stop();
  // Forget the thread without joining it (a forked copy of the owner).
  void detach();

 private:
  void main();

  const uint32_t spin_us_;
  Execute execute_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<RunHandle::State>> q_;
  std::atomic<uint32_t> queued_{0};  // q_.size(), for the thread's spin
  std::thread thread_;
  bool stop_ = false;
};

}  // namespace pto
