#include "run_queue.h"

#include <algorithm>

#include "futex.h"

namespace pto {

void RunQueue::finish(const std::shared_ptr<RunHandle::State>& st, RunResult r) {
  if (st->on_done) st->on_done(r);
  {
    std::lock_guard<std::mutex> g(st->mu);
    st->result = std::move(r);
    st->done = true;
  }
  st->cv.notify_all();
}

RunHandle RunQueue::push(std::shared_ptr<RunHandle::State> st) {
  RunHandle h;
  h.state_ = st;
  std::unique_lock<std::mutex> g(mu_);
  if (stop_) {
    g.unlock();
    RunResult r;
    r.status = Status::Error(kWorkerClosed, "submit after close()");
    finish(st, std::move(r));
    return h;
  }
  // After every queued run of the same or a higher priority.
  auto at = std::find_if(q_.begin(), q_.end(),
                         [&](const auto& other) { return other->options.priority < st->options.priority; });
  q_.insert(at, std::move(st));
  queued_.fetch_add(1, std::memory_order_release);
  if (idle_ == 0 && static_cast<int>(threads_.size()) < max_threads_) threads_.emplace_back([this] { main(); });
  cv_.notify_one();
  return h;
}

bool RunQueue::cancel_queued(const std::shared_ptr<RunHandle::State>& st, const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = std::find(q_.begin(), q_.end(), st);
    if (it == q_.end()) return false;
    q_.erase(it);
    queued_.fetch_sub(1, std::memory_order_release);
  }
  RunResult r;
  r.status = Status::Error(kWorkerCancelled, "cancelled before it started: " + reason);
  r.outcome = Outcome::STOPPED;
  finish(st, std::move(r));
  return true;
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
    cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
    --idle_;
    if (q_.empty()) return;  // stopping and drained
    auto st = q_.front();
    q_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    lk.unlock();
    finish(st, execute_(st));
    lk.lock();
  }
}

void RunQueue::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();  // queued runs still execute; each is bounded
}

void RunQueue::detach() {
  for (auto& t : threads_)
    if (t.joinable()) t.detach();
}

}  // namespace pto
