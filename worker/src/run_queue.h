// Asynchronous runs (Worker::submit): a queue of runs and up to
// max_concurrent_runs threads that execute them, started by priority (HIGH
// first) and then in submission order, each calling its run's on_done before
// its handle reports done. Runs that follow each other closely (a remote
// session's tasks) find a thread awake: one idle thread spins spin_us before
// sleeping. A detached run (RunOptions::detached) needs no thread once its
// orchestration function returned: whoever ends it finishes its handle, and
// the thread that ends a run starts the queued detached runs behind it
// (pop_detached) in the slot it freed. A queue thread starts one only when a
// slot is free, else leaves it at the front and waits for a slot to come free
// (docs/worker.md, "Detached runs"). Runs of a batch (RunOptions::batch)
// take at most batch_width threads at once; a run of a batch that wide waits
// at the front, holding back the runs behind it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
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
  // (run_id); before, it is remembered and the run never begins
  // (WorkerImpl::begin reads it under mu before every try for a slot).
  WorkerImpl* owner = nullptr;
  uint64_t run_id = 0;
  bool cancel_requested = false;
  std::string cancel_reason;
  bool detached = false;  // options.detached: ended by whoever drives its last task
  // Its run ended, or will never begin: the result is known, on_done may
  // still be to run - for a run whose end waits for the finisher, long
  // after. A cancel then does nothing and says so: neither run_id (cleared,
  // with this set in the same hold of mu) nor done (not yet) can tell that
  // window from a run that has not started.
  std::atomic<bool> ended{false};
  std::atomic<bool> finished{false};  // done, for a waiter that drives instead of sleeping
  bool starting = false;              // taken from the queue, its start not settled yet (RunQueue's mu)
};

class RunQueue {
 public:
  // A run's handle state, as the queue's callers (and its tests) name it.
  using State = RunHandle::State;
  // The run's result, or nothing for a detached run that started (its end
  // finishes the handle) or that found no free slot (*no_slot).
  using Execute = std::function<std::optional<RunResult>(const std::shared_ptr<RunHandle::State>&, bool* no_slot)>;
  RunQueue(uint32_t spin_us, int threads, Execute execute)
      : spin_us_(spin_us), max_threads_(threads), execute_(std::move(execute)) {}
  ~RunQueue() { stop(); }

  // Queues a run. Refused when the queue is stopped: the result to finish it
  // with (kWorkerClosed), which the caller finishes where on_done may run
  // (WorkerImpl::hand_over: the caller may be driving).
  std::optional<RunResult> push(std::shared_ptr<RunHandle::State> st);
  // A queued run that has not started leaves the queue: the result to finish
  // it with (cancelled), which the caller finishes where on_done may run (it
  // may be driving: WorkerImpl::hand_over); nothing when it is not queued.
  std::optional<RunResult> cancel_queued(const std::shared_ptr<RunHandle::State>& st, const std::string& reason);
  // Runs still queued execute first; then the threads end. Idempotent.
  void stop();
  // Forget the threads without joining them (a forked copy of the owner).
  void detach();
  // No run is queued, nor taken from the queue with its start unsettled
  // (one started now would overtake none).
  bool empty() const { return outstanding_.load(std::memory_order_seq_cst) == 0; }
  // The first queued run if it is a detached one, out of the queue, else
  // null. Until the caller settles it (settle(), put_back()), no later run
  // starts.
  std::shared_ptr<RunHandle::State> pop_detached();
  // A run taken from the queue has its place: a slot, or a turn among the
  // threads waiting for one (WorkerImpl::begin). Idempotent; a no-op for a
  // run that did not come from the queue.
  void settle(const std::shared_ptr<RunHandle::State>& st);
  // A detached run taken from the front that found no free slot: back to the
  // front of its priority. If it was cancelled meanwhile it never starts:
  // the result to finish it with is returned, and the caller finishes it
  // where on_done may run (WorkerImpl::hand_over: the caller may be driving).
  std::optional<RunResult> put_back(std::shared_ptr<RunHandle::State> st);
  // A slot came free: a queue thread waiting for one tries again.
  void slot_freed();
  // Calls on_done, then marks the handle done and wakes its waiters.
  static void finish(const std::shared_ptr<RunHandle::State>& st, RunResult r);
  // True inside an on_done of a run of `w` that finish() called on this
  // thread: WorkerImpl::close() refuses there (it waits for every run to be
  // finished, that one among them).
  static bool in_on_done_of(const WorkerImpl* w);
  // The result of a run cancelled before it began (kWorkerCancelled,
  // STOPPED), here and in WorkerImpl::begin.
  static RunResult cancelled_before_start(const std::string& reason);

 private:
  void main();
  // put_back with mu_ held; false (nothing queued) when it was cancelled
  // (read before, without mu_): the caller finishes it. mu_ is a leaf lock:
  // nothing is locked under it (the engine's lock is taken before it, and
  // a handle's before the engine's).
  bool put_back_locked(const std::shared_ptr<RunHandle::State>& st, bool cancelled);
  // The reason of a cancel requested before the run began, copied under the
  // handle's lock (a second cancel may write it meanwhile); none if none was.
  static std::optional<std::string> cancel_requested(const std::shared_ptr<RunHandle::State>& st);
  void settle_locked(RunHandle::State& st);

  // The front run belongs to a batch with batch_width runs in flight: it
  // waits, and so does what is queued behind it.
  bool front_waits_locked() const;
  // A run taken from the queue has ended (or went back): one fewer of its
  // batch in flight.
  void batch_done_locked(const RunHandle::State& st);

  const uint32_t spin_us_;
  const int max_threads_;
  Execute execute_;
  std::mutex mu_;
  // Idle threads wait on cv_ for a run they can take; all wait for the same
  // thing, so one notified is enough. A thread holding a run that found no
  // slot waits on slot_cv_.
  std::condition_variable cv_;
  std::condition_variable slot_cv_;
  std::deque<std::shared_ptr<RunHandle::State>> q_;  // by priority, then submission order
  std::atomic<uint32_t> queued_{0};                  // q_.size(), for the threads' spin
  // Queued runs plus those taken with their start unsettled: one counter,
  // so that empty() never reads a run moving between the two as gone.
  std::atomic<uint32_t> outstanding_{0};
  int starting_ = 0;  // runs taken with their start unsettled: nobody takes another meanwhile
  std::atomic<bool> spinning_{false};  // an idle thread is spinning
  std::vector<std::thread> threads_;
  int idle_ = 0;           // threads waiting for a run
  int slot_waiters_ = 0;   // threads waiting for a slot for the detached run at the front
  uint64_t slot_gen_ = 0;  // slots freed so far
  bool stop_ = false;
  // Runs of each bounded batch (RunOptions::batch_width) taken from the queue
  // and not yet ended; no entry for a batch with none.
  std::unordered_map<uint64_t, uint32_t> batch_running_;
};

// Finishes the handles (on_done) of detached runs that the Worker's
// scheduler thread ended: on_done may commit a record or register a callable,
// which must not stall, or wait for, the thread that drives the Worker. One
// thread, started with the first handle; stop() finishes what is left.
class RunFinisher {
 public:
  ~RunFinisher() { stop(); }
  void push(std::shared_ptr<RunHandle::State> st, RunResult r);
  void stop();
  void detach() {  // a forked copy of the owner: the thread does not exist here
    if (thread_.joinable()) thread_.detach();
  }

 private:
  void main();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<RunHandle::State>, RunResult>> q_;
  std::thread thread_;
  bool stop_ = false;
};

}  // namespace pto
