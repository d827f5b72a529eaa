#include "run_queue.h"

#include "futex.h"

namespace pto {

RunHandle RunQueue::push(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                         std::function<void(const RunResult&)> on_done) {
  RunHandle h;
  h.state_ = std::make_shared<RunHandle::State>();
  h.state_->on_done = std::move(on_done);
  h.state_->fn = std::move(fn);
  h.state_->args = std::move(args);
  h.state_->cfg = cfg;
  std::lock_guard<std::mutex> g(mu_);
  if (stop_) {
    h.state_->result.status = Status::Error(kWorkerClosed, "submit after close()");
    h.state_->done = true;
    if (h.state_->on_done) h.state_->on_done(h.state_->result);
    return h;
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { main(); });
  q_.push_back(h.state_);
  queued_.fetch_add(1, std::memory_order_release);
  cv_.notify_one();
  return h;
}

void RunQueue::main() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    if (q_.empty() && !stop_) {
      lk.unlock();
      const uint64_t t0 = now_ns();
      uint32_t spins = 0;
      while (queued_.load(std::memory_order_acquire) == 0 && now_ns() - t0 < uint64_t(spin_us_) * 1000)
        spin_step(spins);
      lk.lock();
    }
    cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
    if (q_.empty()) return;  // stopping and drained
    auto st = q_.front();
    q_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    lk.unlock();
    RunResult r = execute_(st->fn, st->args, st->cfg);
    if (st->on_done) st->on_done(r);
    {
      std::lock_guard<std::mutex> g2(st->mu);
      st->result = std::move(r);
      st->done = true;
    }
    st->cv.notify_all();
    lk.lock();
  }
}

void RunQueue::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();  // queued runs still execute; each is bounded
}

void RunQueue::detach() {
  if (thread_.joinable()) thread_.detach();
}

}  // namespace pto
