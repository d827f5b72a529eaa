// The coordinator side of the remote L3 session (docs/remote.md): a
// pto::RemoteLink over one gRPC Session.Open stream to a peer ptod. One
// connection thread opens sessions (HELLO until READY, re-installing the
// committed registrations on every new session) and reconnects after a loss;
// during a session a writer thread sends batched TASK frames, CONTROLs and
// HEALTH, and a reader thread takes COMPLETIONs (copying outputs back into
// this process's tensors), CONTROL_REPLYs and HEALTH; tasks with tensors
// above the inline limit go through the RemoteStager (remote_stager.h). A
// session is lost when the stream breaks, a frame is out of protocol, or
// nothing arrives for dead_after_ms; every task it held then comes back as
// ENDPOINT_FAILURE.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "config.h"
#include "pto/remote.h"
#include "pto/v1/session.grpc.pb.h"
#include "remote_stager.h"
#include "session_wire.h"

namespace ptod {

class PeerFdPath;  // remote_fd_path.h

class GrpcRemoteLink final : public pto::RemoteLink, private RemoteStager::Session {
 public:
  GrpcRemoteLink(DaemonConfig::Peer peer, uint32_t worker_id, const DaemonConfig& cfg);
  ~GrpcRemoteLink() override;

  std::string label() const override { return "peer " + peer_.name; }
  pto::Status start(std::function<void()> wake) override;
  void stop() override;
  bool ready() const override { return ready_.load(std::memory_order_acquire); }
  std::string state_text() const override;
  uint32_t credits() const override { return window_.load(std::memory_order_relaxed); }
  void send(pto::RemoteTask&& task) override;
  bool has_completions() const override { return has_done_.load(std::memory_order_acquire); }
  void poll(std::vector<pto::RemoteCompletion>* out) override;
  void abandon(uint64_t seq) override;
  pto::Status prepare(const pto::CallableIdentity& id, const std::string& payload, uint32_t timeout_ms) override;
  pto::Status commit(const pto::CallableIdentity& id, uint32_t timeout_ms) override;
  pto::Status abort(const pto::CallableIdentity& id, uint32_t timeout_ms) override;
  pto::Status unregister(const pto::CallableIdentity& id, uint32_t timeout_ms) override;
  std::vector<PeerChild> peer_children() const override;
  pto::Status buffer_alloc(uint64_t bytes, pto::RemoteBufferRef* out, uint32_t timeout_ms) override;
  pto::Status buffer_free(const pto::RemoteBufferRef& b, uint32_t timeout_ms) override;
  pto::Status buffer_write(const pto::RemoteBufferRef& b, const void* src, uint64_t bytes,
                           uint32_t timeout_ms) override;
  pto::Status buffer_read(const pto::RemoteBufferRef& b, void* dst, uint64_t bytes, uint32_t timeout_ms) override;

  // Remote-buffer bytes moved through the peer's fd socket so far (the rest
  // went over the session's stream).
  uint64_t fd_path_bytes() const { return fd_path_bytes_.load(std::memory_order_relaxed); }

  static constexpr uint64_t kChunkBytes = 4 << 20;  // remote-buffer writes and reads, per CONTROL
  static constexpr int kChunkWindow = 4;            // chunks in flight at once (a sliding window)
  // A lone task with at most this many inline bytes is written by the thread
  // that dispatches it (a larger Write could block it on flow control).
  static constexpr uint64_t kDirectWriteBytes = 64 << 10;

 private:
  struct Pending {
    pto::RemoteTask task;
    bool abandoned = false;  // the engine timed it out: write none of its outputs
  };
  struct ControlWait {
    bool done = false;
    pto::v1::ControlReply reply;
    Payload data;  // a BUFFER_READ's chunk, still in gRPC's buffers
  };

  // RemoteStager::Session, mu_ held.
  bool session_live() const override { return session_up_ && !session_over_; }
  void send_staged(pto::RemoteTask&& task) override;
  void deliver(pto::RemoteCompletion&& done) override;
  bool abandoned(uint64_t seq) const override { return abandoned_.count(seq) > 0; }
  void forget_abandoned(uint64_t seq) override { abandoned_.erase(seq); }

  void run();
  bool open_session(std::string* why);
  void reader_loop();
  void writer_loop();
  bool write_tasks(std::vector<pto::RemoteTask>& tasks);  // write_mu_ held
  // Ends the session in flight (first caller wins): cancels the stream and
  // hands every task it held back as ENDPOINT_FAILURE.
  void end_session(const std::string& why);
  pto::Status call(pto::v1::Control c, uint32_t timeout_ms, pto::v1::ControlReply* reply);
  pto::Status call_batch(std::vector<pto::v1::Control>& cs, uint32_t timeout_ms,
                         std::vector<pto::v1::ControlReply>* replies);
  // One CONTROL queued for the writer (mu_ held): its id, or 0 when no
  // session is up. Its reply is taken with await_control().
  // With `data`, a BUFFER_WRITE's chunk as a slice over its bytes.
  uint64_t post_control(pto::v1::Control&& c, grpc::Slice data = grpc::Slice());
  // Waits until control id's reply arrived or the deadline passed (mu_ held
  // through lk), takes the reply and forgets the id.
  pto::Status await_control(std::unique_lock<std::mutex>& lk, uint64_t id,
                            std::chrono::steady_clock::time_point deadline, uint32_t timeout_ms,
                            pto::v1::ControlReply* reply, Payload* data = nullptr);
  pto::Status digest_op(int op, const pto::CallableIdentity& id, uint32_t timeout_ms);  // COMMIT, ABORT, UNREGISTER
  // A remote buffer's bytes: through the peer's fd socket when it is on
  // this host (fd_path_), else (or when that fails) over the session's stream.
  pto::Status transfer(const pto::RemoteBufferRef& b, char* host, uint64_t bytes, bool write, uint32_t timeout_ms);
  pto::Status transfer_on_stream(const pto::RemoteBufferRef& b, char* host, uint64_t bytes, bool write,
                                 uint32_t timeout_ms);
  void fill_header(pto::v1::Frame* f);
  void set_tree(const pto::v1::WorkerNode& root);
  std::shared_ptr<grpc::Channel> make_channel(std::string* why) const;

  const DaemonConfig::Peer peer_;
  const uint32_t worker_id_;
  const DaemonConfig& cfg_;
  std::unique_ptr<PeerFdPath> fd_path_;  // a peer at a unix: address with fd_transfers
  std::atomic<bool> fd_path_failed_{false};  // logged once: the fd path failed and the stream took over
  std::atomic<uint64_t> fd_path_bytes_{0};
  std::function<void()> wake_;

  mutable std::mutex mu_;
  std::mutex write_mu_;             // the stream's writes and out_seq_ (taken before mu_ when both are held)
  std::condition_variable cv_;      // session state, stop
  std::condition_variable out_cv_;  // the writer's queue
  std::condition_variable ctl_cv_;  // control replies
  std::thread conn_;
  // Held while a task's outputs are written into the engine's tensors
  // (taken before mu_): abandon() takes it, so once it returns no byte of
  // the task lands there.
  std::mutex outputs_mu_;
  RemoteStager stager_{*this, *this, mu_, outputs_mu_, cfg_};  // its queues are under mu_
  // Given up on by the engine before they were sent, or after their
  // completion came and before their outputs were written.
  std::set<uint64_t> abandoned_;
  bool stop_ = false;
  std::atomic<bool> ready_{false};
  std::string state_ = "not started";

  // The session in flight.
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream_;
  bool session_up_ = false, session_over_ = false;
  std::string end_reason_;
  uint64_t session_ = 0;
  uint64_t out_seq_ = 0, in_seq_ = 0;
  std::atomic<uint64_t> last_recv_ns_{0};
  std::atomic<uint32_t> window_{0};
  std::deque<pto::RemoteTask> tasks_out_;
  std::deque<OutFrame> frames_out_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<pto::RemoteCompletion> done_;
  std::atomic<bool> has_done_{false};
  std::map<uint64_t, ControlWait> controls_;
  uint64_t control_id_ = 0;
  std::vector<PeerChild> tree_;

  // Registrations: committed ones are re-installed on every new session.
  std::map<pto::Digest, std::string> prepared_, committed_;
};

}  // namespace ptod
