#include "upload_watch.h"

namespace ptod {

UploadWatch::UploadWatch(std::chrono::seconds idle) : idle_(idle), thread_([this] { main(); }) {}

UploadWatch::~UploadWatch() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// Looks four times per bound (at most every second): an idle upload ends
// between 1 and 1.25 bounds after its last bytes.
void UploadWatch::main() {
  const auto step = std::min<std::chrono::milliseconds>(
      std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(idle_) / 4);
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, step, [&] { return stop_; });
    const auto now = std::chrono::steady_clock::now();
    for (auto& [id, e] : uploads_)
      if (!e.timed_out && now - e.last > idle_) {
        e.timed_out = true;
        e.ctx->TryCancel();  // thread-safe: the handler's Read() returns false
      }
  }
}

UploadWatch::Upload::Upload(UploadWatch& w, grpc::ServerContext* ctx) : w_(w) {
  std::lock_guard<std::mutex> g(w_.mu_);
  id_ = w_.next_++;
  w_.uploads_[id_] = Entry{ctx, std::chrono::steady_clock::now()};
}

UploadWatch::Upload::~Upload() {
  std::lock_guard<std::mutex> g(w_.mu_);
  w_.uploads_.erase(id_);
}

void UploadWatch::Upload::touch() {
  std::lock_guard<std::mutex> g(w_.mu_);
  w_.uploads_[id_].last = std::chrono::steady_clock::now();
}

bool UploadWatch::Upload::timed_out() const {
  std::lock_guard<std::mutex> g(w_.mu_);
  auto it = w_.uploads_.find(id_);
  return it != w_.uploads_.end() && it->second.timed_out;
}

}  // namespace ptod
