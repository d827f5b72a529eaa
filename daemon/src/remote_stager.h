// The coordinator's stager (docs/remote.md, "Remote buffers"): a task with a
// tensor above inline_limit_bytes cannot travel inline, so its own thread
// allocates remote buffers for those tensors and writes their IN bytes before
// the task is sent, and after its completion reads the OUT bytes back and
// frees the buffers. It has a thread of its own because it waits on CONTROL
// replies, which the link's writer and reader threads must never do.
//
// The stager is part of a GrpcRemoteLink and shares its mutex: its queues are
// guarded by the link's mutex, so a task moves between the link's queues and
// the stager's in one critical section.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "config.h"
#include "pto/remote.h"

namespace ptod {

// Which of a task's tensors carry bytes to the peer, and back.
inline bool copies_in(pto::TensorDirection d) {
  return d == pto::TensorDirection::IN || d == pto::TensorDirection::INOUT;
}
inline bool copies_out(pto::TensorDirection d) {
  return d == pto::TensorDirection::OUT || d == pto::TensorDirection::INOUT;
}

// The tensors of `t` that go in remote buffers: each above inline_limit_bytes,
// then the largest of the others until the bytes the task carries inline
// each way - IN in its TASK frame, OUT in its completion - fit a frame
// (DaemonConfig::frame_budget()). A gRPC message past max_message_bytes
// broke the stream: the session was lost, its tasks failed.
std::vector<size_t> tensors_to_stage(const pto::RemoteTask& t, const DaemonConfig& cfg);

class RemoteStager {
 public:
  // Where the stager's work goes: the link's session and queues. Called with
  // the link's mutex held.
  class Session {
   public:
    // False once the session is over: its buffers went with it.
    virtual bool session_live() const = 0;
    // A staged task, ready for the writer.
    virtual void send_staged(pto::RemoteTask&& task) = 0;
    // A task's end, for the engine.
    virtual void deliver(pto::RemoteCompletion&& done) = 0;
    // The engine gave up on the task (RemoteLink::abandon) since it was
    // handed to the stager: none of its outputs may be written any more.
    virtual bool abandoned(uint64_t seq) const = 0;
    // Its end is delivered: the mark is not needed any more.
    virtual void forget_abandoned(uint64_t seq) = 0;

   protected:
    ~Session() = default;
  };

  // link: the remote buffers (and the label for messages); mu: the link's
  // mutex; outputs_mu: held while outputs are written into the engine's
  // tensors (abandon() takes it, before mu); cfg: inline_limit_bytes, and
  // peer_ready_timeout_ms for each CONTROL.
  RemoteStager(pto::RemoteLink& link, Session& session, std::mutex& mu, std::mutex& outputs_mu,
               const DaemonConfig& cfg);
  RemoteStager(const RemoteStager&) = delete;
  RemoteStager& operator=(const RemoteStager&) = delete;

  bool needs_staging(const pto::RemoteTask& t) const;

  // The link's mutex held for all of these.
  void start(std::function<void()> wake);
  void request_stop();
  void stage(pto::RemoteTask&& task);
  // A completion of a task whose tensors are in remote buffers is finished
  // by the stager: true when the task was staged, and then done and task are
  // moved from.
  bool unstage(pto::RemoteCompletion& done, pto::RemoteTask& task, bool abandoned);
  // The session ended: its buffers went with it, nothing to free.
  void session_lost() { staged_.clear(); }
  // Its completion came and its outputs are being read back (or wait to be).
  bool unstaging(uint64_t seq) const { return unstaging_.count(seq) > 0; }

  // Without the mutex, after request_stop().
  void join();

 private:
  struct Unstage {
    pto::RemoteCompletion done;
    pto::RemoteTask task;
    std::vector<size_t> staged;  // its tensors in remote buffers
    bool abandoned = false;
  };

  void loop();
  bool stage_one(pto::RemoteTask& task);  // true when the task went on to the writer
  void unstage_one(Unstage& un);
  // A staged output's bytes into its tensor, a piece at a time through
  // scratch_, each piece copied in only if the task is not abandoned (then
  // *abandoned is set and the rest is left).
  pto::Status read_back(const pto::RemoteBufferRef& ref, const pto::ContinuousTensor& t, uint64_t seq, bool* abandoned);

  // What a piece of read_back holds: as much as the link keeps in flight
  // (4 chunks of 4 MiB), so the stream does not drain between pieces.
  static constexpr uint64_t kReadBackPiece = 16 << 20;

  pto::RemoteLink& link_;
  Session& session_;
  std::mutex& mu_;
  std::mutex& outputs_mu_;
  const DaemonConfig& cfg_;
  std::function<void()> wake_;
  std::thread thread_;
  std::vector<uint8_t> scratch_;  // the stager's thread only

  // Under mu_.
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<pto::RemoteTask> stage_q_;             // to stage before sending
  std::deque<Unstage> unstage_q_;                   // completed: outputs to read back, buffers to free
  std::set<uint64_t> unstaging_;                    // their seqs, and the one being read back, until delivered
  std::map<uint64_t, std::vector<size_t>> staged_;  // task seq -> its staged tensors
};

}  // namespace ptod
