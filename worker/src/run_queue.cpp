#include "run_queue.h"

#include <algorithm>

#include "futex.h"

namespace pto {

namespace {
// The Workers whose on_done this thread is inside (nested: an on_done may
// cancel, and so finish, another run).
thread_local std::vector<const WorkerImpl*> tl_on_done_of;
}  // namespace

bool RunQueue::in_on_done_of(const WorkerImpl* w) {
  return std::find(tl_on_done_of.begin(), tl_on_done_of.end(), w) != tl_on_done_of.end();
}

void RunQueue::finish(const std::shared_ptr<RunHandle::State>& st, RunResult r) {
  // Most ends said so already (hand_over, the end of run()); not a run
  // refused at its start, whose result comes here directly.
  st->ended.store(true, std::memory_order_release);
  if (st->on_done) {
    struct Inside {
      explicit Inside(const WorkerImpl* w) { tl_on_done_of.push_back(w); }
      ~Inside() { tl_on_done_of.pop_back(); }
    } inside(st->owner);
    st->on_done(r);
  }
  {
    std::lock_guard<std::mutex> g(st->mu);
    st->result = std::move(r);
    st->done = true;
  }
  st->finished.store(true, std::memory_order_release);
  st->cv.notify_all();
}

std::optional<RunResult> RunQueue::push(std::shared_ptr<RunHandle::State> st) {
  std::unique_lock<std::mutex> g(mu_);
  if (stop_) {
    RunResult r;
    r.status = Status::Error(kWorkerClosed, "submit after close()");
    return r;
  }
  // After every queued run of the same or a higher priority, looked for from
  // the back: that is where a run of the queue's common priority goes at
  // once (a batch queues thousands, and a scan from the front cost each push
  // the whole queue).
  const auto at = std::find_if(q_.rbegin(), q_.rend(), [&](const auto& other) {
                    return other->options.priority >= st->options.priority;
                  }).base();
  q_.insert(at, std::move(st));
  outstanding_.fetch_add(1, std::memory_order_seq_cst);
  queued_.fetch_add(1, std::memory_order_release);
  // A front that waits for its batch is taken by a thread running one of
  // the batch's runs: a thread woken (or started) now would only wait.
  if (front_waits_locked()) return std::nullopt;
  // A thread waiting for a slot takes the front when one frees: another
  // would only wait beside it.
  if (idle_ == 0 && slot_waiters_ == 0 && static_cast<int>(threads_.size()) < max_threads_)
    threads_.emplace_back([this] { main(); });
  cv_.notify_one();
  return std::nullopt;
}

std::optional<RunResult> RunQueue::cancel_queued(const std::shared_ptr<RunHandle::State>& st,
                                                 const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = std::find(q_.begin(), q_.end(), st);
    if (it == q_.end()) return std::nullopt;
    q_.erase(it);
    queued_.fetch_sub(1, std::memory_order_release);
    outstanding_.fetch_sub(1, std::memory_order_seq_cst);
  }
  return cancelled_before_start(reason);
}

RunResult RunQueue::cancelled_before_start(const std::string& reason) {
  RunResult r;
  r.status = Status::Error(kWorkerCancelled, "cancelled before it started: " + reason);
  r.outcome = Outcome::STOPPED;
  return r;
}

void RunQueue::main() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // One idle thread at a time spins: more would only take the CPUs that
    // the running runs and their children need.
    if (q_.empty() && !stop_ && !spinning_.exchange(true, std::memory_order_acq_rel)) {
      lk.unlock();
      const uint64_t t0 = now_ns();
      uint32_t spins = 0;
      while (queued_.load(std::memory_order_acquire) == 0 && now_ns() - t0 < uint64_t(spin_us_) * 1000)
        spin_step(spins);
      spinning_.store(false, std::memory_order_release);
      lk.lock();
    }
    ++idle_;
    // Not while a run taken from the queue has its start unsettled: nothing
    // overtakes it. (Woken when it settles; the bound is a second defence.)
    // Nor while the front's batch is as wide as it may be: a thread running
    // one of its runs takes the front when that run has ended (no wake-up).
    while (!((stop_ || !q_.empty()) && starting_ == 0 && !front_waits_locked()))
      cv_.wait_for(lk, std::chrono::milliseconds(100));
    --idle_;
    if (q_.empty()) return;  // stopping and drained
    auto st = q_.front();
    q_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    st->starting = true;
    ++starting_;
    if (st->options.batch_width != 0) ++batch_running_[st->options.batch];
    const uint64_t gen = slot_gen_;
    lk.unlock();
    bool no_slot = false;
    std::optional<RunResult> r = execute_(st, &no_slot);
    if (!no_slot) {
      settle(st);  // an attached run settled in WorkerImpl::begin already
      if (r) finish(st, std::move(*r));
      lk.lock();
      batch_done_locked(*st);
      continue;
    }
    // Every slot was taken: back to the front, for the run that frees a
    // slot (pop_detached) or for this thread once told a slot came free.
    const std::optional<std::string> cancelled = cancel_requested(st);
    lk.lock();
    batch_done_locked(*st);
    if (!put_back_locked(st, cancelled.has_value())) {
      lk.unlock();
      finish(st, cancelled_before_start(cancelled.value_or("")));
      lk.lock();
      continue;
    }
    ++slot_waiters_;
    slot_cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return slot_gen_ != gen; });
    --slot_waiters_;
  }
}

bool RunQueue::front_waits_locked() const {
  if (q_.empty()) return false;
  const RunOptions& o = q_.front()->options;
  if (o.batch_width == 0) return false;
  const auto it = batch_running_.find(o.batch);
  return it != batch_running_.end() && it->second >= o.batch_width;
}

void RunQueue::batch_done_locked(const RunHandle::State& st) {
  if (st.options.batch_width == 0) return;
  const auto it = batch_running_.find(st.options.batch);
  if (it != batch_running_.end() && --it->second == 0) batch_running_.erase(it);
}

std::shared_ptr<RunHandle::State> RunQueue::pop_detached() {
  if (queued_.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard<std::mutex> g(mu_);
  // A run taken before with its start unsettled comes first.
  if (q_.empty() || !q_.front()->detached || starting_ != 0) return nullptr;
  auto st = std::move(q_.front());
  q_.pop_front();
  queued_.fetch_sub(1, std::memory_order_release);
  st->starting = true;
  ++starting_;
  return st;
}

void RunQueue::settle_locked(RunHandle::State& st) {
  if (!st.starting) return;
  st.starting = false;
  --starting_;
  outstanding_.fetch_sub(1, std::memory_order_seq_cst);
}

void RunQueue::settle(const std::shared_ptr<RunHandle::State>& st) {
  bool all = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!st->starting) return;
    settle_locked(*st);
    // Idle threads held back by a front that waits for its batch stay
    // asleep: waking them for nothing costs a batch's every start two
    // context switches.
    if (starting_ != 0 || idle_ == 0) return;
    if (stop_) {
      all = true;  // every thread held back exits or drains the queue
    } else if (q_.empty() || front_waits_locked()) {
      return;
    }
  }
  // Else one of the threads held back while it was unsettled: its start
  // settles in turn and wakes the next, if another can start. (Woken
  // together, all but one only waited again.)
  if (all)
    cv_.notify_all();
  else
    cv_.notify_one();
}

std::optional<std::string> RunQueue::cancel_requested(const std::shared_ptr<RunHandle::State>& st) {
  std::lock_guard<std::mutex> g(st->mu);
  if (!st->cancel_requested) return std::nullopt;
  return st->cancel_reason;
}

bool RunQueue::put_back_locked(const std::shared_ptr<RunHandle::State>& st, bool cancelled) {
  if (cancelled) {  // a cancel that found it out of the queue: it never starts
    settle_locked(*st);
    return false;
  }
  st->starting = false;
  --starting_;
  // Before every queued run of its priority (it was the first of them) and
  // after the higher ones that came meanwhile.
  auto at = std::find_if(q_.begin(), q_.end(),
                         [&](const auto& other) { return other->options.priority <= st->options.priority; });
  q_.insert(at, st);
  queued_.fetch_add(1, std::memory_order_release);
  return true;
}

std::optional<RunResult> RunQueue::put_back(std::shared_ptr<RunHandle::State> st) {
  // Not under mu_: a handle's lock is taken before the engine's.
  const std::optional<std::string> cancelled = cancel_requested(st);
  bool queued;
  {
    std::lock_guard<std::mutex> g(mu_);
    queued = put_back_locked(st, cancelled.has_value());
  }
  cv_.notify_one();  // a thread held back while it was unsettled (its start wakes the next)
  if (queued || !cancelled) return std::nullopt;  // queued unless cancelled
  return cancelled_before_start(*cancelled);
}

void RunQueue::slot_freed() {
  {
    std::lock_guard<std::mutex> g(mu_);
    ++slot_gen_;
    if (slot_waiters_ == 0) return;
  }
  slot_cv_.notify_all();
}

void RunQueue::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  slot_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();  // queued runs still execute; each is bounded
}

void RunQueue::detach() {
  for (auto& t : threads_)
    if (t.joinable()) t.detach();
}

void RunFinisher::push(std::shared_ptr<RunHandle::State> st, RunResult r) {
  {
    std::lock_guard<std::mutex> g(mu_);
    q_.emplace_back(std::move(st), std::move(r));
    if (!thread_.joinable()) thread_ = std::thread([this] { main(); });
  }
  cv_.notify_one();
}

void RunFinisher::main() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
    if (q_.empty()) return;  // stopping and drained
    auto [st, r] = std::move(q_.front());
    q_.pop_front();
    lk.unlock();
    RunQueue::finish(st, std::move(r));
    lk.lock();
  }
}

void RunFinisher::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();  // what is queued is finished first
}

}  // namespace pto
