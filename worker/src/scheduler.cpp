// The Scheduler (scheduler.h): the driver's rounds, dispatch, completions and
// liveness (control requests: scheduler_controls.cpp).
#include "scheduler.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "child_pool.h"
#include "engine_log.h"
#include "task_graph.h"

namespace pto {

namespace {
thread_local int tl_driving = 0;                // drive_until frames on this thread
thread_local bool tl_scheduler_thread = false;  // this is a Worker's scheduler thread
thread_local int tl_quiet = 0;                  // QuietSubmits alive on this thread
}  // namespace

Scheduler::QuietSubmits::QuietSubmits() { ++tl_quiet; }
Scheduler::QuietSubmits::~QuietSubmits() { --tl_quiet; }
bool Scheduler::quiet_submits() { return tl_quiet > 0; }

Scheduler::Scheduler(const WorkerConfig& cfg, EngineLock& lock, ChildPool& pool, TaskGraph& graph)
    : cfg_(cfg), lock_(lock), pool_(pool), graph_(graph) {}

void Scheduler::start() {
  stop_.store(false, std::memory_order_release);
  thread_ = std::thread([this] {
    tl_scheduler_thread = true;
    drive_until([this] { return stop_.load(std::memory_order_acquire); }, true);
  });
}

void Scheduler::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  if (SharedDoorbell* b = pool_.bell()) b->ring();
  thread_.join();
}

// --- queues (mu held) ---------------------------------------------------------

void Scheduler::enqueue(TaskNode* s) {
  queued_.fetch_add(1, std::memory_order_release);
  if (!s->next_level) sub_q_.push_back(s);
  else if (s->blobs.size() == 1 && s->pinned[0] >= 0) next_pinned_[s->pinned[0]].push_back(s);
  else next_any_.push_back(s);
}

std::vector<TaskNode*> Scheduler::take_queued(const RunState* run) {
  std::vector<TaskNode*> out;
  auto take = [&](FairQueue& q) {
    std::vector<TaskNode*> t = q.take_run(run);
    out.insert(out.end(), t.begin(), t.end());
  };
  take(next_any_);
  take(sub_q_);
  for (auto& q : next_pinned_) take(q);
  queued_.fetch_sub(out.size(), std::memory_order_release);
  return out;
}

// The driver stops them (next round): only the driver writes an endpoint's
// running task, which it reads without the lock.
void Scheduler::stop_running(const RunState*) {
  stops_requested_.store(true, std::memory_order_release);
  if (SharedDoorbell* bell = pool_.bell()) bell->ring();
}

void Scheduler::stop_cancelled_runs() {
  std::lock_guard<std::mutex> g(lock_.mu);
  for (RunState* run : std::vector<RunState*>(graph_.runs()))
    if (!run->cancelled.empty()) stop_running_now(run, "cancelled: " + run->cancelled);
}

void Scheduler::stop_running_now(const RunState* run, const std::string& why) {
  pool_.for_each([&](Endpoint& ep) {
    if (ep.is_remote()) {  // a remote task cannot be killed from here: abandoned, its credit held until the peer answers
      for (auto& f : ep.inflight)
        if (f.s && f.s->run == run) {
          TaskNode* s = f.s;
          f.s = nullptr;
          ep.link->abandon(f.seq);
          complete_member(ep, s, Outcome::STOPPED, why);
        }
      return;
    }
    if (!ep.running || ep.running->run != run) return;
    TaskNode* s = ep.running;
    ep.running = nullptr;
    endpoint_failed(ep, fmt::format("was stopped: its task {} was cancelled", s->id));
    complete_member(ep, s, Outcome::STOPPED, why);
  });
}

uint64_t Scheduler::queue_depth() const {
  uint64_t n = next_any_.size() + sub_q_.size();
  for (const auto& q : next_pinned_) n += q.size();
  return n;
}

// --- driving --------------------------------------------------------------------

bool Scheduler::has_work_in_flight() const { return running_ > 0 || !controls_.empty() || owed_ > 0; }

// One round of driving: completions, control requests, dispatch, and (every
// millisecond) child liveness and timeouts. Only the holder of the drive
// token runs it, so each mailbox has one writer on the parent side.
bool Scheduler::drive_round() {
  if (stops_requested_.exchange(false, std::memory_order_acq_rel)) stop_cancelled_runs();
  bool progressed = poll_completions();
  progressed |= progress_controls();
  progressed |= dispatch_ready();
  const uint64_t now = now_ns();
  if (now - last_check_ns_ > 1'000'000) {
    check_children(now);
    last_check_ns_ = now;
  }
  return progressed;
}

bool Scheduler::try_drive() {
  bool expected = false;
  return driving_.compare_exchange_strong(expected, true, std::memory_order_acquire);
}

// How long to spin before parking, from what is in flight: a native sub task
// is short, so its completion is worth catching without a wake-up (spinning
// longer than one cross-CPU wake-up, or every task would pay two); chip and
// L3 children run threads of their own, and a parent spinning through their
// whole task would take the CPU they need, but a short spin (a fifth of the
// budget) still catches a tiny chip task's completion: without it every
// chip task paid a parent wake-up (an empty one took 14.9 us instead of
// ~2 us on 2 vCPUs); with nothing in flight a short spin catches the next
// submit. With several runs in flight the CPUs are wanted by their threads
// and children (every run thread would otherwise pay for the spinner): no spin.
// Detached runs have no thread: they do not count.
uint64_t Scheduler::spin_budget_ns() const {
  const uint64_t spin_ns = uint64_t(cfg_.spin_us) * 1000;
  // With several runs with threads of their own in flight, those threads and
  // the children want the CPUs - but a sub task's completion is coming, and
  // parking for it costs a wake-up per task (docs/worker.md, "Waiting").
  const bool several = graph_.attached_runs() > 1;
  if (running_subs_.load(std::memory_order_relaxed) > 0) return several ? spin_ns : 4 * spin_ns;
  if (several) return 0;
  if (running_.load(std::memory_order_relaxed) > 0) return spin_ns / 5;
  return spin_ns;
}

bool Scheduler::on_driving_thread() { return tl_driving > 0; }
bool Scheduler::on_scheduler_thread() { return tl_scheduler_thread; }

void Scheduler::drive_once() {
  bool progressed = false;
  if (try_drive()) {
    progressed = drive_round();
    driving_.store(false, std::memory_order_release);
  }
  if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// The driving loop of the scheduler thread (until stop()) and of a helper
// (run()'s thread during its drain, a RunHandle::wait()er; until finished).
// The scheduler thread stands aside while a helper drives, so they never
// compete for CPUs.
void Scheduler::drive_until(const std::function<bool()>& finished, bool scheduler) {
  struct Driving {
    Driving() { ++tl_driving; }
    ~Driving() { --tl_driving; }
  } driving;
  SharedDoorbell* bell = pool_.bell();
  // A helper polls: children's answers need not wake the parked scheduler
  // thread (SharedDoorbell::ring_answer). Cleared whenever it parks or leaves.
  struct Watching {
    SharedDoorbell* bell;
    explicit Watching(SharedDoorbell* b) : bell(b) { set(true); }
    ~Watching() { set(false); }
    void set(bool on) const {
      if (bell) bell->watched.store(on ? 1 : 0, std::memory_order_seq_cst);
    }
  };
  std::optional<Watching> watching;
  if (!scheduler) watching.emplace(bell);
  uint64_t idle_since = 0;
  uint32_t spins = 0;
  while (!finished()) {
    if (uint32_t helpers = scheduler ? helper_.load(std::memory_order_acquire) : 0; helpers != 0) {
      // Announced before the helper_ load the futex makes: a helper that
      // leaves, or a kick() after it left, sees it and wakes this thread.
      standing_aside_.store(1, std::memory_order_seq_cst);
      futex_wait_shared(&helper_, helpers, 1'000'000);
      standing_aside_.store(0, std::memory_order_relaxed);
      idle_since = 0;
      continue;
    }
    bool progressed = false;
    if (try_drive()) {
      progressed = drive_round();
      driving_.store(false, std::memory_order_release);
    }
    if (graph_.ending_count() != 0 && finish_runs_) {
      finish_runs_();
      progressed = true;
    }
    if (progressed) {
      idle_since = 0;
      if (!scheduler && helper_hook_) helper_hook_(false);
      continue;
    }
    const uint64_t now = now_ns();
    if (idle_since == 0) idle_since = now;
    if (now - idle_since < spin_budget_ns()) {
      for (int i = 0; i < 16; ++i) spin_step(spins);
      continue;
    }
    if (!scheduler && helper_hook_) helper_hook_(true);
    if (watching) watching->set(false);  // before prepare(): an answer from here on rings
    const uint32_t key = bell->prepare();
    bool again = false;
    if (try_drive()) {
      again = drive_round();
      driving_.store(false, std::memory_order_release);
    }
    again |= graph_.ending_count() != 0;
    if (again || finished() || (scheduler && helper_.load(std::memory_order_acquire))) {
      bell->cancel();
      if (watching) watching->set(true);
      idle_since = 0;
      continue;
    }
    bool busy;
    {
      std::lock_guard<std::mutex> g(lock_.mu);
      busy = has_work_in_flight();
    }
    // Parked at most 1 ms while anything is in flight: liveness and timeouts.
    const bool rung = bell->commit(key, busy || !scheduler ? 1'000'000 : 100'000'000);
    if (watching) watching->set(true);
    // A park that ended for its timeout, nothing rung, does not spin again:
    // the next round looks once and parks. Spinning spin_us after every
    // 100 ms timeout cost an idle ptod (spin_us 500) 0.5% of a CPU; after
    // every 1 ms timeout while a long task ran, 4 x spin_us per 1 ms park
    // took the CPU from the children. What comes rings: a child's answer
    // (even while a helper polls, it moves the key), a submit, a control; a
    // quiet submit's own thread drives it, or kicks when another helps
    // (WorkerImpl::wait).
    if (rung) idle_since = 0;
  }
}

// run()'s thread, once the orchestration returned, drives the run to its end
// itself: the completion that ends the run then wakes (or is seen by) the
// thread that waits for it, instead of passing through the scheduler thread
// and a condition variable (two wake-ups). One helper at a time: with several
// runs in flight, the others would only spin for the drive token and take
// the CPUs the children need; they sleep on their run's DrainWaiter instead
// (false returned), woken by whoever drives their run's last completion.
bool Scheduler::help_drain(const RunState* run) {
  return help_until([run] { return run->pending.load(std::memory_order_acquire) == 0; }, UINT64_MAX);
}

bool Scheduler::help_until(const std::function<bool()>& finished, uint64_t deadline_ns) {
  uint32_t none = 0;
  if (!helper_.compare_exchange_strong(none, 1, std::memory_order_seq_cst)) return false;
  drive_until([&] { return finished() || (deadline_ns != UINT64_MAX && now_ns() >= deadline_ns); }, false);
  helper_.store(0, std::memory_order_seq_cst);
  // The scheduler thread takes over only what is left: woken for nothing, it
  // would take the CPU of the child that runs the next run's task. It may be
  // standing aside, or parked on the doorbell (a quiet submit rang nothing).
  if (work_waiting()) {
    if (standing_aside_.load(std::memory_order_seq_cst))
      futex_wake_shared(&helper_, 1);
    else if (SharedDoorbell* bell = pool_.bell())
      bell->ring();
  }
  return true;
}

bool Scheduler::work_waiting() const {
  return running_.load(std::memory_order_seq_cst) > 0 || queued_.load(std::memory_order_seq_cst) > 0 ||
         controls_queued_.load(std::memory_order_seq_cst) > 0 || owed_.load(std::memory_order_seq_cst) > 0 ||
         graph_.ending_count() > 0 || stops_requested_.load(std::memory_order_seq_cst);
}

void Scheduler::kick(bool no_helper_coming) {
  if (SharedDoorbell* bell = pool_.bell()) bell->ring();
  if (!no_helper_coming) return;
  // The work was published before (queued_ under the lock); a leaving helper
  // either sees it (work_waiting) or this thread sees the helper gone.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (helper_.load(std::memory_order_seq_cst) == 0 && standing_aside_.load(std::memory_order_seq_cst))
    futex_wake_shared(&helper_, 1);
}

// --- completions and liveness -------------------------------------------------------

// Completions from every endpoint: a look without the lock at each (the
// common case on a spinning driver finds nothing), then one lock for the
// ones that have something.
bool Scheduler::poll_completions() {
  Endpoint* ready[64];
  int n = 0;
  pool_.for_each([&](Endpoint& ep) {
    if (n < 64 && ep.transport->has_completions(ep)) ready[n++] = &ep;
  });
  if (n == 0) return false;
  std::vector<std::shared_ptr<DrainWaiter>> drained;
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    graph_.defer_drained(true);
    for (int i = 0; i < n; ++i) ready[i]->transport->collect(*ready[i]);
    graph_.take_drained(&drained);
  }
  for (auto& w : drained) w->wake();  // their threads find the lock free
  return true;
}

void Scheduler::complete_member(Endpoint& ep, TaskNode* s, Outcome o, const std::string& message, bool log_untouched) {
  if (!log_untouched) s->run->result.log_written = true;
  ++ep.tasks_run;
  --running_;
  if (ep.kind == ChildKind::SUB) --running_subs_;
  // A retryable callable whose worker was lost runs again, on another worker
  // when there is one (dispatch_ready avoids this one).
  // (Not a task on remote buffers: they died with their session.)
  if (o == Outcome::ENDPOINT_FAILURE && s->retries_left > 0 && s->blobs.size() == 1 && s->run->cancelled.empty() &&
      !s->uses_remote_buffer) {
    --s->retries_left;
    s->avoid = ep.index;
    s->pinned[0] = -1;
    s->state = TaskNode::State::kReady;
    graph_.note_retry(s->run);
    ++task_retries_;
    (s->next_level ? next_any_ : sub_q_).push_front(s);
    queued_.fetch_add(1, std::memory_order_release);
    return;
  }
  if (o != Outcome::SUCCESS && s->failure.outcome == Outcome::SUCCESS)
    s->failure = TaskFailure{s->id, s->callable.hex(), ep.label(), o, message};
  if (--s->members_left == 0) graph_.finalize(s, s->failure.outcome);
}

void Scheduler::mark_dead(Endpoint& ep, const std::string& why, bool reaped) {
  if (ep.alive)  // once per death: an operator sees which child went, and why
    engine_log()->warn("{}: {} (pid {}) {}{}; replacing it", cfg_.name, ep.label(), ep.pid, why,
                       ep.running ? fmt::format(" while running task {}", ep.running->id) : std::string());
  ep.alive = false;
  ep.restart_at_ns = 0;  // replaced at once (replace_children)
  ep.reaped = reaped;
  ep.death = why;
  ep.in_control = false;  // progress_controls sees !alive and fails the target
  drop_owed(ep);          // its replacement starts with the registry as it is now
  if (!ep.running) return;
  TaskNode* s = ep.running;
  ep.running = nullptr;
  const uint32_t st = ep.mb->state.load(std::memory_order_acquire);
  if ((st == MB_TASK_DONE || st == MB_TASK_FAILED) && ep.mb->done_sequence == ep.seq) {
    const bool ok = st == MB_TASK_DONE;
    complete_member(ep, s, ok ? Outcome::SUCCESS : Outcome::TASK_FAILURE, ok ? std::string() : ep.mb->error());
    return;
  }
  complete_member(ep, s, Outcome::ENDPOINT_FAILURE,
                  fmt::format("{} (pid {}) {} while running task {}", ep.label(), ep.pid, why, s->id));
}

void Scheduler::endpoint_failed(Endpoint& ep, const std::string& why) {
  int status = 0;
  bool reaped = false;
  if (ep.pid > 0) {
    kill(ep.pid, SIGKILL);
    for (int i = 0; i < 1000 && !reaped; ++i) {  // SIGKILL: normally at once; 1 s at most
      const pid_t r = waitpid(ep.pid, &status, WNOHANG);
      reaped = r == ep.pid || (r < 0 && errno == ECHILD);
      if (!reaped) usleep(1000);
    }
  }
  mark_dead(ep, why, reaped);  // not reaped: close() reaps it
}

uint64_t Scheduler::task_timeout_ns(const TaskNode& s) const {
  const uint64_t ms = std::min<uint64_t>(s.config.timeout_ms ? s.config.timeout_ms : cfg_.task_timeout_ms,
                                         uint64_t(1) << 40);  // ~35 years: no overflow below
  return ms * 1'000'000;
}

void Scheduler::check_children(uint64_t now) {
  std::lock_guard<std::mutex> g(lock_.mu);
  const uint64_t liveness_ns = uint64_t(cfg_.liveness_timeout_ms) * 1'000'000;
  pool_.for_each([&](Endpoint& ep) {
    ep.transport->check(ep, now);
    if (!ep.alive || ep.is_remote() || liveness_ns == 0) return;
    // A heartbeat that stopped: the whole process is stopped or frozen (a
    // busy task does not stop it). It gets no more work; it is replaced.
    const uint64_t beat = ep.mb->heartbeat.load(std::memory_order_relaxed);
    if (beat != ep.beat) {
      ep.beat = beat;
      ep.beat_ns = now;
    } else if (now - ep.beat_ns > liveness_ns) {
      endpoint_failed(ep, fmt::format("stopped making progress: no heartbeat for {} ms (stopped, or frozen); the "
                                      "child was killed",
                                      (now - ep.beat_ns) / 1'000'000));
    }
  });
  // Every millisecond: look without copying; copy only when one is due (a
  // cancel works on the graph while the list is walked).
  auto due = [now](const RunState* run) {
    return run->deadline_ns && now > run->deadline_ns && run->cancelled.empty();
  };
  if (std::any_of(graph_.runs().begin(), graph_.runs().end(), due))
    for (RunState* run : std::vector<RunState*>(graph_.runs()))
      if (due(run)) graph_.cancel(run, fmt::format("its deadline of {} ms passed", run->options.deadline_ms));
  replace_children(now);
}

// Dead children are forked again at once (mu held, so each inherits a
// consistent registry); one that fails to start is tried again after a
// growing pause (0.1 s, doubling, at most 30 s).
void Scheduler::replace_children(uint64_t now) {
  if (!child_main_) return;
  pool_.for_each([&](Endpoint& ep) {
    if (ep.is_remote() || ep.alive) return;
    if (ep.starting) {
      if (pool_.poll_start(ep, now)) {
        ep.failed_starts = 0;
        engine_log()->info("{}: {} replaced (pid {})", cfg_.name, ep.label(), ep.pid);
      } else if (!ep.starting) {
        ++ep.failed_starts;
        ep.restart_at_ns = now + std::min<uint64_t>(100'000'000ull << std::min<uint32_t>(ep.failed_starts, 9),
                                                    30'000'000'000ull);
        engine_log()->error("{}: replacing {} failed: {}", cfg_.name, ep.label(), ep.death);
      }
      return;
    }
    if (now < ep.restart_at_ns) return;
    if (Status s = pool_.respawn(ep, child_main_); !s.ok()) {
      ++ep.failed_starts;
      ep.death = s.message;
      ep.restart_at_ns = now + 1'000'000'000ull;
    }
  });
}

// --- dispatch (mu held unless noted) -------------------------------------------------

void Scheduler::pop(FairQueue& q) {
  q.pop_front();
  queued_.fetch_sub(1, std::memory_order_relaxed);
}

// An endpoint takes a task when it is alive, has room, is not serving a
// control request, owes none (a registration that finished while it was
// busy installs first) and is not awaited by the queued control request.
bool Scheduler::idle(const Endpoint* ep) const {
  if (!ep->alive || !ep->has_room() || ep->in_control || !ep->owed.empty()) return false;
  if (controls_.empty()) return true;
  const ControlRequest& c = *controls_.front();
  for (size_t i = 0; i < c.targets.size(); ++i)
    if (c.targets[i] == ep && !c.sent[i]) return false;
  return true;
}

void Scheduler::assign(Endpoint* ep, TaskNode* s, int m) {
  s->state = TaskNode::State::kRunning;
  ++running_;
  if (ep->kind == ChildKind::SUB) ++running_subs_;
  uint64_t seq = 0;
  ep->transport->accept(*ep, s, m, &seq);
  plan_.push_back({ep, s, m, seq});
}

// Whether a task may go to an endpoint: it holds the callable, and a retried
// task prefers an endpoint other than the one it failed on.
static bool fits(const TaskNode* s, const Endpoint* ep, bool avoid) {
  return (!s->allowed || (*s->allowed)[ep->index]) && !(avoid && s->avoid == ep->index);
}

// Dead children are replaced at once; a queued task that no live (or
// restarting) child can take fails now instead of waiting for ever.
bool Scheduler::fail_unlaunchable() {
  bool failed = false;
  auto never = [&](TaskNode* t, const std::string& why) {
    t->failure = TaskFailure{t->id, t->callable.hex(), "", Outcome::ENDPOINT_FAILURE, why};
    t->members_left = 0;
    graph_.finalize(t, Outcome::ENDPOINT_FAILURE);
    failed = true;
  };
  auto& next_eps = pool_.next_level();
  for (size_t i = 0; i < next_eps.size(); ++i)
    while (!next_pinned_[i].empty() && !next_eps[i]->coming_back()) {
      never(next_pinned_[i].front(), fmt::format("not launched: its worker {} {}", next_eps[i]->label(),
                                                 next_eps[i]->transport->down_reason(*next_eps[i])));
      pop(next_pinned_[i]);
    }
  auto cull = [&](FairQueue& q, std::vector<std::unique_ptr<Endpoint>>& eps) {
    while (!q.empty()) {
      TaskNode* t = q.front();
      int live = 0;
      std::string dead;
      for (auto& ep : eps) {
        if (!fits(t, ep.get(), false)) continue;
        if (ep->coming_back())
          ++live;
        else if (dead.empty()) dead = ep->label() + " " + ep->transport->down_reason(*ep);
      }
      const int n = static_cast<int>(t->blobs.size());
      std::string why;
      if (n > 1 && t->pinned[0] >= 0) {
        for (int k = 0; k < n && why.empty(); ++k)
          if (!eps[t->pinned[k]]->coming_back())
            why = fmt::format("not launched: group member {}'s worker {} {}", k, eps[t->pinned[k]]->label(),
                              eps[t->pinned[k]]->death);
      } else if (n > live) {
        why = fmt::format("not launched: it needs {} live workers and {} are left ({})", n, live, dead);
      }
      if (why.empty()) return;
      never(t, why);
      pop(q);
    }
  };
  cull(next_any_, next_eps);
  cull(sub_q_, pool_.subs());
  return failed;
}

// A shared FIFO: the head task goes to as many idle workers as it has
// members, or waits (a group waits for enough idle workers).
void Scheduler::drain_queue(FairQueue& q, std::vector<std::unique_ptr<Endpoint>>& eps) {
  while (!q.empty()) {
    TaskNode* s = q.front();
    const int n = static_cast<int>(s->blobs.size());
    std::vector<Endpoint*>& picked = picked_;
    picked.clear();
    if (n > 1 && s->pinned[0] >= 0) {
      for (int k = 0; k < n; ++k)
        if (idle(eps[s->pinned[k]].get())) picked.push_back(eps[s->pinned[k]].get());
    } else {
      for (auto& ep : eps)
        if (static_cast<int>(picked.size()) < n && idle(ep.get()) && fits(s, ep.get(), true)) picked.push_back(ep.get());
      if (picked.empty() && n == 1 && s->avoid >= 0)  // only the worker it failed on is left: try it again
        for (auto& ep : eps)
          if (picked.empty() && idle(ep.get()) && fits(s, ep.get(), false)) picked.push_back(ep.get());
    }
    if (static_cast<int>(picked.size()) < n) return;
    pop(q);
    for (int k = 0; k < n; ++k) assign(picked[k], s, k);
  }
}

// Called on every round of a spinning driver: looks at the queues without
// the lock first (queued_ is written under mu; a task queued after this load
// rings the doorbell, so the driver comes back before it parks). Plans under
// the lock, writes the mailboxes without it.
bool Scheduler::dispatch_ready() {
  if (queued_.load(std::memory_order_acquire) == 0) return false;
  plan_.clear();  // drive-token holder only: reused, no allocation per round
  bool failed_any;
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    failed_any = fail_unlaunchable();
    auto& next_eps = pool_.next_level();
    for (size_t i = 0; i < next_eps.size(); ++i)
      while (!next_pinned_[i].empty() && idle(next_eps[i].get())) {  // a remote worker takes up to its credits
        assign(next_eps[i].get(), next_pinned_[i].front(), 0);
        pop(next_pinned_[i]);
      }
    drain_queue(next_any_, next_eps);
    drain_queue(sub_q_, pool_.subs());
  }
  for (const Plan& p : plan_) p.ep->transport->dispatch(*p.ep, p.s, p.member, p.seq);
  return !plan_.empty() || failed_any;
}

}  // namespace pto
