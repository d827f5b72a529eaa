// pto::client::Client — talks to a ptod over gRPC (proto/pto/v1/ptod.proto).
// The messages are the wire types (pto::v1::*); this class adds connection
// handling (unix socket or TCP, TLS, bearer token), chunked transfers, chip
// bundles read from a kernel config, and blocking / asynchronous job runs
// with a progress callback. Every call returns a Status whose message is the
// daemon's (or the transport's) and whose code is the gRPC status code.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pto/base/status.h"
#include "pto/dtype.h"  // the dtype values upload() and alloc() take
#include "pto/v1/ptod.grpc.pb.h"

namespace pto::client {

// The client's own status: code is a grpc::StatusCode (0 = OK; what the client
// refuses before any call — a file it cannot read — is INVALID_ARGUMENT), the
// message the daemon's, the transport's or the client's words.
struct Status {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
  static Status Ok() { return {}; }
  static Status Error(int c, std::string m) { return {c, std::move(m)}; }
};

struct ClientOptions {
  // "unix:/run/ptod/ptod.sock", "unix:///path", or "host:port".
  std::string address = "unix:/run/ptod/ptod.sock";
  std::string token;  // sent as "authorization: Bearer <token>"
  bool tls = false;   // TCP with TLS; tls_ca = PEM of the daemon's CA ("" = system roots)
  std::string tls_ca;
  std::string tls_cert, tls_key;             // client certificate, when the daemon verifies them
  std::chrono::milliseconds timeout{60000};  // per call; uploads add 1 s per 50 MB, downloads 10 min
  // On a unix socket, tensors move through the daemon's fd socket (the
  // address + ".fd", docs/proto.md): the daemon copies between a memfd of
  // this process and the arena, no byte crosses a socket. Falls back to the
  // gRPC stream when the daemon has no fd socket; false: always gRPC.
  bool fd_transfers = true;
  // On a unix socket, submit() goes through the fd socket too (a
  // connection of its own; docs/proto.md, "The fd socket"): the same call
  // as Jobs.Submit without gRPC's thread hand-offs on either side. gRPC
  // when the daemon has no fd socket, the request is larger than a frame,
  // or another thread's submit holds that connection; false: always gRPC.
  bool fd_jobs = true;
};

template <class T>
using Result = pto::Result<T, Status>;

using Progress = std::function<void(const pto::v1::JobEvent&)>;

// Where a level-4 daemon installs a callable (docs/remote.md); ignored by
// level-3 daemons.
struct Placement {
  uint32_t max_retries = 0;     // retries on another L3 worker after ENDPOINT_FAILURE
  bool next_level = false;      // an orchestration runs on the L3 workers, not in the daemon
  std::vector<uint32_t> peers;  // the [[peers]] to register on (empty = all)
  bool publish = false;         // every principal may find and run it (not only its owners)
};

// Memory this process shares with the daemon for transfers over the fd
// socket: a memfd sealed against shrinking, mapped read-write here. Upload
// from it or download into it and the daemon copies straight between its
// pages and the arena — the client copies nothing.
class SharedBuffer {
 public:
  static Result<SharedBuffer> create(uint64_t bytes);
  SharedBuffer() = default;
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&& o) noexcept;
  SharedBuffer& operator=(SharedBuffer&& o) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  void* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

 private:
  void reset();
  void* data_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
};

class FdChannel;

class Client {
 public:
  explicit Client(const ClientOptions& o);
  ~Client();

  // Registry
  Result<pto::v1::RegisterReply> register_chip(const std::string& kernels_toml, const std::string& name = "",
                                               const Placement& where = {});
  Result<pto::v1::RegisterReply> register_import(const std::string& library, const std::string& symbol,
                                                 const std::string& name = "", bool orchestration = false,
                                                 const Placement& where = {});
  Result<pto::v1::RegisterReply> register_blob(const std::string& library_file, const std::string& symbol,
                                               const std::string& name = "", bool orchestration = false,
                                               const Placement& where = {});
  Result<pto::v1::RegisterReply> register_callable(const pto::v1::RegisterRequest& req);
  Status unregister(const pto::v1::CallableRef& ref);
  // An owner (or an admin) publishes a callable for every principal, or withdraws it.
  Status publish(const pto::v1::CallableRef& ref, bool published = true);
  Result<pto::v1::ListCallablesReply> callables();

  // Tensors
  Result<pto::v1::TensorInfo> upload(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype,
                                     const void* data, uint64_t bytes, uint32_t chunk_bytes = 1u << 20);
  Result<pto::v1::TensorInfo> alloc(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype);
  Result<pto::v1::TensorInfo> download(const pto::v1::TensorHandle& t, std::vector<uint8_t>* out,
                                       uint32_t chunk_bytes = 1u << 20);
  // Zero-copy on this side: the bytes at `offset` of a SharedBuffer, through
  // the fd socket only (FAILED_PRECONDITION where there is none).
  Result<pto::v1::TensorInfo> upload(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype,
                                     const SharedBuffer& from, uint64_t offset = 0);
  Result<pto::v1::TensorInfo> download(const pto::v1::TensorHandle& t, SharedBuffer& into, uint64_t offset = 0);
  // Whether transfers go through the fd socket (connecting on first use).
  bool fd_socket();
  Status free(const pto::v1::TensorHandle& t);
  Result<pto::v1::ListTensorsReply> tensors();

  // Jobs
  Result<pto::v1::SubmitReply> submit(const pto::v1::SubmitRequest& req);
  // Many jobs in one call: all queued or none (the status names the first
  // job refused, "jobs[i]: ..."); with req.wait_ms, their results too.
  Result<pto::v1::SubmitBatchReply> submit_batch(const pto::v1::SubmitBatchRequest& req);
  // Submits, then follows the job to its end, calling progress on each event.
  Result<pto::v1::JobResult> run(const pto::v1::SubmitRequest& req, const Progress& progress = {});
  std::future<Result<pto::v1::JobResult>> run_async(pto::v1::SubmitRequest req, Progress progress = {});
  Result<pto::v1::JobResult> watch(uint64_t job_id, const Progress& progress);
  Result<pto::v1::JobState> cancel(uint64_t job_id);
  Result<pto::v1::JobResult> result(uint64_t job_id, uint32_t wait_ms = 0);
  Result<pto::v1::ListJobsReply> jobs(uint32_t limit = 50);
  // With filters (state, callable, label, since_ms): the newest that pass.
  Result<pto::v1::ListJobsReply> jobs(const pto::v1::ListJobsRequest& req);
  // A job's files, chunk by chunk into `sink`: its captured output (`follow`:
  // and what it writes until it ends) and its trace (Chrome trace JSON).
  using Sink = std::function<void(const std::string& chunk)>;
  Status logs(uint64_t job_id, const Sink& sink, bool follow = false);
  Status trace(uint64_t job_id, const Sink& sink);

  // Node
  Result<pto::v1::WorkersReply> workers();
  Result<pto::v1::VersionReply> version();
  Result<pto::v1::ConfigReply> config();
  // grpc.health.v1: "SERVING", "NOT_SERVING", ...
  Result<std::string> health(const std::string& service = "");

 private:
  void prepare(grpc::ClientContext* ctx, bool stream = false) const;
  // One unary call with this client's deadline and token: call(ctx, reply)
  // issues the RPC (and may extend the deadline).
  template <class Reply, class Call>
  Result<Reply> unary(Call&& call) const;
  ClientOptions o_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pto::v1::Registry::Stub> registry_;
  std::unique_ptr<pto::v1::Tensors::Stub> tensors_;
  std::unique_ptr<pto::v1::Jobs::Stub> jobs_;
  std::unique_ptr<pto::v1::Node::Stub> node_;
  // The fd socket, its staging buffer for transfers from and to plain
  // memory (kept and reused: its pages are already the process's), and the
  // lock that makes one transfer at a time use them.
  std::mutex fd_mu_;
  std::unique_ptr<FdChannel> fd_;
  SharedBuffer staging_;
  bool fd_tried_ = false;
  bool fd_socket_locked();
  Result<pto::v1::FdReply> fd_call_locked(const pto::v1::FdRequest& req, int fd, uint64_t bytes);
  // Jobs through the fd socket (fd_jobs): a connection apart from the
  // transfers', so that a submit waiting for its job never holds one up;
  // one submit at a time uses it, others meanwhile take gRPC.
  std::mutex jobs_fd_mu_;
  std::unique_ptr<FdChannel> jobs_fd_;
  std::chrono::steady_clock::time_point jobs_fd_used_{};
  // After the fd socket could not be reached or refused the connection:
  // gRPC until then (not a connection and a refusal per submit).
  std::chrono::steady_clock::time_point jobs_fd_retry_at_{};
  // The submit's result through the fd socket, or nothing: take gRPC
  // (nothing was sent, or nothing of it was done).
  std::optional<Result<pto::v1::SubmitReply>> submit_through_fd(const pto::v1::SubmitRequest& req);
};

const char* status_code_name(int code);

}  // namespace pto::client
