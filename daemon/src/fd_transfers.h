// The fd socket (docs/proto.md, "The fd socket"): tensor transfers for
// clients on the daemon's host without the bytes travelling through a
// socket. Beside the unix gRPC socket P, ptod listens on P + ".fd"; a client
// sends an FdRequest with a memfd attached (SCM_RIGHTS), and the daemon
// copies between that memfd's pages and the arena once — a gRPC message
// cannot carry a file descriptor, hence a socket of its own. A local
// client's jobs may come the same way (SUBMIT, no descriptor): a call that
// waits for its job then takes no gRPC thread hand-offs.
//
// What a client hands over is never trusted: the descriptor must be a memfd
// sealed against shrinking (so no page the daemon maps can vanish under it
// and raise SIGBUS), large enough for the transfer; a frame is at most
// kMaxFdFrame bytes (fd_frames.h) and must arrive within kFrameTimeout once begun. A
// connection is served by a thread of its own, at most kMaxConnections at
// once and kMaxPerUser per user (more are answered "refused" and closed at
// accept, logged), closed after kIdleTimeout without a request; stop() waits
// for each to end.
#pragma once

#include <grpcpp/support/status.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <vector>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "pto/base/status.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"

namespace ptod {

class Principals;
struct Principal;
class TensorStore;

// The remote buffers a coordinator's session holds here (SessionService):
// the fd socket moves their chunks for the coordinator that reaches this
// daemon by its unix socket (docs/remote.md, "Remote buffers through the fd
// socket").
class FdBufferHost {
 public:
  virtual ~FdBufferHost() = default;
  struct Held {
    pto::ContinuousTensor t;       // the buffer
    std::function<void()> release;  // the buffer in use until called (a BUFFER_FREE waits)
  };
  // The buffer of req (session, buffer_id, generation) when `who` opened
  // that session and [buffer_offset, + bytes) lies in it: "" and *out, or why not.
  virtual std::string hold_buffer(const Principal& who, const pto::v1::FdRequest& req, Held* out) = 0;
  virtual pto::Worker& engine() = 0;
};

// Jobs submitted through the fd socket (SUBMIT): Jobs.Submit without gRPC,
// for a local client (docs/proto.md, "The fd socket"). The connection's
// thread runs the call, so a waiting submit's job is driven from there.
class FdJobHost {
 public:
  virtual ~FdJobHost() = default;
  // As Jobs.Submit for `who`; `gone()` is true once the client has hung up
  // (a wait for the job's end stops there, the job goes on).
  virtual grpc::Status submit_job(const Principal& who, const pto::v1::SubmitRequest& req,
                                  pto::v1::SubmitReply* reply, const std::function<bool()>& gone) = 0;
};

// What the fd socket served since the start (the daemon's metrics):
// requests by op (FdRequest::Op, UPLOAD 1 .. SUBMIT 5; only those that passed
// check_fd_request), and connections refused at accept.
struct FdSocketCounts {
  std::array<uint64_t, 6> by_op{};
  uint64_t refused = 0;
};

// The fd socket that goes with the unix gRPC socket at `socket`.
inline std::string fd_socket_path(const std::string& socket) { return socket + ".fd"; }

class FdTransfers {
 public:
  static constexpr int kMaxConnections = 64;
  static constexpr int kMaxPerUser = 16;
  static constexpr std::chrono::seconds kFrameTimeout{10};
  static constexpr std::chrono::seconds kIdleTimeout{60};  // a connection without a request is closed

  FdTransfers(TensorStore& tensors, const Principals& principals) : tensors_(tensors), principals_(principals) {}
  // Before start(): where BUFFER_WRITE and BUFFER_READ find their buffers
  // (without one they are refused).
  void set_buffer_host(FdBufferHost* h) { buffers_ = h; }
  // Before start(): who runs SUBMIT (without one it is refused).
  void set_job_host(FdJobHost* h) { jobs_ = h; }
  ~FdTransfers() { stop(); }
  FdTransfers(const FdTransfers&) = delete;
  FdTransfers& operator=(const FdTransfers&) = delete;

  // Binds and listens (mode 0660, as the gRPC socket); the path was claimed
  // (SocketPath) first.
  pto::Status bind(const std::string& path);
  void start();
  // Ends the accept loop and every connection (their transfers finish first).
  void stop();
  FdSocketCounts counts() const;

 private:
  class Mappings;
  // One request, checked (check_fd_request), its descriptor received (taken
  // over: closed here); `mappings`: the connection's memfds mapped before.
  pto::v1::FdReply serve(const pto::v1::FdRequest& req, int fd, uid_t uid, Mappings& mappings);
  void accept_loop();
  void connection(int c, uid_t uid);
  pto::v1::FdReply upload(const pto::v1::FdRequest& req, int fd, const struct stat& st, const Principal& who,
                          Mappings& mappings);
  pto::v1::FdReply download(const pto::v1::FdRequest& req, int fd, const struct stat& st, const Principal& who,
                            Mappings& mappings);
  pto::v1::FdReply buffer_chunk(const pto::v1::FdRequest& req, int fd, const struct stat& st, const Principal& who,
                                Mappings& mappings);

  // A job (SUBMIT) from the client on socket `c`.
  pto::v1::FdReply submit(const pto::v1::FdRequest& req, int c, uid_t uid);

  TensorStore& tensors_;
  const Principals& principals_;
  FdBufferHost* buffers_ = nullptr;
  FdJobHost* jobs_ = nullptr;
  int fd_ = -1;
  int wake_ = -1;  // an eventfd: the accept loop and the connections end
  std::thread accept_;
  std::mutex mu_;
  std::map<uint64_t, std::thread> threads_;  // a thread per open connection
  std::vector<uint64_t> ended_;              // threads that have ended, to join
  uint64_t next_id_ = 0;
  std::map<uid_t, int> by_uid_;  // open connections per user
  std::array<std::atomic<uint64_t>, 6> served_{};  // FdSocketCounts
  std::atomic<uint64_t> refused_{0};
  void reap_locked();
};

}  // namespace ptod
