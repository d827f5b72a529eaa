// The gRPC services of ptod (proto/pto/v1/ptod.proto): thin translations
// between the wire messages and the daemon's parts. Every error becomes a
// gRPC status with a message; nothing a client sends can stop the daemon.
#pragma once

#include <chrono>

#include <grpcpp/grpcpp.h>

#include "callable_registry.h"
#include "config.h"
#include "fd_transfers.h"
#include "job_manager.h"
#include "principal.h"
#include "pto/v1/ptod.grpc.pb.h"
#include "stall_watch.h"
#include "tensor_store.h"

namespace ptod {

// The most jobs one SubmitBatch call may carry.
constexpr int kMaxBatchJobs = 10000;
// How long a Submit that waits drives its job's run itself (JobManager::
// wait_run) before it leaves the job to the Worker's driver and sleeps.
constexpr std::chrono::milliseconds kHelpFor{50};
// How often a SubmitBatch that waits commits the ends of its jobs that came
// meanwhile (JobManager's waiter_commits): the most their end can stay
// unseen by others after their runs ended.
constexpr std::chrono::milliseconds kBatchCommitEvery{10};
// How often a Submit that waits for its job's end looks whether its client
// hung up (a cancelled gRPC call, a closed fd socket connection).
constexpr std::chrono::milliseconds kGoneCheck{200};

grpc::Status to_grpc(const Status& s);

struct DaemonParts {
  const DaemonConfig& cfg;
  pto::Worker& worker;
  TensorStore& tensors;
  CallableRegistry& registry;
  JobManager& jobs;
  std::atomic<bool>& draining;
  const pto::RunnerPool& runners;
  const Principals& principals;
  StallWatch& stalls;  // calls whose client holds them up
};

// The request's principal; a refused token is the call's status.
grpc::Status identify(const DaemonParts& p, const grpc::ServerContextBase* ctx, Principal* who);

// A stream's writes under the watch: cancelled when its client reads
// nothing for [server] write_stall_timeout_s.
StallWatch::Call watch_writes(const DaemonParts& p, grpc::ServerContext* ctx);
// The status of a stream whose write failed: the watch cancelled it (logged,
// naming `what` and the limit), or the client went away.
grpc::Status write_failed(const StallWatch::Call& call, const std::string& what);

class RegistryService final : public pto::v1::Registry::Service {
 public:
  explicit RegistryService(DaemonParts p) : p_(p) {}
  grpc::Status Register(grpc::ServerContext*, const pto::v1::RegisterRequest*, pto::v1::RegisterReply*) override;
  grpc::Status Unregister(grpc::ServerContext*, const pto::v1::UnregisterRequest*, pto::v1::UnregisterReply*) override;
  grpc::Status List(grpc::ServerContext*, const pto::v1::ListCallablesRequest*, pto::v1::ListCallablesReply*) override;
  grpc::Status Publish(grpc::ServerContext*, const pto::v1::PublishRequest*, pto::v1::PublishReply*) override;

 private:
  DaemonParts p_;
};

// Download is served as raw bytes (tensor_streams.h): its chunks are written
// as wire bytes over the tensor's pages, by a sync handler that reads its
// request and writes its chunks as grpc::ByteBuffer (the generated service's
// Download is replaced: it is never called). Not a callback method: one
// would bring gRPC's callback threads into the daemon (docs/daemon.md).
// Upload stays a generated sync method: read as raw bytes it ran slower
// (docs/proto.md).
class TensorsService final : public pto::v1::Tensors::Service {
 public:
  explicit TensorsService(DaemonParts p);
  grpc::Status Upload(grpc::ServerContext*, grpc::ServerReader<pto::v1::UploadChunk>*, pto::v1::TensorInfo*) override;
  grpc::Status Alloc(grpc::ServerContext*, const pto::v1::AllocRequest*, pto::v1::TensorInfo*) override;
  grpc::Status Free(grpc::ServerContext*, const pto::v1::FreeTensorRequest*, pto::v1::FreeTensorReply*) override;
  grpc::Status List(grpc::ServerContext*, const pto::v1::ListTensorsRequest*, pto::v1::ListTensorsReply*) override;

 private:
  DaemonParts p_;
};

// Also the fd socket's SUBMIT (FdJobHost): one Submit, two ways in.
class JobsService final : public pto::v1::Jobs::Service, public FdJobHost {
 public:
  explicit JobsService(DaemonParts p) : p_(p) {}
  grpc::Status Submit(grpc::ServerContext*, const pto::v1::SubmitRequest*, pto::v1::SubmitReply*) override;
  grpc::Status submit_job(const Principal& who, const pto::v1::SubmitRequest& req, pto::v1::SubmitReply* reply,
                          const std::function<bool()>& gone);
  grpc::Status start_job(const Principal& who, const pto::v1::SubmitRequest& req, Job* job) override;
  bool drive_job(const Job& job, std::chrono::steady_clock::time_point bound) override;
  grpc::Status finish_job(Job& job, const std::function<bool()>& gone) override;
  void abandon_job(uint64_t job_id) override;
  uint32_t concurrent_jobs() const override { return static_cast<uint32_t>(p_.cfg.max_running); }
  grpc::Status SubmitBatch(grpc::ServerContext*, const pto::v1::SubmitBatchRequest*,
                           pto::v1::SubmitBatchReply*) override;
  grpc::Status Watch(grpc::ServerContext*, const pto::v1::WatchRequest*,
                     grpc::ServerWriter<pto::v1::JobEvent>*) override;
  grpc::Status Cancel(grpc::ServerContext*, const pto::v1::CancelRequest*, pto::v1::CancelReply*) override;
  grpc::Status Result(grpc::ServerContext*, const pto::v1::ResultRequest*, pto::v1::JobResult*) override;
  grpc::Status List(grpc::ServerContext*, const pto::v1::ListJobsRequest*, pto::v1::ListJobsReply*) override;
  grpc::Status Logs(grpc::ServerContext*, const pto::v1::JobFileRequest*,
                    grpc::ServerWriter<pto::v1::FileChunk>*) override;
  grpc::Status Trace(grpc::ServerContext*, const pto::v1::JobFileRequest*,
                     grpc::ServerWriter<pto::v1::FileChunk>*) override;

 private:
  // The caller and job `id` as it may see it (NOT_FOUND for another's job).
  grpc::Status visible_job(grpc::ServerContext* ctx, uint64_t id, Principal* who, pto::v1::JobResult* r);
  // Waits until the runs of a batch's jobs ended, `until`, the client is
  // gone() or the daemon stops, committing their ends every
  // kBatchCommitEvery meanwhile.
  void await_batch(const std::vector<JobManager::Queued>& jobs, std::chrono::steady_clock::time_point until,
                   const std::function<bool()>& gone);
  // Waits (bounded by wait_ms, and until the client is gone()) for a final state.
  Status wait_final(const std::function<bool()>& gone, const Principal& who, uint64_t id, uint32_t wait_ms,
                    pto::v1::JobResult* out);
  // The job a request describes, its tensors pinned (spec->pinned); on error
  // nothing stays pinned.
  grpc::Status job_spec(const Principal& who, const pto::v1::SubmitRequest& req, JobSpec* spec);
  // Fills reply's state and result once the job ended, waiting up to `until`.
  void wait_reply(const std::function<bool()>& gone, const Principal& who,
                  std::chrono::steady_clock::time_point until, pto::v1::SubmitReply* reply);
  DaemonParts p_;
};

class NodeService final : public pto::v1::Node::Service {
 public:
  explicit NodeService(DaemonParts p) : p_(p) {}
  grpc::Status Workers(grpc::ServerContext*, const pto::v1::WorkersRequest*, pto::v1::WorkersReply*) override;
  grpc::Status Version(grpc::ServerContext*, const pto::v1::VersionRequest*, pto::v1::VersionReply*) override;
  grpc::Status Config(grpc::ServerContext*, const pto::v1::ConfigRequest*, pto::v1::ConfigReply*) override;

 private:
  DaemonParts p_;
};

}  // namespace ptod
