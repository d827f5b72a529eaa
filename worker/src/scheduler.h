// The Scheduler (reference design: one progress thread per Worker): the ready
// queues, the drive token, the dispatch policy, the progression of control
// requests, and the children's liveness and replacement. One thread — the
// scheduler thread, or a run's thread while it drives its own drain — holds
// the drive token at a time and is the only parent-side writer of every
// mailbox. A round collects completions, advances control requests,
// dispatches ready tasks to endpoints with room (fair queues, fair_queue.h:
// one per worker for pinned next-level tasks, shared ones otherwise; a group
// launches only when it has as many workers with room as members) and, every
// millisecond, checks liveness (exit, heartbeat), task timeouts and run
// deadlines, and forks replacements for dead children at once. With nothing
// to do the driver spins, then parks on the doorbell that children and the
// orchestrators ring; while tasks are in flight it parks at most 1 ms.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control_request.h"
#include "endpoint.h"
#include "engine_lock.h"
#include "fair_queue.h"
#include "task_node.h"

namespace pto {

class ChildPool;
class TaskGraph;

class Scheduler {
 public:
  Scheduler(const WorkerConfig& cfg, EngineLock& lock, ChildPool& pool, TaskGraph& graph);
  ~Scheduler() { stop(); }

  using ChildMain = std::function<void(Endpoint& ep, bool forked_by_main_thread)>;
  // Sizes the per-worker queues (after the pool made its endpoints); `main`
  // is what a replacement child runs.
  void attach_endpoints(size_t next_level_workers, ChildMain main) {
    next_pinned_ = std::vector<FairQueue>(next_level_workers);
    child_main_ = std::move(main);
  }
  // The scheduler thread. stop() joins it; while it is stopped nothing else
  // of the engine runs a thread (children may be forked).
  void start();
  void stop();
  void detach() {  // a forked copy of the owner: the thread does not exist here
    if (thread_.joinable()) thread_.detach();
  }

  // --- the task graph's side (mu held) ---
  // A task whose producers are all final and that is not poisoned.
  void enqueue(TaskNode* s);
  // Every queued task of a (cancelled) run, out of the queues.
  std::vector<TaskNode*> take_queued(const RunState* run);
  // Stops the running tasks of a (cancelled) run: the driver, in its next
  // round, kills their children (replaced at once) and abandons remote ones;
  // each ends STOPPED with the run's cancellation.
  void stop_running(const RunState* run);
  uint64_t queue_depth() const;
  uint64_t in_flight() const { return running_.load(std::memory_order_relaxed); }

  // --- control requests (mu held) ---
  void add_control(std::shared_ptr<ControlRequest> c);
  // Fails every queued request and drops what children owe (the Worker is closing).
  void fail_controls(const std::string& why);
  // What an unfinished request still waits for, naming each child and why
  // (for the error of a request whose caller gave up).
  std::string pending_targets(const ControlRequest& c) const;
  int controls_in_flight = 0;  // requests whose caller still waits (mu)

  // A run's thread drives the run to its end itself (no hand-off to the
  // scheduler thread and back) until the run has no pending task; false
  // (at once) when another run's thread is already driving.
  bool help_drain(const RunState* run);
  // The same for any waiter (RunHandle::wait of a detached run): drives until
  // finished() or the deadline (steady clock, ns); false at once when another
  // thread is helping.
  bool help_until(const std::function<bool()>& finished, uint64_t deadline_ns);
  // True on a thread inside a driving loop (the scheduler thread, a helper),
  // where a detached run's function may run (WorkerImpl::start_queued).
  static bool on_driving_thread();
  static bool on_scheduler_thread();  // the Worker's own scheduler thread (any Worker's)
  // For such a thread that must wait inside the engine (heap-ring space): one
  // round of driving instead of sleeping, since what it waits for may need
  // this thread's driving.
  void drive_once();
  // New work for the driver (a submit, a detached run to end): rings the
  // doorbell; with `no_helper_coming`, also wakes the scheduler thread if it
  // stood aside for a helper that has left since. (An attached run's thread
  // drives its own tasks once its function returns: waking the scheduler
  // thread for them only puts it on a CPU a child needs.)
  void kick(bool no_helper_coming);
  // While one lives, submits on this thread do not kick(): the thread drives
  // next (RunOptions::waiter_drives, a detached run started on its waiter's
  // thread), and a wake-up of the scheduler thread per call was all they
  // bought. A helper that stops driving with work left wakes it instead.
  struct QuietSubmits {
    QuietSubmits();
    ~QuietSubmits();
    QuietSubmits(const QuietSubmits&) = delete;
    QuietSubmits& operator=(const QuietSubmits&) = delete;
  };
  static bool quiet_submits();
  // What every driver calls after its round while detached runs wait to be
  // ended (WorkerImpl::finish_detached), without the lock or the drive token.
  void set_run_finisher(std::function<void()> f) { finish_runs_ = std::move(f); }
  // What a helper calls after each round that made progress (false) and
  // before it parks (true): WorkerImpl hands the other runs it ended to the
  // finisher instead of keeping them until it stops driving.
  void set_helper_hook(std::function<void(bool parking)> f) { helper_hook_ = std::move(f); }

  // --- called by the transports (mu held) ---
  // `log_untouched`: the child answered that the task appended nothing to
  // its run's log (RunResult::log_written stays false unless another did).
  void complete_member(Endpoint& ep, TaskNode* s, Outcome o, const std::string& message, bool log_untouched = false);
  // The child is gone: fail what it held (an answer it wrote before dying still counts).
  void mark_dead(Endpoint& ep, const std::string& why, bool reaped);
  // Kills the child, reaps it (bounded), fails what it held.
  void endpoint_failed(Endpoint& ep, const std::string& why);
  uint64_t task_timeout_ns(const TaskNode& s) const;  // CallConfig.timeout_ms, else task_timeout_ms
  void record_round_trip(bool remote, uint64_t ns) { (remote ? remote_round_trip_ : mailbox_round_trip_).record(ns); }

  // Statistics (mu held).
  const LatencyHistogram& mailbox_round_trip() const { return mailbox_round_trip_; }
  const LatencyHistogram& remote_round_trip() const { return remote_round_trip_; }
  uint64_t task_retries() const { return task_retries_; }

 private:
  struct Plan {
    Endpoint* ep;
    TaskNode* s;
    int member;
    uint64_t seq;  // remote endpoints: the dispatch number
  };

  void drive_until(const std::function<bool()>& finished, bool scheduler);
  bool drive_round();
  bool try_drive();
  uint64_t spin_budget_ns() const;
  bool has_work_in_flight() const;  // mu held
  bool work_waiting() const;        // without the lock: anything a stood-aside scheduler thread should take
  bool poll_completions();
  // Control requests (scheduler_controls.cpp, mu held unless noted).
  bool progress_controls();  // takes mu
  bool progress_owed();
  void send_control(Endpoint& ep, ControlOp op, const Digest& digest, const std::vector<uint8_t>& payload);
  void drop_owed(Endpoint& ep);
  bool finish_control(ControlRequest& c);
  void check_children(uint64_t now);  // mu held: exits, heartbeats, timeouts, deadlines
  void replace_children(uint64_t now);  // mu held: forks replacements, watches their start
  // Dispatch (drive-token holder; takes mu for the planning, dispatches without it).
  bool dispatch_ready();
  bool fail_unlaunchable();                          // mu held
  void assign(Endpoint* ep, TaskNode* s, int member);  // mu held
  void drain_queue(FairQueue& q, std::vector<std::unique_ptr<Endpoint>>& eps);  // mu held
  bool idle(const Endpoint* ep) const;                                          // mu held
  void pop(FairQueue& q);                                                       // mu held

  const WorkerConfig& cfg_;
  EngineLock& lock_;
  ChildPool& pool_;
  TaskGraph& graph_;

  // Ready queues (mu); queued_ is written under mu and read without it by a spinning driver.
  FairQueue next_any_, sub_q_;
  std::vector<FairQueue> next_pinned_;
  ChildMain child_main_;
  std::atomic<uint64_t> queued_{0};
  std::atomic<uint64_t> running_{0};       // members on endpoints
  std::atomic<uint64_t> running_subs_{0};  // of which on sub workers
  std::deque<std::shared_ptr<ControlRequest>> controls_;
  std::atomic<uint32_t> controls_queued_{0};  // controls_.size()
  std::atomic<uint32_t> owed_{0};             // entries of every endpoint's `owed` (written under mu)

  LatencyHistogram mailbox_round_trip_, remote_round_trip_;  // mu
  uint64_t task_retries_ = 0;                                // mu

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> driving_{false};  // the drive token
  // Driver side of stop_running(): what the driver does when asked (mu taken).
  void stop_cancelled_runs();
  void stop_running_now(const RunState* run, const std::string& why);  // mu held
  std::atomic<bool> stops_requested_{false};
  std::atomic<uint32_t> helper_{0};   // 1 while a run's thread drives its own drain
  std::atomic<uint32_t> standing_aside_{0};  // 1 while the scheduler thread sleeps on helper_
  std::function<void()> finish_runs_;
  std::function<void(bool)> helper_hook_;
  // Drive-token holder only.
  uint64_t last_check_ns_ = 0;
  std::vector<Plan> plan_;
  std::vector<Endpoint*> picked_;
};

}  // namespace pto
