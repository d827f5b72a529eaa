// Calls whose client holds them up: an upload that sends nothing, a stream
// (a download, a job's events, its log) whose client reads nothing. A
// thread cancels a call held up for longer than its limit ([server]
// upload_idle_timeout_s, write_stall_timeout_s): its handler's Read() or
// Write() then returns false and it lets go of what it held - an upload's
// half-written tensor and its arena space, a download's pin on its tensor,
// the gRPC thread of any (docs/daemon.md, "Tensors" and "Clients that stall").
#pragma once

#include <grpcpp/impl/call_op_set.h>
#include <grpcpp/server_context.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace ptod {

class StallWatch {
 public:
  StallWatch();
  ~StallWatch();
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // One call's registration for the life of its handler.
  class Call {
   public:
    enum class Counts {
      kIdle,     // from the start and from each touch(): the client must keep sending (an upload)
      kWriting,  // only while a write() waits for the client to read
    };
    Call(StallWatch& w, grpc::ServerContext* ctx, std::chrono::seconds limit, Counts counts);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;
    void touch();  // the client's bytes arrived
    // writer->Write(m, o) under the watch (kWriting).
    template <class Writer, class Message>
    bool write(Writer* writer, const Message& m, grpc::WriteOptions o = grpc::WriteOptions()) {
      writing(true);
      const bool ok = writer->Write(m, o);
      writing(false);
      return ok;
    }
    bool timed_out() const;  // the watch cancelled it
    std::chrono::seconds limit() const { return limit_; }

   private:
    void writing(bool on);
    StallWatch& w_;
    std::chrono::seconds limit_;
    uint64_t id_;
  };

 private:
  struct Entry {
    grpc::ServerContext* ctx;
    std::chrono::seconds limit;
    std::chrono::steady_clock::time_point since;  // held up since then, while `counting`
    bool counting;
    bool timed_out = false;
  };
  void main();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> calls_;
  uint64_t next_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ptod
