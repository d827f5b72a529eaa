#include "services.h"

#include "pto/base/crc32c.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <tuple>

#include "log.h"
#include "names.h"
#include "pto/version.h"
#include "session_service.h"
#include "submit_args.h"
#include "tensor_streams.h"
#include "wire_enums.h"


namespace ptod {
grpc::Status to_grpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (s.code) {
    case pto::kWorkerInvalidArgument:
    case pto::kWorkerInvalidConfig:
    case pto::kInvalidArgument:
    case pto::kInvalidConfig: c = grpc::StatusCode::INVALID_ARGUMENT; break;
    case pto::kWorkerNotRegistered: c = grpc::StatusCode::NOT_FOUND; break;
    case pto::kWorkerHeapExhausted:
    case pto::kQueueFull: c = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case pto::kWorkerClosed:
    case pto::kUnavailable: c = grpc::StatusCode::UNAVAILABLE; break;
    case pto::kWorkerTimeout: c = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case pto::kWorkerChildFailed: c = grpc::StatusCode::FAILED_PRECONDITION; break;
    case pto::kRefused: c = grpc::StatusCode::PERMISSION_DENIED; break;
    case pto::kInUse: c = grpc::StatusCode::FAILED_PRECONDITION; break;
    case pto::kUnauthenticated: c = grpc::StatusCode::UNAUTHENTICATED; break;
    case pto::kQuotaExceeded: c = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case pto::kAlreadyExists: c = grpc::StatusCode::ALREADY_EXISTS; break;
    case pto::kOutcomeUnknown: c = grpc::StatusCode::UNKNOWN; break;
    default: break;
  }
  return grpc::Status(c, s.message);
}

grpc::Status identify(const DaemonParts& p, const grpc::ServerContextBase* ctx, Principal* who) {
  if (Status s = p.principals.of(*ctx, who); !s.ok()) {
    log("main")->warn("request from {} refused: {}", ctx->peer(), s.message);
    return to_grpc(s);
  }
  return grpc::Status::OK;
}

StallWatch::Call watch_writes(const DaemonParts& p, grpc::ServerContext* ctx) {
  return StallWatch::Call(p.stalls, ctx, std::chrono::seconds(p.cfg.write_stall_timeout_s),
                          StallWatch::Call::Counts::kWriting);
}

grpc::Status write_failed(const StallWatch::Call& call, const std::string& what) {
  if (!call.timed_out()) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  const std::string m = fmt::format("{}: the client read nothing for {} s ([server] write_stall_timeout_s); cancelled",
                                    what, call.limit().count());
  log("main")->warn("{}", m);
  return grpc::Status(grpc::StatusCode::CANCELLED, m);
}

// ---------------------------------------------------------------- Registry

grpc::Status RegistryService::Register(grpc::ServerContext* ctx, const pto::v1::RegisterRequest* req,
                                       pto::v1::RegisterReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  Status s = p_.registry.add(who, *req, reply);
  if (s.ok())
    log("registry")
        ->info("callable {} registered by {}{}{}",
               pto::to_hex(*reinterpret_cast<const pto::Digest*>(reply->identity().digest().data())).substr(0, 16),
               who.name, reply->name().empty() ? "" : " as '" + reply->name() + "'",
               reply->existed() ? " (existed)" : "");
  else
    log("registry")->warn("register by {} refused: {}", who.name, s.message);
  return to_grpc(s);
}

grpc::Status RegistryService::Unregister(grpc::ServerContext* ctx, const pto::v1::UnregisterRequest* req,
                                         pto::v1::UnregisterReply*) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  return to_grpc(p_.registry.remove(who, req->callable()));
}

grpc::Status RegistryService::Publish(grpc::ServerContext* ctx, const pto::v1::PublishRequest* req,
                                      pto::v1::PublishReply*) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  return to_grpc(p_.registry.publish(who, req->callable(), req->published()));
}

grpc::Status RegistryService::List(grpc::ServerContext* ctx, const pto::v1::ListCallablesRequest*,
                                   pto::v1::ListCallablesReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  for (const RegisteredCallable& rc : p_.registry.list(who)) {
    pto::v1::CallableInfo* ci = reply->add_callables();
    ci->mutable_identity()->set_digest(std::string(reinterpret_cast<const char*>(rc.handle.id.digest.data()), 32));
    ci->mutable_identity()->set_kind(to_wire(rc.handle.id.kind));
    ci->mutable_identity()->set_target_namespace(to_wire(rc.handle.id.target_namespace));
    ci->set_name(rc.name);
    ci->set_abi(to_wire(rc.abi));
    ci->set_source(rc.source);
    for (const std::string& o : rc.owners) ci->add_owners(o);
    ci->set_published(rc.published);
  }
  return grpc::Status::OK;
}

// ----------------------------------------------------------------- Tensors

TensorsService::TensorsService(DaemonParts p) : p_(p) {
  // The method's index in the service, as the generated code numbers them:
  // the .proto's order.
  const int download = pto::v1::DownloadRequest::descriptor()
                           ->file()
                           ->FindServiceByName("Tensors")
                           ->FindMethodByName("Download")
                           ->index();
  MarkMethodStreamed(download, new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                                   [this](grpc::ServerContext* ctx, DownloadStream* stream) {
                                     return serve_download(p_, ctx, stream);
                                   }));
}

grpc::Status TensorsService::Upload(grpc::ServerContext* ctx, grpc::ServerReader<pto::v1::UploadChunk>* reader,
                                    pto::v1::TensorInfo* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  StallWatch::Call watched(p_.stalls, ctx, std::chrono::seconds(p_.cfg.upload_idle_timeout_s),
                           StallWatch::Call::Counts::kIdle);
  pto::v1::UploadChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "upload: the first message must be the header");
  watched.touch();
  const auto& h = chunk.header();
  TensorEntry e;
  // Invisible, and not freeable by anyone else, until committed below.
  if (Status s = p_.tensors.create(who, h.name(), std::vector<uint32_t>(h.shape().begin(), h.shape().end()), h.dtype(),
                                   &e, true);
      !s.ok())
    return to_grpc(Status::Error(s.code, "upload: " + s.message));
  auto fail = [&](grpc::StatusCode code, const std::string& m) {
    p_.tensors.abandon(e.id);
    return grpc::Status(code, m);
  };
  uint64_t got = 0;
  uint32_t crc = 0;
  bool trailer = false;
  while (reader->Read(&chunk)) {
    watched.touch();
    if (trailer) return fail(grpc::StatusCode::INVALID_ARGUMENT, "upload: a message after the trailer");
    if (chunk.has_header()) return fail(grpc::StatusCode::INVALID_ARGUMENT, "upload: a second header");
    if (chunk.has_trailer()) {
      trailer = true;
      if (got != e.bytes)
        return fail(grpc::StatusCode::INVALID_ARGUMENT,
                    fmt::format("upload: {} bytes received, shape x dtype needs {}", got, e.bytes));
      if (chunk.trailer().crc32c() != crc)
        return fail(grpc::StatusCode::DATA_LOSS,
                    fmt::format("upload: the bytes received have CRC-32C {:08x}, the trailer says {:08x}", crc,
                                chunk.trailer().crc32c()));
      continue;
    }
    const std::string& d = chunk.data();
    if (d.size() > e.bytes - got)
      return fail(grpc::StatusCode::INVALID_ARGUMENT,
                  fmt::format("upload: more than the {} bytes of shape x dtype", e.bytes));
    if (Status s = p_.tensors.write(e, got, d.data(), d.size()); !s.ok())
      return fail(grpc::StatusCode::INTERNAL, "upload: " + s.message);
    crc = pto::crc32c(crc, d.data(), d.size());
    got += d.size();
  }
  if (watched.timed_out()) {
    log("tensors")->warn("upload of tensor {} dropped: nothing received for {} s ({} of {} bytes)", e.id,
                         watched.limit().count(), got, e.bytes);
    return fail(grpc::StatusCode::CANCELLED,
                fmt::format("upload: nothing received for {} s ([server] upload_idle_timeout_s); dropped",
                            watched.limit().count()));
  }
  // Read() also ends when the call does (cancelled by its client, its
  // deadline passed, its connection lost): the client was told the upload
  // failed, so nothing of it stays - the trailer may have come all the
  // same. Only a client that half-closed after its trailer is answered
  // with the tensor.
  if (ctx->IsCancelled()) {
    log("tensors")->info("upload of tensor {} dropped: its call ended before the client half-closed ({} of {} bytes)",
                         e.id, got, e.bytes);
    return fail(grpc::StatusCode::CANCELLED,
                "upload: the call was cancelled, or its deadline passed, before the client half-closed; dropped");
  }
  if (!trailer)
    return fail(grpc::StatusCode::INVALID_ARGUMENT,
                got == e.bytes ? "upload: no trailer: the last message must carry the CRC-32C of the bytes"
                               : fmt::format("upload: {} bytes received, shape x dtype needs {}", got, e.bytes));
  if (Status s = p_.tensors.commit(e.id); !s.ok()) return fail(grpc::StatusCode::INTERNAL, "upload: " + s.message);
  to_proto(e, reply);
  log("tensors")->debug("tensor {} uploaded ({} bytes, CRC-32C {:08x})", e.id, e.bytes, crc);
  return grpc::Status::OK;
}

grpc::Status TensorsService::Alloc(grpc::ServerContext* ctx, const pto::v1::AllocRequest* req,
                                   pto::v1::TensorInfo* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  TensorEntry e;
  if (Status s = p_.tensors.create(who, req->name(), std::vector<uint32_t>(req->shape().begin(), req->shape().end()),
                                   req->dtype(), &e);
      !s.ok())
    return to_grpc(s);
  to_proto(e, reply);
  return grpc::Status::OK;
}

grpc::Status TensorsService::Free(grpc::ServerContext* ctx, const pto::v1::FreeTensorRequest* req,
                                  pto::v1::FreeTensorReply*) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  return to_grpc(p_.tensors.free(who, req->tensor().id(), req->tensor().name()));
}

grpc::Status TensorsService::List(grpc::ServerContext* ctx, const pto::v1::ListTensorsRequest*,
                                  pto::v1::ListTensorsReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  for (const TensorEntry& e : p_.tensors.list(who)) to_proto(e, reply->add_tensors());
  const pto::WorkerStats st = p_.worker.stats();
  reply->set_arena_bytes(st.arena_bytes);
  reply->set_arena_in_use(st.arena_in_use);
  return grpc::Status::OK;
}

// -------------------------------------------------------------------- Jobs

grpc::Status JobsService::job_spec(const Principal& who, const pto::v1::SubmitRequest& req, JobSpec* spec) {
  if (Status s = p_.registry.find(who, req.callable(), &spec->callable); !s.ok()) return to_grpc(s);
  if (Status s = check_name("label", req.label()); !s.ok()) return to_grpc(s);
  const auto& c = req.config();
  if (!c.output_prefix().empty()) {
    // ptod decides where a job's files go (its trace under the state directory).
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "config.output_prefix is chosen by ptod (the trace goes under its state directory); leave it "
                        "empty");
  }
  JobArgs job;
  const auto resolve = [&](const pto::v1::TensorRef& ref, pto::ContinuousTensor* t, TensorEntry* e) {
    return p_.tensors.view_and_pin(who, ref.tensor().id(), ref.tensor().name(), ref.offset_bytes(),
                                   std::vector<uint32_t>(ref.shape().begin(), ref.shape().end()), ref.dtype(),
                                   ref.has_dtype(), t, e);
  };
  if (Status s = job_args_from_proto(req.args(), resolve, &job); !s.ok()) {
    for (uint64_t id : job.pinned) p_.tensors.pin(id, -1);
    return to_grpc(s);
  }
  if (spec->callable.abi == pto::EntryAbi::CHIP) {
    const std::string called =
        req.callable().name().empty() ? spec->callable.handle.id.short_hex() : req.callable().name();
    if (Status s = check_chip_signature(called, spec->callable.signature, job.args); !s.ok()) {
      for (uint64_t id : job.pinned) p_.tensors.pin(id, -1);
      return to_grpc(s);
    }
  }
  spec->args = std::move(job.args);
  spec->outputs = std::move(job.outputs);
  spec->config.block_dim = c.block_dim();
  spec->config.aicpu_thread_num = c.aicpu_thread_num();
  spec->config.enable_profiling = c.enable_profiling();
  spec->config.timeout_ms = c.timeout_ms();
  spec->label = req.label();
  spec->options.priority = from_wire(req.priority());
  spec->options.deadline_ms = req.deadline_ms();
  spec->options.task_timeout_ms = c.timeout_ms();  // every task of the job, its orchestration's submits too
  spec->options.principal = who.name;  // fair sharing and ownership
  // The job manager takes over the pins (and releases them when the job ends).
  spec->pinned = std::move(job.pinned);
  return grpc::Status::OK;
}

void JobsService::wait_reply(const std::function<bool()>& gone, const Principal& who,
                             std::chrono::steady_clock::time_point until, pto::v1::SubmitReply* reply) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  pto::v1::JobResult r;
  if (Status s = wait_final(gone, who, reply->job_id(), static_cast<uint32_t>(std::max<int64_t>(left.count(), 0)), &r);
      s.ok()) {
    reply->set_state(r.state());
    if (final_state(r.state())) reply->mutable_result()->Swap(&r);
  }
}

grpc::Status JobsService::Submit(grpc::ServerContext* ctx, const pto::v1::SubmitRequest* req,
                                 pto::v1::SubmitReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  return submit_job(who, *req, reply, [ctx] { return ctx->IsCancelled(); });
}

grpc::Status JobsService::submit_job(const Principal& who, const pto::v1::SubmitRequest& req,
                                     pto::v1::SubmitReply* reply, const std::function<bool()>& gone) {
  Job job;
  if (grpc::Status s = start_job(who, req, &job); !s.ok()) return s;
  grpc::Status s = finish_job(job, gone);
  reply->Swap(&job.reply);
  return s;
}

grpc::Status JobsService::start_job(const Principal& who, const pto::v1::SubmitRequest& req, Job* job) {
  if (p_.draining) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon is draining: it accepts no new jobs");
  JobSpec spec;
  if (grpc::Status bad = job_spec(who, req, &spec); !bad.ok()) return bad;
  const std::vector<uint64_t> pinned = spec.pinned;
  uint64_t id = 0;
  uint32_t pos = 0;
  // With a wait the id reaches the client only with the reply: the job's
  // record may be committed with its end (one commit, not two) or by
  // finish_job's flush, either before the reply (the fd socket's job loop:
  // all of a round's records at its first flush). Without one it is
  // committed here; the job then has a run thread, nobody waiting drives it.
  job->waits = req.wait_ms() > 0;
  if (Status s = p_.jobs.submit(std::move(spec), &id, &pos, job->waits); !s.ok()) {
    for (uint64_t t : pinned) p_.tensors.pin(t, -1);
    return to_grpc(s);
  }
  job->who = who;
  job->started = std::chrono::steady_clock::now();
  job->until = job->started + std::chrono::milliseconds(req.wait_ms());
  job->reply.set_job_id(id);
  job->reply.set_queue_position(pos);
  job->reply.set_state(pto::v1::QUEUED);
  return grpc::Status::OK;
}

bool JobsService::drive_job(const Job& job, std::chrono::steady_clock::time_point bound) {
  return !job.waits || p_.jobs.wait_run(job.reply.job_id(), std::min(job.until, bound));
}

grpc::Status JobsService::finish_job(Job& job, const std::function<bool()>& gone) {
  // A short job ends on this thread (its run driven from here); a long
  // one is handed to the Worker's own driver after kHelpFor.
  if (job.waits) p_.jobs.wait_run(job.reply.job_id(), std::min(job.until, job.started + kHelpFor));
  // Its record, and its end's if it ended, committed (with the ends of the
  // jobs this thread drove meanwhile) before its end can be seen: the reply
  // waits for that.
  if (Status s = p_.jobs.flush_records(job.reply.job_id()); !s.ok()) return to_grpc(s);
  if (job.waits) wait_reply(gone, job.who, job.until, &job.reply);
  return grpc::Status::OK;
}

void JobsService::abandon_job(uint64_t job_id) { p_.jobs.release_records(job_id); }

grpc::Status JobsService::SubmitBatch(grpc::ServerContext* ctx, const pto::v1::SubmitBatchRequest* req,
                                      pto::v1::SubmitBatchReply* reply) {
  if (p_.draining) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon is draining: it accepts no new jobs");
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  const int n = req->jobs_size();
  if (n == 0 || n > kMaxBatchJobs)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        fmt::format("a batch holds 1 to {} jobs, not {}", kMaxBatchJobs, n));
  std::vector<JobSpec> specs(static_cast<size_t>(n));
  std::vector<uint64_t> pinned;
  const auto release = [&] {
    for (uint64_t t : pinned) p_.tensors.pin(t, -1);
  };
  for (int i = 0; i < n; ++i) {
    const pto::v1::SubmitRequest& one = req->jobs(i);
    grpc::Status bad = one.wait_ms() ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                                    fmt::format("wait_ms is {}: set it on the batch, not on a job",
                                                                one.wait_ms()))
                                     : job_spec(who, one, &specs[size_t(i)]);
    if (!bad.ok()) {
      release();
      return grpc::Status(bad.error_code(), fmt::format("jobs[{}]: {}", i, bad.error_message()));
    }
    pinned.insert(pinned.end(), specs[size_t(i)].pinned.begin(), specs[size_t(i)].pinned.end());
  }
  std::vector<JobManager::Queued> queued;
  // A waiting caller commits its jobs' ends (waiter_commits): none of
  // the writer thread's wake-ups and gathers per few jobs. It also commits
  // their first records, with the first ends (acknowledge_later), so its
  // first jobs run while the rest are made; it answers after flush_batch.
  const bool waits = req->wait_ms() > 0;
  if (Status s = p_.jobs.submit_batch(std::move(specs), &queued, waits, waits); !s.ok()) {
    release();
    return to_grpc(s);
  }
  // However this call ends, the jobs' ends then commit themselves, and are
  // trimmed as any other once this reply has read them.
  struct Release {
    JobManager& jobs;
    const std::vector<JobManager::Queued>& queued;
    bool waits;
    bool reads;
    ~Release() {
      if (waits) jobs.release_waiters(queued);
      if (reads) jobs.done_reading(queued);
    }
  } released{p_.jobs, queued, waits, waits};
  for (const JobManager::Queued& q : queued) {
    pto::v1::SubmitReply* r = reply->add_jobs();
    r->set_job_id(q.id);
    r->set_queue_position(q.position);
    r->set_state(pto::v1::QUEUED);
  }
  if (req->wait_ms() > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(req->wait_ms());
    // The last job first: jobs start in order, so once it has ended the
    // others mostly have too, and this thread wakes about once per batch
    // instead of once per job.
    auto& jobs = *reply->mutable_jobs();
    const auto gone = [ctx] { return ctx->IsCancelled(); };
    await_batch(queued, until, gone);
    p_.jobs.release_waiters(queued);
    released.waits = false;
    if (Status s = p_.jobs.flush_batch(queued); !s.ok()) return to_grpc(s);
    const std::vector<size_t> open =
        p_.jobs.ended_results(who, queued, [&](size_t i) { return jobs[int(i)].mutable_result(); });
    for (auto it = open.rbegin(); it != open.rend(); ++it) wait_reply(gone, who, until, &jobs[int(*it)]);
    // The ended ones' states, from their results.
    for (pto::v1::SubmitReply& r : jobs)
      if (r.has_result()) r.set_state(r.result().state());
  }
  return grpc::Status::OK;
}

void JobsService::await_batch(const std::vector<JobManager::Queued>& jobs, std::chrono::steady_clock::time_point until,
                              const std::function<bool()>& gone) {
  using Clock = std::chrono::steady_clock;
  // The last job first (see SubmitBatch). The ends that came meanwhile are
  // committed every kBatchCommitEvery, so that others see them (Jobs.Result,
  // Watch) that late at most, whichever order the runs end in.
  auto next_commit = Clock::now() + kBatchCommitEvery;
  for (auto job = jobs.rbegin(); job != jobs.rend();) {
    const auto bound = std::min(until, next_commit);
    const bool ended = p_.jobs.wait_run(job->id, bound);
    const auto now = Clock::now();
    if (now >= next_commit) {
      p_.jobs.commit_queued();
      next_commit = Clock::now() + kBatchCommitEvery;  // after the commit: a slow one is not followed at once
    }
    // A job without a run to wait for (none has: submit_batch gives each
    // its handle) is passed over rather than waited for in a spin.
    if (ended || now < bound) {
      ++job;
      continue;
    }
    if (now >= until || gone() || p_.jobs.stopping()) return;
  }
}

Status JobsService::wait_final(const std::function<bool()>& gone, const Principal& who, uint64_t id, uint32_t wait_ms,
                               pto::v1::JobResult* out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  uint64_t version = 0;
  for (;;) {
    pto::v1::JobEvent ev;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    // A job changes state twice at most while it is waited for: between the
    // changes, a client that hung up is looked for every kGoneCheck, so its
    // thread (and its fd socket connection) is not held until the job ends.
    const auto slice = std::clamp(left, std::chrono::milliseconds(0), kGoneCheck);
    if (Status s = p_.jobs.wait_event(who, id, &version, slice, &ev); !s.ok()) return s;
    if (final_state(ev.state())) {
      out->Swap(ev.mutable_result());
      return Status::Ok();
    }
    if (std::chrono::steady_clock::now() >= deadline || gone()) return p_.jobs.result(who, id, out);
  }
}

grpc::Status JobsService::Watch(grpc::ServerContext* ctx, const pto::v1::WatchRequest* req,
                                grpc::ServerWriter<pto::v1::JobEvent>* writer) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  uint64_t version = 0;
  // What the client was last told: an event goes out only when it differs
  // (the job's state, its tasks, its chips' tasks, its place in the queue).
  auto progress_of = [](const pto::v1::JobEvent& e) {
    return std::make_tuple(e.state(), e.tasks_done(), e.tasks_total(), e.chip_tasks_done(), e.chip_tasks_total(),
                           e.queue_position());
  };
  std::optional<decltype(progress_of(pto::v1::JobEvent()))> last;
  StallWatch::Call watched = watch_writes(p_, ctx);
  for (;;) {
    if (watched.timed_out()) return write_failed(watched, fmt::format("watch of job {}", req->job_id()));
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
    pto::v1::JobEvent ev;
    if (Status s = p_.jobs.wait_event(who, req->job_id(), &version, std::chrono::milliseconds(20), &ev); !s.ok())
      return to_grpc(s);
    if (!last || *last != progress_of(ev)) {
      if (!watched.write(writer, ev)) return write_failed(watched, fmt::format("watch of job {}", req->job_id()));
      last = progress_of(ev);
    }
    if (final_state(ev.state())) return grpc::Status::OK;
  }
}

grpc::Status JobsService::Cancel(grpc::ServerContext* ctx, const pto::v1::CancelRequest* req,
                                 pto::v1::CancelReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  pto::v1::JobState st;
  if (Status s = p_.jobs.cancel(who, req->job_id(), &st); !s.ok()) return to_grpc(s);
  reply->set_state(st);
  return grpc::Status::OK;
}

grpc::Status JobsService::Result(grpc::ServerContext* ctx, const pto::v1::ResultRequest* req,
                                 pto::v1::JobResult* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  if (req->wait_ms() == 0) return to_grpc(p_.jobs.result(who, req->job_id(), reply));
  return to_grpc(wait_final([ctx] { return ctx->IsCancelled(); }, who, req->job_id(), req->wait_ms(), reply));
}

grpc::Status JobsService::List(grpc::ServerContext* ctx, const pto::v1::ListJobsRequest* req,
                               pto::v1::ListJobsReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  for (auto& j : p_.jobs.list(who, *req)) *reply->add_jobs() = std::move(j);
  return grpc::Status::OK;
}

namespace {

// Sends `path` from `*offset` on in chunks of at most 1 MiB; a file not
// there yet reads as empty. False when the client went away, or read
// nothing for the watch's limit.
bool send_file_from(const std::string& path, uint64_t* offset, grpc::ServerWriter<pto::v1::FileChunk>* writer,
                    StallWatch::Call& watched) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || size <= *offset) return true;  // nothing (new) to send: a follower's poll costs a stat
  std::ifstream f(path, std::ios::binary);
  if (!f) return true;
  f.seekg(static_cast<std::streamoff>(*offset));
  std::string buf(std::min<uint64_t>(size - *offset, 1 << 20), '\0');
  for (;;) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = f.gcount();
    if (n <= 0) return true;
    pto::v1::FileChunk chunk;
    chunk.set_data(buf.data(), static_cast<size_t>(n));
    if (!watched.write(writer, chunk)) return false;
    *offset += static_cast<uint64_t>(n);
  }
}

}  // namespace

grpc::Status JobsService::visible_job(grpc::ServerContext* ctx, uint64_t id, Principal* who, pto::v1::JobResult* r) {
  if (grpc::Status denied = identify(p_, ctx, who); !denied.ok()) return denied;
  return to_grpc(p_.jobs.result(*who, id, r));
}

grpc::Status JobsService::Logs(grpc::ServerContext* ctx, const pto::v1::JobFileRequest* req,
                               grpc::ServerWriter<pto::v1::FileChunk>* writer) {
  Principal who;
  pto::v1::JobResult r;
  if (grpc::Status s = visible_job(ctx, req->job_id(), &who, &r); !s.ok()) return s;
  const std::string path = p_.jobs.log_path(req->job_id());
  if (path.empty())
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this daemon does not capture jobs' output ([jobs] capture_output = false)");
  uint64_t offset = 0;
  StallWatch::Call watched = watch_writes(p_, ctx);
  // Following: what is written now, then every 100 ms what was added, until
  // the job ended (the last read after it ended takes the rest) or the
  // client went away.
  for (;;) {
    const bool ended = final_state(r.state());
    if (!send_file_from(path, &offset, writer, watched))
      return write_failed(watched, fmt::format("log of job {}", req->job_id()));
    if (!req->follow() || ended) return grpc::Status::OK;
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "logs cancelled");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (Status s = p_.jobs.result(who, req->job_id(), &r); !s.ok()) return grpc::Status::OK;  // no longer retained
  }
}

grpc::Status JobsService::Trace(grpc::ServerContext* ctx, const pto::v1::JobFileRequest* req,
                                grpc::ServerWriter<pto::v1::FileChunk>* writer) {
  Principal who;
  pto::v1::JobResult r;
  if (grpc::Status s = visible_job(ctx, req->job_id(), &who, &r); !s.ok()) return s;
  if (r.trace_path().empty())
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        fmt::format("job {} has no trace: submit it with profiling (ptoctl submit --trace, "
                                    "config.enable_profiling)",
                                    req->job_id()));
  if (!final_state(r.state()))
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        fmt::format("job {} is {}: its trace is written when it ends", req->job_id(),
                                    pto::v1::JobState_Name(r.state())));
  if (!std::filesystem::exists(r.trace_path()))
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        fmt::format("job {} wrote no trace (its chip task did not run to the end)", req->job_id()));
  uint64_t offset = 0;
  StallWatch::Call watched = watch_writes(p_, ctx);
  if (!send_file_from(r.trace_path(), &offset, writer, watched))
    return write_failed(watched, fmt::format("trace of job {}", req->job_id()));
  return grpc::Status::OK;
}

// -------------------------------------------------------------------- Node

// Anyone may ask these; a token that names no one is still refused, as on
// every other service.
grpc::Status NodeService::Workers(grpc::ServerContext* ctx, const pto::v1::WorkersRequest*,
                                  pto::v1::WorkersReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  fill_worker_tree(p_, reply->mutable_root());
  return grpc::Status::OK;
}

grpc::Status NodeService::Version(grpc::ServerContext* ctx, const pto::v1::VersionRequest*,
                                  pto::v1::VersionReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  reply->set_version(PTO_VERSION);
  reply->set_protocol("pto.v1");
  return grpc::Status::OK;
}

grpc::Status NodeService::Config(grpc::ServerContext* ctx, const pto::v1::ConfigRequest*, pto::v1::ConfigReply* reply) {
  Principal who;
  if (grpc::Status denied = identify(p_, ctx, &who); !denied.ok()) return denied;
  reply->set_effective_toml(p_.cfg.effective_toml());
  return grpc::Status::OK;
}

}  // namespace ptod
