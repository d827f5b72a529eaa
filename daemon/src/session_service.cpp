#include "session_service.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <vector>

#include "fd_frames.h"
#include "log.h"

namespace ptod {

namespace {

bool digest_of(const std::string& bytes, pto::Digest* d) {
  if (bytes.size() != 32) return false;
  std::memcpy(d->data(), bytes.data(), 32);
  return true;
}

pto::v1::Frame body_shutdown(const std::string& reason) {
  pto::v1::Frame f;
  f.mutable_shutdown()->set_reason(reason);
  return f;
}

// A remote task's tensors while it runs.
struct HeldTensors {
  std::vector<pto::ContinuousTensor> tensors;
  std::vector<int> dirs;
  std::vector<bool> owned;        // allocated for this task (inline), else a view of a remote buffer
  std::vector<uint64_t> buffers;  // remote buffers in use
};

// A view of one of this session's remote buffers, held for the task (the
// buffer is not freed while a task uses it): "" or why not.
std::string hold_buffer_view(SessionConn& c, const pto::v1::RemoteTensor& rt, const std::vector<uint32_t>& shape,
                             uint64_t bytes, pto::TensorArgType tag, HeldTensors* held, pto::TaskArgs* args) {
  const auto& ref = rt.buffer();
  std::string why;
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.buffers.find(ref.buffer_id());
  if (ref.owner() != c.worker || ref.generation() != c.session)
    why = fmt::format(
        "remote buffer {} of worker {} generation {:016x} is not of this session (worker {}, "
        "generation {:016x}): the peer restarted or the session was renewed",
        ref.buffer_id(), ref.owner(), ref.generation(), c.worker, c.session);
  else if (it == c.buffers.end() || it->second.freed)
    why = fmt::format("remote buffer {} does not exist (freed?)", ref.buffer_id());
  else if (ref.bytes() != bytes || ref.offset() > pto::tensor_bytes(it->second.t) ||
           bytes > pto::tensor_bytes(it->second.t) - ref.offset())
    why = fmt::format("a {}-byte view at offset {} does not fit remote buffer {} ({} bytes)", bytes, ref.offset(),
                      ref.buffer_id(), pto::tensor_bytes(it->second.t));
  else {
    ++it->second.users;
    held->buffers.push_back(ref.buffer_id());
    pto::ContinuousTensor v =
        pto::make_tensor(reinterpret_cast<uint8_t*>(it->second.t.data) + ref.offset(), shape, rt.dtype());
    held->tensors.push_back(v);
    held->dirs.push_back(pto::v1::DIRECTION_NONE);  // nothing travels back
    held->owned.push_back(false);
    args->add_tensor(v, tag);
  }
  return why;
}

// Buffer `id` of session c when it is live and of `generation` (c.mu held);
// nullptr and *why otherwise.
SessionConn::Buffer* live_buffer(SessionConn& c, uint64_t id, uint64_t generation, std::string* why) {
  auto it = c.buffers.find(id);
  if (generation != c.session || it == c.buffers.end() || it->second.freed) {
    *why = fmt::format("remote buffer {} (generation {:016x}) is not a live buffer of this session", id, generation);
    return nullptr;
  }
  return &it->second;
}

// "" when n bytes at `offset` lie in buffer `id` (`size` bytes) and are at
// most one chunk (kMaxFdBufferChunk, over the stream as through the fd
// socket); why not otherwise.
std::string chunk_refusal(uint64_t id, uint64_t size, uint64_t offset, uint64_t n) {
  if (offset > size || n > size - offset || n > kMaxFdBufferChunk)
    return fmt::format("{} bytes at offset {} do not fit remote buffer {} ({} bytes)", n, offset, id, size);
  return "";
}

}  // namespace

std::string node_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return fmt::format("ptod {} pid {}", host, getpid());
}

void fill_worker_tree(const DaemonParts& p, pto::v1::WorkerNode* root) {
  root->set_name("ptod");
  root->set_level(p.worker.config().level);
  root->set_state(p.draining ? "draining" : "serving");
  root->set_pid(getpid());
  const pto::WorkerStats st = p.worker.stats();
  root->set_tasks_run(st.tasks_succeeded + st.tasks_failed + st.tasks_skipped);
  for (const pto::ChildInfo& c : p.worker.children()) {
    pto::v1::WorkerNode* n = root->add_children();
    n->set_level(c.kind == pto::ChildKind::CHIP ? 2 : c.kind == pto::ChildKind::L3 ? 3 : 0);
    n->set_pid(c.pid);
    n->set_tasks_run(c.tasks_run);
    n->set_restarts(c.restarts);
    n->set_platform(c.platform);
    if (!c.remote) {
      n->set_name(c.label());
      n->set_state(pto::child_state_name(c.state));
    } else {  // a remote L3 worker: its session's state
      n->set_name(fmt::format("{} [{}]", c.label(), c.address));
      n->set_state(c.state == pto::ChildState::DEAD
                       ? c.state_text
                       : fmt::format("{}, {}/{} in flight", pto::child_state_name(c.state), c.in_flight, c.credits));
    }
    // An L3 worker's own chips and sub workers (a local child's last report,
    // a peer's last HEALTH).
    for (const auto& pc : c.peer_children) {
      pto::v1::WorkerNode* g = n->add_children();
      g->set_name(pc.label);
      g->set_state(pc.state);
      g->set_pid(pc.pid);
      g->set_tasks_run(pc.tasks_run);
      g->set_level(pc.level);
      g->set_platform(pc.platform);
    }
  }
}

SessionService::SessionService(DaemonParts p) : p_(p) {
  AddMethod(new grpc::internal::RpcServiceMethod(
      "/pto.v1.Session/Open", grpc::internal::RpcMethod::BIDI_STREAMING,
      new grpc::internal::BidiStreamingHandler<SessionService, grpc::ByteBuffer, grpc::ByteBuffer>(
          [](SessionService* s, grpc::ServerContext* ctx, Stream* stream) { return s->Open(ctx, stream); }, this)));
}

grpc::Status SessionService::Open(grpc::ServerContext* ctx, Stream* stream) {
  if (grpc::Status s = check_token(ctx); !s.ok()) return s;
  auto c = std::make_shared<SessionConn>();
  if (grpc::Status s = identify(p_, ctx, &c->who); !s.ok()) return s;
  c->ctx = ctx;
  c->engine = &p_.worker;
  c->lent = lent_;
  c->peer = ctx->peer();
  uint64_t out_seq = 0;
  const FrameWriter write_now = [&](OutFrame o) {
    o.f.set_version(kSessionVersion);
    o.f.set_session(c->session);
    o.f.set_worker(c->worker);
    o.f.set_seq(++out_seq);
    return stream->Write(encode_frame(o.f, &o.data));
  };
  if (grpc::Status s = handshake(*c, stream, write_now); !s.ok()) return s;
  c->write = write_now;
  {
    std::lock_guard<std::mutex> g(mu_);
    live_.insert(c);
  }
  log("session")->info("session {:016x} from {} ({}{}, worker {}) READY with {} credits", c->session, c->peer,
                       c->who.name, c->who.admin ? ", admin: runs tasks as their jobs' principals" : "", c->worker,
                       p_.cfg.session_credits);
  c->last_recv_ns = now_ns();

  std::thread writer([this, c, &write_now] { write_loop(c, write_now); });
  std::thread watchdog([this, c] { watch_loop(c); });
  std::string why;
  const grpc::Status result = read_loop(c, stream, &why);
  close_session(*c, result, &why);
  {
    // The writer flushes what is queued (completions, replies, a SHUTDOWN)
    // and ends; a coordinator that stopped reading holds that Write on flow
    // control, and the watchdog has stopped: after dead_after_ms the call is
    // cancelled, which fails the Write (one whose bytes sit in a transport
    // write the coordinator's kernel does not take ends with the connection).
    std::unique_lock<std::mutex> lk(c->mu);
    if (!c->stop_cv.wait_for(lk, std::chrono::milliseconds(p_.cfg.dead_after_ms), [&] { return c->writer_done; })) {
      log("session")->warn(
          "session {:016x}: the coordinator took no frames for {} ms after the session's end: "
          "cancelled",
          c->session, p_.cfg.dead_after_ms);
      c->ctx->TryCancel();
    }
  }
  writer.join();
  watchdog.join();
  retire(c, why);
  return result;
}

// Between daemons a session needs the token whenever this daemon has one,
// whatever the listener (TLS listeners also check it before we get here).
grpc::Status SessionService::check_token(grpc::ServerContext* ctx) {
  const DaemonConfig& cfg = p_.cfg;
  if (!cfg.token.empty()) {
    const std::string want = "Bearer " + cfg.token;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end() || it->second.size() != want.size() ||
        CRYPTO_memcmp(it->second.data(), want.data(), want.size()) != 0) {
      log("session")->warn("session from {} refused: no valid token", ctx->peer());
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "a session needs 'authorization: Bearer <token>' (the peer's [server] token_file)");
    }
  }
  return grpc::Status::OK;
}

// HELLO from the coordinator, answered with READY (after NOT_READY while the
// Worker comes up) or REFUSED; on OK the session has its id and is READY.
grpc::Status SessionService::handshake(SessionConn& c, Stream* stream, const FrameWriter& write_now) {
  auto lg = log("session");
  const DaemonConfig& cfg = p_.cfg;
  pto::v1::Frame f;
  grpc::ByteBuffer bb;
  Payload no_chunk;
  std::string bad;
  {
    // A coordinator says HELLO as soon as it opened the stream; one that
    // says nothing would hold a server thread for as long as it liked (the
    // watchdog starts after the handshake). Bounded by dead_after_ms.
    const auto limit = std::chrono::seconds((uint64_t(cfg.dead_after_ms) + 999) / 1000);
    StallWatch::Call hello_wait(p_.stalls, c.ctx, limit, StallWatch::Call::Counts::kIdle);
    if (!stream->Read(&bb)) {
      if (!hello_wait.timed_out()) return grpc::Status(grpc::StatusCode::CANCELLED, "the stream ended before HELLO");
      lg->warn("session from {} ended: no HELLO within {} s ([session] dead_after_ms)", c.peer, limit.count());
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          fmt::format("no HELLO within {} s ([session] dead_after_ms)", limit.count()));
    }
  }
  if (!decode_frame(bb, &f, &no_chunk, &bad)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, bad);
  c.worker = f.worker();
  auto refuse = [&](grpc::StatusCode code, const std::string& why) {
    lg->warn("session from {} refused: {}", c.peer, why);
    pto::v1::Frame r;
    r.mutable_hello()->set_state(pto::v1::Hello::REFUSED);
    r.mutable_hello()->set_message(why);
    r.mutable_hello()->set_min_version(kSessionVersion);
    r.mutable_hello()->set_max_version(kSessionVersion);
    (void)write_now({std::move(r)});
    return grpc::Status(code, why);
  };
  const auto& h = f.hello();
  if (f.version() != kSessionVersion || (f.has_hello() && h.max_version() != 0 &&
                                         (h.min_version() > kSessionVersion || h.max_version() < kSessionVersion)))
    return refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  fmt::format("session protocol version {} is not spoken here: this peer speaks version {}",
                              f.version() != kSessionVersion ? f.version() : h.min_version(), kSessionVersion));
  if (!f.has_hello()) return refuse(grpc::StatusCode::INVALID_ARGUMENT, "the first frame of a session must be HELLO");
  if (f.seq() != 1) return refuse(grpc::StatusCode::INVALID_ARGUMENT, fmt::format("HELLO has seq {}, not 1", f.seq()));
  if (p_.draining) return refuse(grpc::StatusCode::UNAVAILABLE, "the peer is draining");
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&c.session), sizeof c.session) != 1 || c.session == 0)
    c.session = now_ns() | 1;
  // NOT_READY until the Worker is up (ptod listens only after it is, so this
  // is normally skipped); nothing is scheduled on the session before READY.
  for (int i = 0; i < 3000 && !p_.worker.initialized(); ++i) {
    if (i % 100 == 0) {
      pto::v1::Frame nr;
      nr.mutable_hello()->set_state(pto::v1::Hello::NOT_READY);
      if (!write_now({std::move(nr)})) return grpc::Status(grpc::StatusCode::CANCELLED, "the coordinator went away");
    }
    usleep(10000);
  }
  if (!p_.worker.initialized()) return refuse(grpc::StatusCode::UNAVAILABLE, "the peer's Worker did not come up");
  pto::v1::Frame r;
  auto* hr = r.mutable_hello();
  hr->set_state(pto::v1::Hello::READY);
  hr->set_min_version(kSessionVersion);
  hr->set_max_version(kSessionVersion);
  hr->set_node(node_name());
  hr->set_credits(cfg.session_credits);
  hr->set_heartbeat_ms(cfg.heartbeat_ms);
  fill_worker_tree(p_, hr->mutable_tree());
  if (!write_now({std::move(r)})) return grpc::Status(grpc::StatusCode::CANCELLED, "the coordinator went away");
  return grpc::Status::OK;
}

// The writer: batched completions, replies, HEALTH every heartbeat_ms, and
// the coordinator's silence check.
void SessionService::write_loop(const std::shared_ptr<SessionConn>& c, const FrameWriter& write_now) {
  const DaemonConfig& cfg = p_.cfg;
  const auto period = std::chrono::milliseconds(cfg.heartbeat_ms);
  uint64_t last_health = now_ns();
  uint64_t beats = 0;
  std::unique_lock<std::mutex> lk(c->mu);
  for (;;) {
    c->cv.wait_for(lk, period, [&] { return c->closed || !c->out.empty() || !c->done.empty(); });
    std::deque<OutFrame> frames;
    frames.swap(c->out);
    // Completions carry their outputs inline: as many frames as keep each
    // under max_message_bytes (one larger broke the stream and lost the
    // session); the credits go with the first.
    std::vector<pto::v1::Frame> comps;
    uint64_t bytes = 0;
    for (auto& d : c->done) {
      const uint64_t size = d.ByteSizeLong() + DaemonConfig::kRepeatedOverhead;
      if (comps.empty() || (comps.back().completion().completions_size() > 0 && bytes + size > cfg.frame_budget())) {
        comps.emplace_back().mutable_completion();
        bytes = 0;
      }
      bytes += size;
      *comps.back().mutable_completion()->add_completions() = std::move(d);
    }
    if (!comps.empty()) {
      comps.front().mutable_completion()->set_credits(c->credits_back);
      c->credits_back = 0;
      c->done.clear();
    }
    const bool closing = c->closed;
    lk.unlock();
    bool ok = true;
    const uint64_t now = now_ns();
    {
      std::lock_guard<std::mutex> w(c->write_mu);
      for (auto& comp : comps)
        if (ok) ok = write_now({std::move(comp)});
      for (auto& fr : frames)
        if (ok) ok = write_now(std::move(fr));
      if (ok && now - last_health >= uint64_t(cfg.heartbeat_ms) * 1'000'000) {
        pto::v1::Frame hb;
        hb.mutable_health()->set_sent_ns(now);
        // The tree every fifth beat, and in the first beat after a task ended.
        if (++beats % 5 == 1 || c->tree_dirty.exchange(false))
          fill_worker_tree(p_, hb.mutable_health()->mutable_tree());
        ok = write_now({std::move(hb)});
        last_health = now;
      }
    }
    frames.clear();  // not under mu (SessionConn::push)
    lk.lock();
    if (!ok) {
      c->closed = true;
      c->writer_done = true;
      c->stop_cv.notify_all();
      c->ctx->TryCancel();
      return;
    }
    if (closing && c->out.empty() && c->done.empty()) {
      if (c->cancel_after_flush) c->ctx->TryCancel();  // the SHUTDOWN is out: end the reader's Read too
      c->writer_done = true;
      c->stop_cv.notify_all();
      return;
    }
  }
}

// The watchdog: a coordinator silent for dead_after_ms ends the session,
// even while the writer or a run thread is blocked in a Write (TryCancel
// unblocks both). A CONTROL being served is not silence.
void SessionService::watch_loop(const std::shared_ptr<SessionConn>& c) {
  const DaemonConfig& cfg = p_.cfg;
  std::unique_lock<std::mutex> lk(c->mu);
  while (!c->stop_cv.wait_for(lk, std::chrono::milliseconds(cfg.heartbeat_ms), [&] { return c->closed; })) {
    const uint64_t now = now_ns();
    if (c->in_control.load() || now <= c->last_recv_ns + uint64_t(cfg.dead_after_ms) * 1'000'000) continue;
    log("session")->warn("session {:016x}: nothing from the coordinator for {} ms: ending it", c->session,
                         cfg.dead_after_ms);
    c->closed = true;
    c->stop_cv.notify_all();
    c->cv.notify_all();
    c->ctx->TryCancel();
    return;
  }
}

// The coordinator's frames until the stream ends, it shuts the session down,
// or a frame is out of protocol (the status then says why).
grpc::Status SessionService::read_loop(const std::shared_ptr<SessionConn>& c, Stream* stream, std::string* why) {
  const DaemonConfig& cfg = p_.cfg;
  grpc::Status result = grpc::Status::OK;
  uint64_t in_seq = 1;
  auto protocol_error = [&](const std::string& m) {
    *why = m;
    result = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, m);
  };
  pto::v1::Frame f;
  grpc::ByteBuffer bb;
  Payload chunk;
  std::string bad;
  while (why->empty() && stream->Read(&bb)) {
    c->last_recv_ns = now_ns();
    if (!decode_frame(bb, &f, &chunk, &bad)) {
      protocol_error(bad);
      break;
    }
    if (std::string bad = check_frame_order(f, c->session, in_seq + 1); !bad.empty()) {
      protocol_error(bad);
      break;
    }
    in_seq = f.seq();
    switch (f.body_case()) {
      case pto::v1::Frame::kTask:
        for (const auto& t : f.task().tasks()) {
          {
            std::lock_guard<std::mutex> g(c->mu);
            if (c->outstanding >= cfg.session_credits) {
              *why = fmt::format("TASK {} beyond the {} credits granted", t.id(), cfg.session_credits);
              break;
            }
            ++c->outstanding;
          }
          start_task(c, t);
        }
        if (!why->empty()) protocol_error(*why);
        break;
      case pto::v1::Frame::kControl: {
        OutFrame r;
        c->in_control = true;
        control(*c, f.control(), chunk, r.f.mutable_control_reply(), &r.data);
        c->last_recv_ns = now_ns();
        c->in_control = false;
        c->push(std::move(r));
        break;
      }
      case pto::v1::Frame::kHealth: break;
      case pto::v1::Frame::kShutdown:
        log("session")->info("session {:016x}: the coordinator ended it: {}", c->session, f.shutdown().reason());
        *why = "shutdown";
        break;
      case pto::v1::Frame::kHello: protocol_error("HELLO after the session began"); break;
      default: protocol_error(fmt::format("frame {} has no body the peer knows", f.seq()));
    }
  }
  return result;
}

// Says why the session ends (a SHUTDOWN after a protocol error) and closes
// it: the writer flushes what is queued and returns, so does the watchdog.
void SessionService::close_session(SessionConn& c, const grpc::Status& result, std::string* why) {
  if (result.ok() && why->empty()) *why = "the stream ended";
  if (!result.ok()) {
    log("session")->warn("session {:016x} from {}: {}: ending it", c.session, c.peer, *why);
    c.push({body_shutdown("protocol error: " + *why)});
  }
  std::lock_guard<std::mutex> g(c.mu);
  c.closed = true;
  c.stop_cv.notify_all();
  c.cv.notify_all();
}

// After the writer and the watchdog: the session lets go of the stream and of
// what it prepared. Runs still in flight keep the SessionConn and drop their
// completions.
void SessionService::retire(const std::shared_ptr<SessionConn>& c, const std::string& why) {
  {  // a direct write in progress finishes before the stream goes away
    std::lock_guard<std::mutex> w(c->write_mu);
    c->write = nullptr;
  }
  std::deque<OutFrame> unsent;  // their chunks' slices hold c: let go here, without mu
  {
    std::lock_guard<std::mutex> g(c->mu);
    unsent.swap(c->out);
  }
  unsent.clear();
  // What this session prepared and never committed is undone.
  for (const pto::Digest& d : c->prepared) (void)p_.registry.abort(d);
  {
    std::lock_guard<std::mutex> g(mu_);
    live_.erase(c);
  }
  log("session")->info("session {:016x} ended: {}", c->session, why);
}

bool SessionService::wait_lent(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lk(lent_->mu);
  return lent_->cv.wait_for(lk, bound, [&] { return lent_->held == 0; });
}

void SessionService::shutdown_all(const std::string& reason) {
  std::lock_guard<std::mutex> g(mu_);
  // The writers send the SHUTDOWN, then cancel their streams.
  for (const auto& c : live_) {
    c->push({body_shutdown(reason)});
    std::lock_guard<std::mutex> g2(c->mu);
    c->closed = true;
    c->stop_cv.notify_all();
    c->cancel_after_flush = true;
    c->cv.notify_all();
  }
}

void SessionService::start_task(const std::shared_ptr<SessionConn>& c, const pto::v1::RemoteTask& t) {
  pto::v1::Completion fail;
  fail.set_id(t.id());
  auto failed = [&](const std::string& m) {
    fail.set_outcome(pto::v1::TASK_FAILURE);
    auto* fr = fail.mutable_failure();
    fr->set_task_id(0);
    pto::Digest d{};
    fr->set_callable(digest_of(t.digest(), &d) ? pto::to_hex(d) : "");
    fr->set_outcome(pto::v1::TASK_FAILURE);
    fr->set_message(pto::clip_message(m));
    c->complete(std::move(fail));
  };
  pto::Digest d{};
  if (!digest_of(t.digest(), &d)) return failed(fmt::format("a digest has 32 bytes, not {}", t.digest().size()));
  pto::v1::CallableRef ref;
  ref.set_digest(t.digest());
  auto rc = std::make_shared<RegisteredCallable>();
  if (Status s = p_.registry.find(c->who, ref, rc.get()); !s.ok()) {
    const std::string tomb = p_.registry.tombstone(d);
    return failed(tomb.empty() ? fmt::format("callable {} is not registered on this peer", pto::to_hex(d))
                               : fmt::format("callable {} is not registered any more: {}", pto::to_hex(d), tomb));
  }
  // Inline tensors go into the Worker's arena for the run; outputs come back
  // with the completion.
  auto held = std::make_shared<HeldTensors>();
  auto release = [this, held, c] {
    for (size_t i = 0; i < held->tensors.size(); ++i)
      if (held->owned[i]) (void)p_.worker.free(held->tensors[i]);
    for (uint64_t id : held->buffers) c->release_buffer(id);
  };
  pto::TaskArgs args;
  for (int i = 0; i < t.tensors_size(); ++i) {
    const auto& rt = t.tensors(i);
    std::vector<uint32_t> shape;
    uint64_t bytes = 0;
    if (std::string bad = check_remote_tensor(rt, &shape, &bytes); !bad.empty()) {
      release();
      return failed(fmt::format("tensor {}: {}", i, bad));
    }
    const pto::TensorArgType tag = rt.direction() == pto::v1::DIR_IN    ? pto::TensorArgType::INPUT
                                   : rt.direction() == pto::v1::DIR_OUT ? pto::TensorArgType::OUTPUT_EXISTING
                                                                        : pto::TensorArgType::INOUT;
    if (rt.has_buffer()) {  // a view of one of this session's remote buffers
      if (std::string why = hold_buffer_view(*c, rt, shape, bytes, tag, held.get(), &args); !why.empty()) {
        release();
        return failed(fmt::format("tensor {}: {}", i, why));
      }
      continue;
    }
    const bool in = rt.direction() == pto::v1::DIR_IN || rt.direction() == pto::v1::DIR_INOUT;
    auto a = p_.worker.alloc(shape, rt.dtype());
    if (!a.ok()) {
      release();
      return failed(fmt::format("tensor {}: {}", i, a.status.message));
    }
    held->tensors.push_back(a.value);
    held->dirs.push_back(rt.direction());
    held->owned.push_back(true);
    if (in) std::memcpy(reinterpret_cast<void*>(a.value.data), rt.data().data(), bytes);
    args.add_tensor(a.value, tag);
  }
  for (uint64_t s : t.scalars()) args.add_scalar(s);
  pto::CallConfig cc;
  cc.block_dim = t.config().block_dim();
  cc.aicpu_thread_num = t.config().aicpu_thread_num();
  cc.timeout_ms = t.config().timeout_ms();
  const uint64_t id = t.id();
  // The coordinator acts for the principal that submitted the job, if this
  // daemon trusts it to (its session's principal is admin here).
  pto::RunOptions options;
  options.principal = c->who.admin && !t.principal().empty() ? t.principal() : c->who.name;
  options.task_timeout_ms = cc.timeout_ms;  // every task an orchestration run here submits, as on the coordinator
  const pto::RunnerPool& runners = p_.runners;
  auto fn = [rc, args, &runners, principal = options.principal](pto::Orchestrator& o, const pto::TaskArgsView& view,
                                                                const pto::CallConfig& cfg) {
    return run_registered(*rc, runners, o, args, view, cfg, principal);
  };
  const pto::TaskArgs run_args = rc->runs_here ? args : pto::TaskArgs();
  log("session")->debug("session {:016x}: task {} (coordinator task {}) runs as {}", c->session, id, t.task_id(),
                        options.principal);
  p_.worker.submit_function(
      fn, run_args, cc,
      [c, held, id, release](const pto::RunResult& r) {
        pto::v1::Completion done;
        done.set_id(id);
        if (r.ok()) {
          done.set_outcome(pto::v1::SUCCESS);
          for (size_t i = 0; i < held->tensors.size(); ++i) {
            const bool out = held->dirs[i] == pto::v1::DIR_OUT || held->dirs[i] == pto::v1::DIR_INOUT;
            done.add_outputs(out ? std::string(reinterpret_cast<const char*>(held->tensors[i].data),
                                               pto::tensor_bytes(held->tensors[i]))
                                 : std::string());
          }
        } else {
          done.set_outcome(pto::v1::TASK_FAILURE);
          auto* fr = done.mutable_failure();
          fr->set_outcome(pto::v1::TASK_FAILURE);
          fr->set_message(pto::clip_message(r.status.message));
          if (r.first_failure) {
            fr->set_task_id(r.first_failure->task_id);
            fr->set_callable(r.first_failure->callable);
            fr->set_worker(r.first_failure->worker);
            fr->set_message(pto::clip_message(r.first_failure->message));
          }
        }
        release();
        c->complete(std::move(done));
      },
      options);
}

void SessionService::control(SessionConn& c, const pto::v1::Control& req, const Payload& chunk,
                             pto::v1::ControlReply* reply, grpc::Slice* data) {
  reply->set_id(req.id());
  reply->set_ok(true);
  auto no = [&](const std::string& m) {
    reply->set_ok(false);
    reply->set_message(m);
  };
  pto::Digest d{};
  const bool has_digest = digest_of(req.digest(), &d);
  auto lg = log("session");
  switch (req.op()) {
    case pto::v1::Control::QUERY:
      if (!has_digest) return no("QUERY needs a 32-byte digest");
      reply->set_present(p_.registry.visible(c.who, d));  // another principal's is not told
      return;
    case pto::v1::Control::PREPARE: {
      if (!has_digest) return no("PREPARE needs a 32-byte digest");
      if (!req.has_request()) {  // the coordinator learnt that we hold it: no bytes sent
        if (!p_.registry.visible(c.who, d))
          return no(fmt::format("PREPARE without bytes, but callable {} is not here", pto::to_hex(d)));
        reply->set_digest(req.digest());
        return;
      }
      pto::v1::RegisterReply rr;
      if (Status s = p_.registry.prepare(c.who, req.request(), &rr); !s.ok()) return no(s.message);
      reply->set_digest(rr.identity().digest());
      if (rr.identity().digest() != req.digest()) {
        pto::Digest got{};
        const bool computed = digest_of(rr.identity().digest(), &got);
        if (computed && !rr.existed()) (void)p_.registry.abort(got);
        return no(fmt::format("digest mismatch: the coordinator computed {}, this peer {}", pto::to_hex(d),
                              computed ? pto::to_hex(got) : "nothing"));
      }
      if (!rr.existed()) c.prepared.insert(d);
      lg->info("session {:016x}: prepared {}{}", c.session, pto::to_hex(d).substr(0, 16),
               rr.existed() ? " (present)" : "");
      return;
    }
    case pto::v1::Control::COMMIT:
      if (!has_digest) return no("COMMIT needs a 32-byte digest");
      // Only what this session prepared (or the one it holds already): another
      // session's prepared registration is that session's to commit or abort.
      if (!c.prepared.count(d) && !p_.registry.visible(c.who, d))
        return no(fmt::format("COMMIT of callable {}: this session did not prepare it", pto::to_hex(d)));
      if (Status s = p_.registry.commit(d); !s.ok()) return no(s.message);
      c.prepared.erase(d);
      lg->info("session {:016x}: committed {}", c.session, pto::to_hex(d).substr(0, 16));
      return;
    case pto::v1::Control::ABORT:
      if (!has_digest) return no("ABORT needs a 32-byte digest");
      if (c.prepared.erase(d)) (void)p_.registry.abort(d);
      lg->info("session {:016x}: aborted {}", c.session, pto::to_hex(d).substr(0, 16));
      return;
    case pto::v1::Control::UNREGISTER: {
      if (!has_digest) return no("UNREGISTER needs a 32-byte digest");
      pto::v1::CallableRef ref;
      ref.set_digest(req.digest());
      // As the session's principal: its own registrations (an admin's: any).
      if (Status s = p_.registry.remove(c.who, ref); !s.ok() && s.code != pto::kWorkerNotRegistered)
        return no(s.message);
      lg->info("session {:016x}: unregistered {} (tombstone kept)", c.session, pto::to_hex(d).substr(0, 16));
      return;
    }
    case pto::v1::Control::BUFFER_ALLOC: {
      if (req.bytes() == 0 || req.bytes() > (uint64_t(1) << 36))
        return no(fmt::format("BUFFER_ALLOC of {} bytes: must be 1..2^36", req.bytes()));
      // One dimension up to 4 GiB; beyond, whole 4 KiB rows (at least the bytes asked for).
      const uint64_t n = req.bytes();
      // The session's buffers count against its principal's arena quota, with
      // its tensors and the buffers of all its sessions (one session each
      // would otherwise get the whole quota). One check and allocation at a
      // time, so that two sessions cannot both pass it.
      std::unique_lock<std::mutex> quota_turn(quota_mu_, std::defer_lock);
      if (const uint64_t quota = p_.cfg.quota_for(c.who.name).arena_bytes) {
        quota_turn.lock();
        const uint64_t held = p_.tensors.bytes_of(c.who.name) + buffer_bytes_of(c.who.name);
        if (held + n > quota)
          return no(
              fmt::format("BUFFER_ALLOC: {} holds {} bytes; {} more would pass its quota of {} bytes ([quotas] "
                          "arena_bytes)",
                          c.who.name, held, n, quota));
      }
      auto a = n <= UINT32_MAX ? p_.worker.alloc({static_cast<uint32_t>(n)}, PTO_UINT8)
                               : p_.worker.alloc({static_cast<uint32_t>((n + 4095) / 4096), 4096}, PTO_UINT8);
      if (!a.ok()) return no("BUFFER_ALLOC: " + a.status.message);
      std::lock_guard<std::mutex> g(c.mu);
      const uint64_t id = ++c.next_buffer;
      c.buffers[id].t = a.value;
      reply->set_buffer_id(id);
      reply->set_generation(c.session);
      return;
    }
    case pto::v1::Control::BUFFER_FREE:
    case pto::v1::Control::BUFFER_WRITE:
    case pto::v1::Control::BUFFER_READ:
      if (std::string why = buffer_op(c, req, chunk, reply, data); !why.empty()) no(why);
      return;
    default: return no(fmt::format("control op {} is not supported by this peer", int(req.op())));
  }
}

uint64_t SessionService::buffer_bytes_of(const std::string& principal) {
  std::vector<std::shared_ptr<SessionConn>> mine;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& s : live_)
      if (s->who.name == principal) mine.push_back(s);
  }
  uint64_t bytes = 0;
  for (const auto& s : mine) {
    std::lock_guard<std::mutex> g(s->mu);
    for (const auto& [id, b] : s->buffers) bytes += pto::tensor_bytes(b.t);
  }
  return bytes;
}

std::string SessionService::hold_buffer(const Principal& who, const pto::v1::FdRequest& req, Held* out) {
  std::shared_ptr<SessionConn> c;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& s : live_)
      if (s->session == req.generation()) c = s;  // a buffer's generation is its session's id
  }
  // Another principal's session reads as no session at all.
  if (!c || c->who.name != who.name)
    return fmt::format("remote buffer {} (generation {:016x}): no live session of {} holds it", req.buffer_id(),
                       req.generation(), who.name);
  std::lock_guard<std::mutex> g(c->mu);
  std::string why;
  SessionConn::Buffer* b = live_buffer(*c, req.buffer_id(), req.generation(), &why);
  if (!b) return why;
  if (c->closed) return fmt::format("remote buffer {}: its session is closing", req.buffer_id());
  if (why = chunk_refusal(req.buffer_id(), pto::tensor_bytes(b->t), req.buffer_offset(), req.bytes()); !why.empty())
    return why;
  ++b->users;  // as a lent slice: a BUFFER_FREE meanwhile waits for the release
  out->t = b->t;
  out->release = [c, id = req.buffer_id()] { c->release_buffer(id); };
  return "";
}

// BUFFER_FREE, BUFFER_WRITE and BUFFER_READ on one of the session's remote
// buffers; "" or why the request is refused.
std::string SessionService::buffer_op(SessionConn& c, const pto::v1::Control& req, const Payload& chunk,
                                      pto::v1::ControlReply* reply, grpc::Slice* data) {
  std::lock_guard<std::mutex> g(c.mu);
  std::string why;
  SessionConn::Buffer* found = live_buffer(c, req.buffer_id(), req.generation(), &why);
  if (!found) return why;
  auto& b = *found;
  if (req.op() == pto::v1::Control::BUFFER_FREE) {
    b.freed = true;
    if (b.users == 0) {
      (void)p_.worker.free(b.t);
      c.buffers.erase(req.buffer_id());
    }
    return "";
  }
  const uint64_t n =
      req.op() == pto::v1::Control::BUFFER_WRITE ? (chunk.empty() ? req.data().size() : chunk.size) : req.bytes();
  if (why = chunk_refusal(req.buffer_id(), pto::tensor_bytes(b.t), req.offset(), n); !why.empty()) return why;
  if (req.op() == pto::v1::Control::BUFFER_WRITE) {
    // Straight from the received message's slices into the buffer, as an
    // upload's bytes go (Worker::write).
    std::vector<iovec> pieces;
    if (chunk.empty())
      pieces.push_back({const_cast<char*>(req.data().data()), n});
    else
      for (const auto& p : chunk.pieces) pieces.push_back({const_cast<uint8_t*>(p.data), p.size});
    if (pto::Status s = p_.worker.write(b.t, req.offset(), pieces); !s.ok())
      return fmt::format("writing remote buffer {}: {}", req.buffer_id(), s.message);
  } else if (n >= kPayloadMinBytes) {
    // Lent, not copied: the buffer stays in use (a BUFFER_FREE waits for
    // it) until gRPC has written the bytes.
    *data = c.lend(req.buffer_id(), reinterpret_cast<const void*>(b.t.data + req.offset()), n);
  } else {
    reply->set_data(reinterpret_cast<const char*>(b.t.data + req.offset()), n);
  }
  return "";
}

}  // namespace ptod
