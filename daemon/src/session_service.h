// The peer side of the remote L3 session (docs/remote.md): a coordinator (a
// level-4 ptod) opens one Session.Open stream per peer; this daemon answers
// HELLO with READY and credits, runs each TASK on its Worker as an
// asynchronous run, sends COMPLETIONs (batched) with the outputs, handles
// CONTROL (two-phase registration, tombstones), and exchanges HEALTH with the
// coordinator. Anything out of protocol ends the session with a SHUTDOWN that
// says why; the daemon keeps serving.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "fd_transfers.h"
#include "pto/v1/session.grpc.pb.h"
#include "services.h"
#include "session_conn.h"
#include "session_frames.h"
#include "session_wire.h"

namespace ptod {

// The Session service with its one method registered as the generated
// service does, but with ByteBuffer for the frames (session_wire.h). The
// sessions' remote buffers are reachable by the fd socket too (FdBufferHost).
class SessionService final : public grpc::Service, public FdBufferHost {
 public:
  explicit SessionService(DaemonParts p);
  using Stream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;
  grpc::Status Open(grpc::ServerContext* ctx, Stream* stream);
  // Drain: every open session gets a SHUTDOWN and ends (before the server's
  // shutdown, which waits for its streams).
  void shutdown_all(const std::string& reason);
  // After the server's shutdown: waits (at most `bound`) until gRPC has let
  // go of every slice over the arena; false if some are still held.
  bool wait_lent(std::chrono::milliseconds bound);

  // FdBufferHost: a chunk of a live session's buffer, for the principal
  // that opened the session.
  std::string hold_buffer(const Principal& who, const pto::v1::FdRequest& req, Held* out) override;
  pto::Worker& engine() override { return p_.worker; }

 private:
  // Writes one frame, adding its header (version, session, worker, seq).
  using FrameWriter = std::function<bool(OutFrame)>;

  // Open()'s phases, in order.
  grpc::Status check_token(grpc::ServerContext* ctx);
  grpc::Status handshake(SessionConn& c, Stream* stream, const FrameWriter& write_now);
  void write_loop(const std::shared_ptr<SessionConn>& c, const FrameWriter& write_now);
  void watch_loop(const std::shared_ptr<SessionConn>& c);
  grpc::Status read_loop(const std::shared_ptr<SessionConn>& c, Stream* stream, std::string* why);
  void close_session(SessionConn& c, const grpc::Status& result, std::string* why);
  void retire(const std::shared_ptr<SessionConn>& c, const std::string& why);

  void start_task(const std::shared_ptr<SessionConn>& c, const pto::v1::RemoteTask& t);
  // A CONTROL answered: the reply, and for BUFFER_READ its chunk as a slice
  // over the arena (*data). `chunk` is a BUFFER_WRITE's data when it was
  // left in gRPC's buffers.
  void control(SessionConn& c, const pto::v1::Control& req, const Payload& chunk, pto::v1::ControlReply* reply,
               grpc::Slice* data);
  std::string buffer_op(SessionConn& c, const pto::v1::Control& req, const Payload& chunk, pto::v1::ControlReply* reply,
                        grpc::Slice* data);

  // The bytes of the remote buffers the live sessions of a principal hold.
  uint64_t buffer_bytes_of(const std::string& principal);

  DaemonParts p_;
  std::shared_ptr<LentPages> lent_ = std::make_shared<LentPages>();
  std::mutex mu_;
  std::set<std::shared_ptr<SessionConn>> live_;
  std::mutex quota_mu_;  // BUFFER_ALLOC's quota check and allocation, one at a time (taken before mu_)
};

// How a daemon names itself in HELLO: "ptod <host> pid <pid>".
std::string node_name();

// The worker tree as the Node service reports it (also sent in HELLO and HEALTH).
void fill_worker_tree(const DaemonParts& p, pto::v1::WorkerNode* root);

}  // namespace ptod
