// Uploads in progress and when each last received bytes. A thread cancels
// an upload idle for longer than [server] upload_idle_timeout_s: its handler's
// Read() then returns false and it drops the half-written tensor, so a client
// that stalls cannot hold arena space (docs/daemon.md, "Tensors").
#pragma once

#include <grpcpp/server_context.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace ptod {

class UploadWatch {
 public:
  explicit UploadWatch(std::chrono::seconds idle);
  ~UploadWatch();
  UploadWatch(const UploadWatch&) = delete;
  UploadWatch& operator=(const UploadWatch&) = delete;

  // One upload's registration for the life of its handler.
  class Upload {
   public:
    Upload(UploadWatch& w, grpc::ServerContext* ctx);
    ~Upload();
    Upload(const Upload&) = delete;
    Upload& operator=(const Upload&) = delete;
    void touch();            // bytes arrived
    bool timed_out() const;  // the watch cancelled it for idleness
   private:
    UploadWatch& w_;
    uint64_t id_;
  };

  std::chrono::seconds idle() const { return idle_; }

 private:
  struct Entry {
    grpc::ServerContext* ctx;
    std::chrono::steady_clock::time_point last;
    bool timed_out = false;
  };
  void main();

  const std::chrono::seconds idle_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> uploads_;
  uint64_t next_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ptod
