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
// connection is served by a thread of its own until it submits a job; from
// then on the job loop (fd_job_loop.cpp) waits for its requests with every
// other such connection's, and hands it back to a thread of its own for
// anything but a job that ends at once. At most kMaxConnections are open at
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
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fd_wire.h"
#include "principal.h"
#include "pto/base/status.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"

namespace ptod {

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
// for a local client (docs/proto.md, "The fd socket"), in three steps so
// that the job loop (fd_job_loop.cpp) can start the jobs of many clients,
// drive them together and answer each as it ends.
class FdJobHost {
 public:
  virtual ~FdJobHost() = default;
  // A job between start_job and finish_job.
  struct Job {
    Principal who;
    bool waits = false;                                    // the request's wait_ms > 0
    std::chrono::steady_clock::time_point started, until;  // until: the request's wait_ms from `started`
    pto::v1::SubmitReply reply;                            // its id and place in the queue, then its end
  };
  // As Jobs.Submit for `who` up to the job queued (job->reply: QUEUED).
  virtual grpc::Status start_job(const Principal& who, const pto::v1::SubmitRequest& req, Job* job) = 0;
  // Drives the job's run from this thread until it ended or `bound`: true
  // when it ended (or the call does not wait).
  virtual bool drive_job(const Job& job, std::chrono::steady_clock::time_point bound) = 0;
  // The rest of Jobs.Submit: drives the run up to kHelpFor from its start,
  // waits for its end until job.until or until `gone()` (the client hung
  // up; the job goes on), and commits its record before job.reply is sent.
  virtual grpc::Status finish_job(Job& job, const std::function<bool()>& gone) = 0;
  // A started job nobody will finish_job (its connection is closed): its
  // records are committed without a caller.
  virtual void abandon_job(uint64_t job_id) = 0;
  // How many jobs run at once ([jobs] max_running): the job loop starts no
  // more than that together.
  virtual uint32_t concurrent_jobs() const = 0;
};

// What the fd socket served since the start (the daemon's metrics):
// requests by op (FdRequest::Op, UPLOAD 1 .. SUBMIT 5; only those that passed
// check_fd_request), connections refused at accept, jobs the job loop
// answered, and connections it handed to a thread of their own.
struct FdSocketCounts {
  std::array<uint64_t, 6> by_op{};
  uint64_t refused = 0;
  uint64_t loop_jobs = 0;
  uint64_t handoffs = 0;
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
  // A connection: its socket and its peer's uid.
  struct Conn {
    int c = -1;
    uid_t uid = 0;
  };
  // What the job loop hands to a connection's thread, to finish before it
  // waits for the next request.
  struct Handoff {
    std::optional<FdInbound> inbound;   // a request read, whole or in part
    std::optional<FdJobHost::Job> job;  // a job started that did not end at once
    std::string unsent;                 // a reply's bytes the socket did not take
  };
  // One request, checked (check_fd_request), its descriptor received (taken
  // over: closed here); `mappings`: the connection's memfds mapped before.
  pto::v1::FdReply serve(const pto::v1::FdRequest& req, int fd, uid_t uid, Mappings& mappings);
  void accept_loop();
  // Serves connection k on this thread; true when it was handed to the job
  // loop (still open), false when it is done with (to close).
  bool connection(Conn k, Handoff h);
  bool stop_requested() const;  // stop() was called (wake_ is readable)
  // A whole frame read into `in` parsed and checked into *req: true, or
  // false with the reply that refuses it in *refusal (*keep false when the
  // framing is lost and the connection must close).
  static bool parse(FdInbound& in, FdInbound::Step step, pto::v1::FdRequest* req, pto::v1::FdReply* refusal,
                    bool* keep);
  static std::string unreadable_frame(const FdInbound& in, FdInbound::Step step, pto::v1::FdRequest* req);
  pto::v1::FdReply upload(const pto::v1::FdRequest& req, int fd, const struct stat& st, const Principal& who,
                          Mappings& mappings);
  pto::v1::FdReply download(const pto::v1::FdRequest& req, int fd, const struct stat& st, const Principal& who,
                            Mappings& mappings);
  pto::v1::FdReply buffer_chunk(const pto::v1::FdRequest& req, int fd, const struct stat& st, const Principal& who,
                                Mappings& mappings);

  // A job (SUBMIT) from the client on socket `c`: started (false and
  // *refusal when it is not), then finished.
  bool start_submit(const pto::v1::FdRequest& req, uid_t uid, FdJobHost::Job* job, pto::v1::FdReply* refusal);
  pto::v1::FdReply finish_submit(FdJobHost::Job& job, int c);

  // The job loop (fd_job_loop.cpp).
  class JobLoop;
  void job_loop();
  // Queues connection k for the job loop: false when the loop has ended.
  bool adopt(Conn k);
  // A thread of its own for connection k, to finish h first.
  void spawn_locked(Conn k, Handoff h);
  // Closes connection k and gives its slot back.
  void close_conn(Conn k);

  TensorStore& tensors_;
  const Principals& principals_;
  FdBufferHost* buffers_ = nullptr;
  FdJobHost* jobs_ = nullptr;
  int fd_ = -1;
  int wake_ = -1;  // an eventfd: the accept loop, the job loop and the connections end
  std::thread accept_;
  std::mutex mu_;
  std::map<uint64_t, std::thread> threads_;  // a thread per connection served by one
  std::vector<uint64_t> ended_;              // threads that have ended, to join
  uint64_t next_id_ = 0;
  int open_ = 0;                 // connections open, the job loop's too
  std::map<uid_t, int> by_uid_;  // open connections per user
  std::array<std::atomic<uint64_t>, 6> served_{};  // FdSocketCounts
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> loop_jobs_{0};
  std::atomic<uint64_t> handoffs_{0};
  // The job loop's: its thread, the connections queued for it (adopt), an
  // eventfd that says so, and whether it has ended (it takes no more).
  std::thread loop_;
  std::vector<Conn> adopted_;
  int adopted_wake_ = -1;
  bool loop_ended_ = false;
  void reap_locked();
};

}  // namespace ptod
