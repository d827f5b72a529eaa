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
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "pto/v1/session.grpc.pb.h"
#include "services.h"
#include "session_frames.h"

namespace ptod {

struct SessionConn;

class SessionService final : public pto::v1::Session::Service {
 public:
  explicit SessionService(DaemonParts p) : p_(p) {}
  grpc::Status Open(grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<pto::v1::Frame, pto::v1::Frame>* stream) override;
  // Drain: every open session gets a SHUTDOWN and ends (before the server's
  // shutdown, which waits for its streams).
  void shutdown_all(const std::string& reason);

 private:
  using Stream = grpc::ServerReaderWriter<pto::v1::Frame, pto::v1::Frame>;
  // Writes one frame, adding its header (version, session, worker, seq).
  using FrameWriter = std::function<bool(pto::v1::Frame)>;

  // Open()'s phases, in order.
  grpc::Status check_token(grpc::ServerContext* ctx);
  grpc::Status handshake(SessionConn& c, Stream* stream, const FrameWriter& write_now);
  void write_loop(const std::shared_ptr<SessionConn>& c, const FrameWriter& write_now);
  void watch_loop(const std::shared_ptr<SessionConn>& c);
  grpc::Status read_loop(const std::shared_ptr<SessionConn>& c, Stream* stream, std::string* why);
  void close_session(SessionConn& c, const grpc::Status& result, std::string* why);
  void retire(const std::shared_ptr<SessionConn>& c, const std::string& why);

  void start_task(const std::shared_ptr<SessionConn>& c, const pto::v1::RemoteTask& t);
  void control(SessionConn& c, const pto::v1::Control& req, pto::v1::ControlReply* reply);
  std::string buffer_op(SessionConn& c, const pto::v1::Control& req, pto::v1::ControlReply* reply);

  DaemonParts p_;
  std::mutex mu_;
  std::set<std::shared_ptr<SessionConn>> live_;
};

// How a daemon names itself in HELLO: "ptod <host> pid <pid>".
std::string node_name();

// The worker tree as the Node service reports it (also sent in HELLO and HEALTH).
void fill_worker_tree(const DaemonParts& p, pto::v1::WorkerNode* root);

}  // namespace ptod
