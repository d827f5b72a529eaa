#include "pto/client.h"

#include "pto/base/crc32c.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <toml++/toml.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fd_channel.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc_status.h"
#include "pto/package/chip_package.h"
#include "tensor_streams.h"

namespace pto::client {
namespace {

Status local_error(std::string m) {
  return Status::Error(static_cast<int32_t>(grpc::StatusCode::INVALID_ARGUMENT), std::move(m));
}

bool read_all(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace

const char* status_code_name(int code) {
  static const char* names[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? names[code] : "?";
}

Client::Client(const ClientOptions& o) : o_(o) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (o.tls) {
    grpc::SslCredentialsOptions so;
    std::string s;
    if (!o.tls_ca.empty() && read_all(o.tls_ca, &s)) so.pem_root_certs = s;
    if (!o.tls_cert.empty() && read_all(o.tls_cert, &s)) so.pem_cert_chain = s;
    if (!o.tls_key.empty() && read_all(o.tls_key, &s)) so.pem_private_key = s;
    creds = grpc::SslCredentials(so);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // Watch streams carry no deadline (a job may run for long): keepalive pings
  // notice a daemon whose host vanished without closing the connection.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  channel_ = grpc::CreateCustomChannel(o.address, creds, args);
  registry_ = pto::v1::Registry::NewStub(channel_);
  tensors_ = pto::v1::Tensors::NewStub(channel_);
  jobs_ = pto::v1::Jobs::NewStub(channel_);
  node_ = pto::v1::Node::NewStub(channel_);
}

void Client::prepare(grpc::ClientContext* ctx, bool stream) const {
  if (!stream) ctx->set_deadline(std::chrono::system_clock::now() + o_.timeout);
  if (!o_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + o_.token);
}

template <class Reply, class Call>
Result<Reply> Client::unary(Call&& call) const {
  Result<Reply> r;
  grpc::ClientContext ctx;
  prepare(&ctx);
  r.status = from_grpc(call(&ctx, &r.value));
  return r;
}

// ---------------------------------------------------------------- Registry

Result<pto::v1::RegisterReply> Client::register_callable(const pto::v1::RegisterRequest& req) {
  return unary<pto::v1::RegisterReply>([&](auto* ctx, auto* out) { return registry_->Register(ctx, req, out); });
}

// The bundle is the config plus every library it names ([orchestration],
// [[kernels]], [golden]), sent by file name; the config's paths are rewritten
// to those names so the daemon finds them next to its copy.
namespace {
void place(const Placement& where, pto::v1::RegisterRequest* req) {
  req->set_max_retries(where.max_retries);
  req->set_next_level(where.next_level);
  for (uint32_t p : where.peers) req->add_peers(p);
  req->set_publish(where.publish);
}
}  // namespace

Result<pto::v1::RegisterReply> Client::register_chip(const std::string& kernels_toml, const std::string& name,
                                                     const Placement& where) {
  Result<pto::v1::RegisterReply> r;
  package::ChipBundle b;
  if (pto::Status s = package::bundle_package(kernels_toml, &b); !s.ok()) {
    r.status = local_error(s.message);
    return r;
  }
  pto::v1::RegisterRequest req;
  req.set_name(name);
  req.set_abi(pto::v1::ABI_CHIP);
  place(where, &req);
  auto* bundle = req.mutable_chip();
  bundle->set_config_toml(b.config_toml);
  for (auto& [file, bytes] : b.libraries) (*bundle->mutable_libraries())[file] = std::move(bytes);
  return register_callable(req);
}

Result<pto::v1::RegisterReply> Client::register_import(const std::string& library, const std::string& symbol,
                                                       const std::string& name, bool orchestration,
                                                       const Placement& where) {
  pto::v1::RegisterRequest req;
  place(where, &req);
  req.set_name(name);
  req.set_abi(orchestration ? pto::v1::ABI_ORCHESTRATION : pto::v1::ABI_SUB);
  req.mutable_native_import()->set_library_path(std::filesystem::absolute(library).string());
  req.mutable_native_import()->set_symbol(symbol);
  return register_callable(req);
}

Result<pto::v1::RegisterReply> Client::register_blob(const std::string& library_file, const std::string& symbol,
                                                     const std::string& name, bool orchestration,
                                                     const Placement& where) {
  pto::v1::RegisterRequest req;
  place(where, &req);
  req.set_name(name);
  req.set_abi(orchestration ? pto::v1::ABI_ORCHESTRATION : pto::v1::ABI_SUB);
  std::string bytes;
  if (!read_all(library_file, &bytes)) {
    Result<pto::v1::RegisterReply> r;
    r.status = local_error(fmt::format("cannot read '{}'", library_file));
    return r;
  }
  req.mutable_native_blob()->set_library(bytes);
  req.mutable_native_blob()->set_symbol(symbol);
  return register_callable(req);
}

Status Client::unregister(const pto::v1::CallableRef& ref) {
  pto::v1::UnregisterRequest req;
  *req.mutable_callable() = ref;
  return unary<pto::v1::UnregisterReply>([&](auto* ctx, auto* out) { return registry_->Unregister(ctx, req, out); })
      .status;
}

Status Client::publish(const pto::v1::CallableRef& ref, bool published) {
  pto::v1::PublishRequest req;
  *req.mutable_callable() = ref;
  req.set_published(published);
  return unary<pto::v1::PublishReply>([&](auto* ctx, auto* out) { return registry_->Publish(ctx, req, out); }).status;
}

Result<pto::v1::ListCallablesReply> Client::callables() {
  return unary<pto::v1::ListCallablesReply>(
      [&](auto* ctx, auto* out) { return registry_->List(ctx, pto::v1::ListCallablesRequest(), out); });
}

// ----------------------------------------------------------------- Tensors

Client::~Client() = default;

bool Client::fd_socket() {
  std::lock_guard<std::mutex> g(fd_mu_);
  return fd_socket_locked();
}

bool Client::fd_socket_locked() {
  if (!o_.fd_transfers) return false;
  if (fd_ && fd_->connected()) return true;
  if (fd_tried_) return false;  // no fd socket at this address: gRPC from now on
  const std::string path = unix_socket_path(o_.address);
  if (!fd_) fd_ = std::make_unique<FdChannel>();
  if (!path.empty() && fd_->connect(path + ".fd")) return true;
  fd_tried_ = true;
  return false;
}

Result<pto::v1::FdReply> Client::fd_call_locked(const pto::v1::FdRequest& req, int fd, uint64_t bytes) {
  pto::v1::FdRequest with_token = req;
  with_token.set_token(o_.token);
  // As a gRPC upload: the per-call timeout plus one second per 50 MB.
  return fd_->call(with_token, fd, o_.timeout + std::chrono::milliseconds(bytes / 50000));
}

namespace {

Result<pto::v1::TensorInfo> from_fd_reply(Result<pto::v1::FdReply> r) {
  Result<pto::v1::TensorInfo> out;
  out.status = r.status;
  if (r.ok() && r.value.code() != 0) out.status = Status::Error(r.value.code(), r.value.message());
  out.value = r.value.tensor();
  return out;
}

pto::v1::FdRequest upload_request(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype,
                                  uint64_t offset) {
  pto::v1::FdRequest req;
  req.set_op(pto::v1::FdRequest::UPLOAD);
  req.set_name(name);
  for (uint32_t d : shape) req.add_shape(d);
  req.set_dtype(static_cast<pto::v1::DataType>(dtype));
  req.set_fd_offset(offset);
  return req;
}

pto::v1::FdRequest download_request(const pto::v1::TensorHandle& t, uint64_t offset) {
  pto::v1::FdRequest req;
  req.set_op(pto::v1::FdRequest::DOWNLOAD);
  *req.mutable_tensor() = t;
  req.set_fd_offset(offset);
  return req;
}

const int kUnavailable = static_cast<int>(grpc::StatusCode::UNAVAILABLE);

Status no_fd_socket() {
  return Status::Error(static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION),
                       "a shared buffer moves through the daemon's fd socket: it needs a unix socket address "
                       "whose daemon has one, and ClientOptions::fd_transfers");
}

// shape x dtype in bytes, 0 when it has no size (an unknown dtype).
uint64_t tensor_bytes(const std::vector<uint32_t>& shape, int32_t dtype) {
  uint64_t n = pto_dtype_size(dtype);
  for (uint32_t d : shape) n *= d;
  return n;
}

}  // namespace

Result<pto::v1::TensorInfo> Client::upload(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype,
                                           const SharedBuffer& from, uint64_t offset) {
  std::lock_guard<std::mutex> g(fd_mu_);
  if (!fd_socket_locked()) return {no_fd_socket(), {}};
  return from_fd_reply(fd_call_locked(upload_request(name, shape, dtype, offset), from.fd(), from.size()));
}

Result<pto::v1::TensorInfo> Client::download(const pto::v1::TensorHandle& t, SharedBuffer& into, uint64_t offset) {
  std::lock_guard<std::mutex> g(fd_mu_);
  if (!fd_socket_locked()) return {no_fd_socket(), {}};
  return from_fd_reply(fd_call_locked(download_request(t, offset), into.fd(), into.size()));
}

Result<pto::v1::TensorInfo> Client::upload(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype,
                                           const void* data, uint64_t bytes, uint32_t chunk_bytes) {
  Result<pto::v1::TensorInfo> r;
  {
    // Through the fd socket: one copy here into the reused staging buffer,
    // one in the daemon into the arena.
    std::lock_guard<std::mutex> g(fd_mu_);
    if (bytes > 0 && bytes == tensor_bytes(shape, dtype) && fd_socket_locked()) {
      if (staging_.size() < bytes) {
        auto b = SharedBuffer::create(bytes);
        if (!b.ok()) return {b.status, {}};
        staging_ = std::move(b.value);
      }
      std::memcpy(staging_.data(), data, bytes);
      r = from_fd_reply(fd_call_locked(upload_request(name, shape, dtype, 0), staging_.fd(), bytes));
      if (r.status.code != kUnavailable) return r;  // the socket broke: the gRPC stream below
    }
  }
  if (chunk_bytes == 0) chunk_bytes = 1u << 20;
  pto::v1::UploadHeader h;
  h.set_name(name);
  for (uint32_t d : shape) h.add_shape(d);
  h.set_dtype(static_cast<pto::v1::DataType>(dtype));
  return streams::upload(
      channel_,
      [&](grpc::ClientContext* ctx) {
        prepare(ctx, true);
        // The per-call timeout, plus one second per 50 MB to move.
        ctx->set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::milliseconds(bytes / 50000));
      },
      h, data, bytes, chunk_bytes);
}

Result<pto::v1::TensorInfo> Client::alloc(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype) {
  pto::v1::AllocRequest req;
  req.set_name(name);
  for (uint32_t d : shape) req.add_shape(d);
  req.set_dtype(static_cast<pto::v1::DataType>(dtype));
  return unary<pto::v1::TensorInfo>([&](auto* ctx, auto* out) { return tensors_->Alloc(ctx, req, out); });
}

Result<pto::v1::TensorInfo> Client::download(const pto::v1::TensorHandle& t, std::vector<uint8_t>* out,
                                             uint32_t chunk_bytes) {
  Result<pto::v1::TensorInfo> r;
  {
    // Through the fd socket into the staging buffer (grown to the tensor's
    // size when the daemon says it does not fit), then one copy out.
    std::lock_guard<std::mutex> g(fd_mu_);
    for (int attempt = 0; attempt < 2 && fd_socket_locked(); ++attempt) {
      if (staging_.size() == 0 || (attempt == 1 && staging_.size() < r.value.bytes())) {
        auto b = SharedBuffer::create(std::max<uint64_t>(r.value.bytes(), 1u << 20));
        if (!b.ok()) return {b.status, {}};
        staging_ = std::move(b.value);
      }
      r = from_fd_reply(fd_call_locked(download_request(t, 0), staging_.fd(), staging_.size()));
      if (r.status.code == static_cast<int>(grpc::StatusCode::OUT_OF_RANGE)) continue;
      if (r.status.code == kUnavailable) break;  // the socket broke: the gRPC stream below
      if (r.ok() && r.value.bytes() > staging_.size())  // the daemon's word: it wrote into our memfd's room
        r.status = Status::Error(
            static_cast<int32_t>(grpc::StatusCode::DATA_LOSS),
            fmt::format("download: the daemon says {} bytes, the buffer holds {}", r.value.bytes(), staging_.size()));
      if (r.ok()) try {
          out->assign(static_cast<const uint8_t*>(staging_.data()),
                      static_cast<const uint8_t*>(staging_.data()) + r.value.bytes());
        } catch (const std::exception&) {  // bad_alloc: no room for it in this process
          r.status =
              Status::Error(static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED),
                            fmt::format("download: {} bytes do not fit in this process's memory", r.value.bytes()));
        }
      return r;
    }
    r.status = Status::Ok();
    r.value.Clear();
  }
  grpc::ClientContext ctx;
  prepare(&ctx, true);
  // The size is known only from the first chunk: allow ten minutes on top.
  ctx.set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::minutes(10));
  pto::v1::DownloadRequest req;
  *req.mutable_tensor() = t;
  req.set_chunk_bytes(chunk_bytes);
  return streams::download(channel_, &ctx, req, out);
}

Status Client::free(const pto::v1::TensorHandle& t) {
  pto::v1::FreeTensorRequest req;
  *req.mutable_tensor() = t;
  return unary<pto::v1::FreeTensorReply>([&](auto* ctx, auto* out) { return tensors_->Free(ctx, req, out); }).status;
}

Result<pto::v1::ListTensorsReply> Client::tensors() {
  return unary<pto::v1::ListTensorsReply>(
      [&](auto* ctx, auto* out) { return tensors_->List(ctx, pto::v1::ListTensorsRequest(), out); });
}

// -------------------------------------------------------------------- Jobs

std::optional<Result<pto::v1::SubmitReply>> Client::submit_through_fd(const pto::v1::SubmitRequest& req) {
  // The daemon's bound on a frame (kMaxFdFrame); a larger job takes gRPC.
  constexpr size_t kMaxFrame = 64 * 1024;
  // The daemon closes a connection idle for a minute; one idle half that
  // long is opened again first, so that a job never races that close (its
  // reply would be lost, the job not run, and the client could not tell).
  constexpr auto kFreshFor = std::chrono::seconds(30);
  // How long jobs take gRPC after the fd socket was not there or refused.
  constexpr auto kBackOff = std::chrono::seconds(1);
  if (!o_.fd_jobs) return std::nullopt;
  const std::string path = unix_socket_path(o_.address);
  if (path.empty()) return std::nullopt;
  std::unique_lock<std::mutex> lk(jobs_fd_mu_, std::try_to_lock);
  if (!lk.owns_lock() || std::chrono::steady_clock::now() < jobs_fd_retry_at_) return std::nullopt;
  pto::v1::FdRequest fr;
  fr.set_op(pto::v1::FdRequest::SUBMIT);
  fr.set_token(o_.token);
  *fr.mutable_submit() = req;
  if (fr.ByteSizeLong() > kMaxFrame) return std::nullopt;
  if (!jobs_fd_) jobs_fd_ = std::make_unique<FdChannel>();
  const auto now = std::chrono::steady_clock::now();
  if ((!jobs_fd_->connected() || now - jobs_fd_used_ > kFreshFor) && !jobs_fd_->connect(path + ".fd")) {
    jobs_fd_retry_at_ = now + kBackOff;  // no fd socket there (now)
    return std::nullopt;
  }
  Result<pto::v1::FdReply> r = jobs_fd_->call(fr, -1, o_.timeout + std::chrono::milliseconds(req.wait_ms()));
  jobs_fd_used_ = std::chrono::steady_clock::now();
  if (r.status.code == kUnavailable) {  // not sent, or refused unread
    jobs_fd_retry_at_ = jobs_fd_used_ + kBackOff;
    return std::nullopt;
  }
  Result<pto::v1::SubmitReply> out;
  out.status = r.status;
  if (r.ok() && r.value.code() != 0)
    out.status = Status::Error(r.value.code(), r.value.message());
  else if (r.ok())
    out.value = std::move(*r.value.mutable_submit());
  return out;
}

Result<pto::v1::SubmitReply> Client::submit(const pto::v1::SubmitRequest& req) {
  if (auto r = submit_through_fd(req)) return std::move(*r);
  return unary<pto::v1::SubmitReply>([&](grpc::ClientContext* ctx, auto* out) {
    if (req.wait_ms())
      ctx->set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::milliseconds(req.wait_ms()));
    return jobs_->Submit(ctx, req, out);
  });
}

Result<pto::v1::SubmitBatchReply> Client::submit_batch(const pto::v1::SubmitBatchRequest& req) {
  return unary<pto::v1::SubmitBatchReply>([&](grpc::ClientContext* ctx, auto* out) {
    if (req.wait_ms())
      ctx->set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::milliseconds(req.wait_ms()));
    return jobs_->SubmitBatch(ctx, req, out);
  });
}

namespace {
template <typename Reader>
Status drain_chunks(Reader& reader, const Client::Sink& sink) {
  pto::v1::FileChunk chunk;
  while (reader->Read(&chunk)) sink(chunk.data());
  return from_grpc(reader->Finish());
}
}  // namespace

Status Client::logs(uint64_t job_id, const Sink& sink, bool follow) {
  grpc::ClientContext ctx;
  prepare(&ctx, true);  // following lasts as long as the job; keepalive pings bound it
  if (!follow) ctx.set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::minutes(10));
  pto::v1::JobFileRequest req;
  req.set_job_id(job_id);
  req.set_follow(follow);
  auto reader = jobs_->Logs(&ctx, req);
  return drain_chunks(reader, sink);
}

Status Client::trace(uint64_t job_id, const Sink& sink) {
  grpc::ClientContext ctx;
  prepare(&ctx, true);
  ctx.set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::minutes(10));
  pto::v1::JobFileRequest req;
  req.set_job_id(job_id);
  auto reader = jobs_->Trace(&ctx, req);
  return drain_chunks(reader, sink);
}

Result<pto::v1::JobResult> Client::watch(uint64_t job_id, const Progress& progress) {
  Result<pto::v1::JobResult> r;
  grpc::ClientContext ctx;
  prepare(&ctx, true);
  pto::v1::WatchRequest req;
  req.set_job_id(job_id);
  auto reader = jobs_->Watch(&ctx, req);
  pto::v1::JobEvent ev;
  while (reader->Read(&ev)) {
    if (progress) progress(ev);
    if (ev.has_result()) r.value = ev.result();
  }
  r.status = from_grpc(reader->Finish());
  return r;
}

Result<pto::v1::JobResult> Client::run(const pto::v1::SubmitRequest& req, const Progress& progress) {
  Result<pto::v1::JobResult> r;
  auto s = submit(req);
  if (!s.ok()) {
    r.status = s.status;
    return r;
  }
  if (s.value.has_result()) {
    r.value = s.value.result();
    if (progress) {
      pto::v1::JobEvent ev;
      ev.set_job_id(s.value.job_id());
      ev.set_state(r.value.state());
      *ev.mutable_result() = r.value;
      progress(ev);
    }
    return r;
  }
  return watch(s.value.job_id(), progress);
}

std::future<Result<pto::v1::JobResult>> Client::run_async(pto::v1::SubmitRequest req, Progress progress) {
  return std::async(std::launch::async,
                    [this, req = std::move(req), progress = std::move(progress)] { return run(req, progress); });
}

Result<pto::v1::JobState> Client::cancel(uint64_t job_id) {
  pto::v1::CancelRequest req;
  req.set_job_id(job_id);
  auto reply = unary<pto::v1::CancelReply>([&](auto* ctx, auto* out) { return jobs_->Cancel(ctx, req, out); });
  Result<pto::v1::JobState> r;
  r.status = reply.status;
  r.value = reply.value.state();
  return r;
}

Result<pto::v1::JobResult> Client::result(uint64_t job_id, uint32_t wait_ms) {
  pto::v1::ResultRequest req;
  req.set_job_id(job_id);
  req.set_wait_ms(wait_ms);
  return unary<pto::v1::JobResult>([&](grpc::ClientContext* ctx, auto* out) {
    ctx->set_deadline(std::chrono::system_clock::now() + o_.timeout + std::chrono::milliseconds(wait_ms));
    return jobs_->Result(ctx, req, out);
  });
}

Result<pto::v1::ListJobsReply> Client::jobs(uint32_t limit) {
  pto::v1::ListJobsRequest req;
  req.set_limit(limit);
  return jobs(req);
}

Result<pto::v1::ListJobsReply> Client::jobs(const pto::v1::ListJobsRequest& req) {
  return unary<pto::v1::ListJobsReply>([&](auto* ctx, auto* out) { return jobs_->List(ctx, req, out); });
}

// -------------------------------------------------------------------- Node

Result<pto::v1::WorkersReply> Client::workers() {
  return unary<pto::v1::WorkersReply>(
      [&](auto* ctx, auto* out) { return node_->Workers(ctx, pto::v1::WorkersRequest(), out); });
}

Result<pto::v1::VersionReply> Client::version() {
  return unary<pto::v1::VersionReply>(
      [&](auto* ctx, auto* out) { return node_->Version(ctx, pto::v1::VersionRequest(), out); });
}

Result<pto::v1::ConfigReply> Client::config() {
  return unary<pto::v1::ConfigReply>(
      [&](auto* ctx, auto* out) { return node_->Config(ctx, pto::v1::ConfigRequest(), out); });
}

Result<std::string> Client::health(const std::string& service) {
  Result<std::string> r;
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  prepare(&ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse reply;
  r.status = from_grpc(stub->Check(&ctx, req, &reply));
  r.value = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(reply.status());
  return r;
}

}  // namespace pto::client
