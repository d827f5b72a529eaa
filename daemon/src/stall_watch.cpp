#include "stall_watch.h"

#include <algorithm>

namespace ptod {

StallWatch::StallWatch() : thread_([this] { main(); }) {}

StallWatch::~StallWatch() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// Looks four times per smallest limit of the calls it watches (at most
// every second): a call held up ends between 1 and 1.25 limits after it
// was last touched, or its write began. With no call to watch it sleeps a
// minute at most; each new call wakes it (its limit may be the shortest).
void StallWatch::main() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    // In milliseconds: a quarter of a limit of 1..3 s in whole seconds is 0,
    // and a wait of 0 spun this thread while such a call was open.
    std::chrono::milliseconds step = std::chrono::seconds(60);
    for (const auto& [id, e] : calls_)
      step = std::min<std::chrono::milliseconds>(
          {step, std::chrono::seconds(1),
           std::max<std::chrono::milliseconds>(std::chrono::milliseconds(10),
                                               std::chrono::duration_cast<std::chrono::milliseconds>(e.limit) / 4)});
    cv_.wait_for(lk, step);
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, e] : calls_)
      if (e.counting && !e.timed_out && now - e.since > e.limit) {
        e.timed_out = true;
        e.ctx->TryCancel();  // thread-safe: the handler's Read() or Write() returns false
      }
  }
}

StallWatch::Call::Call(StallWatch& w, grpc::ServerContext* ctx, std::chrono::seconds limit, Counts counts)
    : w_(w), limit_(limit) {
  std::lock_guard<std::mutex> g(w_.mu_);
  id_ = w_.next_++;
  w_.calls_[id_] = Entry{ctx, limit, std::chrono::steady_clock::now(), counts == Counts::kIdle};
  w_.cv_.notify_one();
}

StallWatch::Call::~Call() {
  std::lock_guard<std::mutex> g(w_.mu_);
  w_.calls_.erase(id_);
}

void StallWatch::Call::touch() {
  std::lock_guard<std::mutex> g(w_.mu_);
  w_.calls_[id_].since = std::chrono::steady_clock::now();
}

void StallWatch::Call::writing(bool on) {
  std::lock_guard<std::mutex> g(w_.mu_);
  Entry& e = w_.calls_[id_];
  e.counting = on;
  e.since = std::chrono::steady_clock::now();
}

bool StallWatch::Call::timed_out() const {
  std::lock_guard<std::mutex> g(w_.mu_);
  auto it = w_.calls_.find(id_);
  return it != w_.calls_.end() && it->second.timed_out;
}

}  // namespace ptod
