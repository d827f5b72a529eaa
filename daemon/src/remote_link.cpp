#include "remote_link.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "log.h"
#include "pto/base/clock.h"
#include "remote_fd_path.h"
#include "session_service.h"
#include "wire_enums.h"

namespace ptod {

using pto::now_ns;
namespace {

std::string read_pem(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Outputs back into this process's tensors; an output of the wrong size
// fails the task rather than overrun the tensor.
void copy_outputs_back(const pto::v1::Completion& c, const pto::RemoteTask& task, pto::RemoteCompletion* rc) {
  for (size_t i = 0; i < task.tensors.size(); ++i) {
    if (!copies_out(task.directions[i]) || task.buffers[i].id != 0) continue;
    const uint64_t bytes = pto::tensor_bytes(task.tensors[i]);
    if (int(i) >= c.outputs_size() || c.outputs(int(i)).size() != bytes) {
      rc->outcome = static_cast<uint8_t>(pto::Outcome::TASK_FAILURE);
      rc->message = fmt::format("the peer returned {} bytes for output tensor {} ({} expected)",
                                int(i) < c.outputs_size() ? c.outputs(int(i)).size() : 0, i, bytes);
      break;
    }
    std::memcpy(reinterpret_cast<void*>(task.tensors[i].data), c.outputs(int(i)).data(), bytes);
  }
}

}  // namespace

GrpcRemoteLink::GrpcRemoteLink(DaemonConfig::Peer peer, uint32_t worker_id, const DaemonConfig& cfg)
    : peer_(std::move(peer)), worker_id_(worker_id), cfg_(cfg) {
  // A peer at a unix socket is on this host: its fd socket moves
  // remote-buffer chunks through shared pages (remote_fd_path.h).
  if (const std::string path = pto::client::unix_socket_path(peer_.address); !path.empty() && peer_.fd_transfers)
    fd_path_ = std::make_unique<PeerFdPath>(path, peer_.token);
}

GrpcRemoteLink::~GrpcRemoteLink() { stop(); }

pto::Status GrpcRemoteLink::start(std::function<void()> wake) {
  std::lock_guard<std::mutex> g(mu_);
  if (conn_.joinable()) return pto::Status::Error(pto::kWorkerInvalidArgument, label() + ": started twice");
  wake_ = std::move(wake);
  state_ = "connecting";
  conn_ = std::thread([this] { run(); });
  stager_.start(wake_);
  return pto::Status::Ok();
}

void GrpcRemoteLink::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stop_) return;
    stop_ = true;
    cv_.notify_all();
    out_cv_.notify_all();
    stager_.request_stop();
  }
  if (conn_.joinable()) conn_.join();
  stager_.join();
}

std::string GrpcRemoteLink::state_text() const {
  std::lock_guard<std::mutex> g(mu_);
  return state_;
}

std::vector<pto::RemoteLink::PeerChild> GrpcRemoteLink::peer_children() const {
  std::lock_guard<std::mutex> g(mu_);
  return tree_;
}

void GrpcRemoteLink::set_tree(const pto::v1::WorkerNode& root) {
  std::vector<PeerChild> t;
  for (const auto& c : root.children())
    t.push_back({c.name(), c.state(), c.pid(), c.tasks_run(), c.level(), c.platform()});
  std::lock_guard<std::mutex> g(mu_);
  tree_ = std::move(t);
}

void GrpcRemoteLink::send(pto::RemoteTask&& task) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!session_up_ || session_over_ || !ready_) {
    done_.push_back({task.seq, static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE), "",
                     fmt::format("{} is not connected ({})", label(), state_)});
    has_done_.store(true, std::memory_order_release);
    lk.unlock();
    if (wake_) wake_();
    return;
  }
  if (stager_.needs_staging(task)) {
    stager_.stage(std::move(task));
    return;
  }
  // A lone task (nothing else in flight or queued) is written from this
  // thread: one thread wake-up less on the latency path. Under load the
  // writer thread batches tasks into frames instead.
  uint64_t inline_bytes = 0;
  for (size_t i = 0; i < task.tensors.size(); ++i)
    if (task.buffers[i].id == 0 && copies_in(task.directions[i])) inline_bytes += pto::tensor_bytes(task.tensors[i]);
  if (!tasks_out_.empty() || !pending_.empty() || inline_bytes > kDirectWriteBytes || !write_mu_.try_lock()) {
    tasks_out_.push_back(std::move(task));
    out_cv_.notify_one();
    return;
  }
  lk.unlock();
  std::vector<pto::RemoteTask> one;
  one.push_back(std::move(task));
  const bool ok = write_tasks(one);
  write_mu_.unlock();
  if (!ok) end_session("the connection broke while sending");
}

void GrpcRemoteLink::send_staged(pto::RemoteTask&& task) {
  tasks_out_.push_back(std::move(task));
  out_cv_.notify_one();
}

void GrpcRemoteLink::deliver(pto::RemoteCompletion&& done) {
  done_.push_back(std::move(done));
  has_done_.store(true, std::memory_order_release);
}

void GrpcRemoteLink::abandon(uint64_t seq) {
  std::lock_guard<std::mutex> o(outputs_mu_);  // waits for a copy into its tensors that is under way
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = pending_.find(seq); it != pending_.end())
    it->second.abandoned = true;
  else
    abandoned_.insert(seq);  // queued or being staged: marked when it is sent; or its outputs are coming back
}

void GrpcRemoteLink::poll(std::vector<pto::RemoteCompletion>* out) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& c : done_) out->push_back(std::move(c));
  done_.clear();
  has_done_.store(false, std::memory_order_release);
}

void GrpcRemoteLink::fill_header(pto::v1::Frame* f) {
  f->set_version(kSessionVersion);
  f->set_session(session_);
  f->set_worker(worker_id_);
  f->set_seq(++out_seq_);
}

std::shared_ptr<grpc::Channel> GrpcRemoteLink::make_channel(std::string* why) const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(cfg_.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(cfg_.max_message_bytes));
  // A fresh channel per attempt: reconnecting is this link's job, at its pace.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (!peer_.tls_server_name.empty()) args.SetSslTargetNameOverride(peer_.tls_server_name);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!peer_.tls_ca.empty()) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = read_pem(peer_.tls_ca);
    if (o.pem_root_certs.empty()) {
      *why = fmt::format("tls_ca '{}' cannot be read", peer_.tls_ca);
      return nullptr;
    }
    if (!peer_.tls_cert.empty()) {
      o.pem_cert_chain = read_pem(peer_.tls_cert);
      o.pem_private_key = read_pem(peer_.tls_key);
    }
    creds = grpc::SslCredentials(o);
  } else {
    creds = grpc::InsecureChannelCredentials();  // config validation: loopback or a unix socket only
  }
  return grpc::CreateCustomChannel(peer_.address, creds, args);
}

// HELLO until READY. On success the session is up (reader and writer not yet started).
bool GrpcRemoteLink::open_session(std::string* why) {
  auto channel = make_channel(why);
  if (!channel) return false;
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!peer_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + peer_.token);
  std::unique_lock<std::mutex> wl(write_mu_);  // no direct write may see half a session
  std::unique_lock<std::mutex> lk(mu_);
  session_ = 0;
  out_seq_ = in_seq_ = 0;
  session_up_ = session_over_ = false;
  end_reason_.clear();
  ctx_ = std::move(ctx);
  lk.unlock();
  wl.unlock();
  // The handshake is bounded: a peer that accepts the connection and says
  // nothing is cancelled after 3 s.
  std::mutex hs_mu;
  std::condition_variable hs_cv;
  bool hs_done = false, hs_timed_out = false;
  grpc::ClientContext* raw = ctx_.get();
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(hs_mu);
    if (!hs_cv.wait_for(l, std::chrono::seconds(3), [&] { return hs_done; })) {
      hs_timed_out = true;
      raw->TryCancel();
    }
  });
  auto finish_handshake = [&] {
    {
      std::lock_guard<std::mutex> l(hs_mu);
      hs_done = true;
    }
    hs_cv.notify_all();
    watchdog.join();
  };
  // The generated stub's own stream, with ByteBuffer for the frames
  // (session_wire.h; grpc::internal is what generated code uses).
  const grpc::internal::RpcMethod open("/pto.v1.Session/Open", grpc::internal::RpcMethod::BIDI_STREAMING, channel);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(), open,
                                                                                            ctx_.get()));
  pto::v1::Frame hello;
  hello.mutable_hello()->set_min_version(kSessionVersion);
  hello.mutable_hello()->set_max_version(kSessionVersion);
  hello.mutable_hello()->set_node(node_name());
  fill_header(&hello);
  bool ok = stream->Write(encode_frame(hello));
  pto::v1::Frame f;
  std::string refused;
  grpc::ByteBuffer bb;
  Payload no_chunk;
  while (ok && stream->Read(&bb)) {
    if (!decode_frame(bb, &f, &no_chunk, &refused)) {
      refused = "protocol error: " + refused;
      break;
    }
    if (!f.has_hello()) {
      refused = fmt::format("protocol error: the peer's first frame is not HELLO (body {})", int(f.body_case()));
      break;
    }
    if (f.seq() != ++in_seq_) {
      refused = fmt::format("protocol error: HELLO seq {} (expected {})", f.seq(), in_seq_);
      break;
    }
    if (f.hello().state() == pto::v1::Hello::NOT_READY) {
      std::lock_guard<std::mutex> g(mu_);
      state_ = "peer not ready";
      continue;
    }
    if (f.hello().state() == pto::v1::Hello::REFUSED) {
      refused = "refused by the peer: " + f.hello().message();
      break;
    }
    if (f.hello().state() != pto::v1::Hello::READY) {
      refused = "protocol error: HELLO without a state";
      break;
    }
    if (f.version() != kSessionVersion) {
      refused = fmt::format("the peer speaks session protocol version {}; this coordinator speaks {}", f.version(),
                            kSessionVersion);
      break;
    }
    int chips = 0;
    for (const auto& c : f.hello().tree().children()) chips += c.level() == 2 ? 1 : 0;
    if (peer_.workers > 0 && chips != peer_.workers) {
      refused = fmt::format("the peer reports {} chip(s); [[peers]] workers = {}", chips, peer_.workers);
      break;
    }
    if (f.hello().credits() == 0) {
      refused = "protocol error: READY with 0 credits";
      break;
    }
    finish_handshake();
    set_tree(f.hello().tree());
    lk.lock();
    session_ = f.session();
    window_.store(f.hello().credits(), std::memory_order_relaxed);
    stream_ = std::move(stream);
    session_up_ = true;
    last_recv_ns_ = now_ns();
    return true;
  }
  finish_handshake();
  if (!refused.empty()) raw->TryCancel();  // we end it; otherwise the stream ended and Finish says why
  grpc::Status st = stream->Finish();
  if (refused.empty())
    refused = hs_timed_out ? "no HELLO from the peer within 3 s"
              : st.ok()    ? "the peer ended the stream during HELLO"
                           : fmt::format("{} ({})", st.error_message(), int(st.error_code()));
  *why = refused;
  lk.lock();
  ctx_.reset();
  return false;
}

void GrpcRemoteLink::end_session(const std::string& why) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (session_over_ || !session_up_) return;
    session_over_ = true;
    ready_.store(false, std::memory_order_release);
    end_reason_ = why;
    state_ = "lost: " + why;
    if (ctx_) ctx_->TryCancel();
    const std::string msg = fmt::format("{}: session lost: {}", label(), why);
    for (auto& [id, p] : pending_) done_.push_back({id, static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE), "", msg});
    for (auto& t : tasks_out_) done_.push_back({t.seq, static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE), "", msg});
    pending_.clear();
    tasks_out_.clear();
    stager_.session_lost();
    frames_out_.clear();
    has_done_.store(!done_.empty(), std::memory_order_release);
    for (auto& [id, w] : controls_) {
      w.done = true;
      w.reply.set_ok(false);
      w.reply.set_message("session lost: " + why);
    }
    ctl_cv_.notify_all();
    out_cv_.notify_all();
    cv_.notify_all();
    wake = wake_;
  }
  log("remote")->warn("{}: session {:016x} lost: {}", label(), session_, why);
  if (wake) wake();
}

// write_mu_ held. Encodes tasks into TASK frames (inline bytes or buffer
// references), records them as in flight, and writes the frames - as many as
// keep each under max_message_bytes (a larger one broke the stream). False
// when the stream broke.
bool GrpcRemoteLink::write_tasks(std::vector<pto::RemoteTask>& tasks) {
  std::vector<pto::v1::RemoteTask> encoded;
  std::vector<pto::RemoteCompletion> refused;
  std::vector<Pending> sent;
  for (auto& t : tasks) {
    std::string bad = t.refuse;
    pto::v1::RemoteTask w;
    w.set_id(t.seq);
    w.set_task_id(t.task_id);
    w.set_principal(t.principal);
    w.set_digest(std::string(reinterpret_cast<const char*>(t.callable.digest.data()), 32));
    w.mutable_config()->set_block_dim(t.config.block_dim);
    w.mutable_config()->set_aicpu_thread_num(t.config.aicpu_thread_num);
    w.mutable_config()->set_timeout_ms(t.config.timeout_ms);
    for (size_t i = 0; i < t.tensors.size() && bad.empty(); ++i) {
      const pto::ContinuousTensor& ct = t.tensors[i];
      const uint64_t bytes = pto::tensor_bytes(ct);
      const pto::RemoteBufferRef& ref = t.buffers[i];
      if (ref.id == 0 && bytes > cfg_.inline_limit_bytes) {
        bad = fmt::format(
            "tensor {} has {} bytes, above [session] inline_limit_bytes {}: keep it in a remote "
            "buffer (Worker::alloc_remote) instead",
            i, bytes, cfg_.inline_limit_bytes);
        break;
      }
      auto* rt = w.add_tensors();
      rt->set_dtype(to_wire_dtype(ct.dtype));
      for (int d = 0; d < ct.ndims; ++d) rt->add_shape(ct.shape[d]);
      rt->set_direction(to_wire(t.directions[i]));
      if (ref.id != 0) {  // on the peer already: a reference, no bytes
        auto* b = rt->mutable_buffer();
        b->set_owner(worker_id_);
        b->set_buffer_id(ref.id);
        b->set_generation(ref.generation);
        b->set_offset(ref.offset);
        b->set_bytes(bytes);
      } else if (copies_in(t.directions[i])) {
        rt->set_data(reinterpret_cast<const char*>(ct.data), bytes);
      }
    }
    if (!bad.empty()) {
      refused.push_back({t.seq, static_cast<uint8_t>(pto::Outcome::TASK_FAILURE), "", bad});
      continue;
    }
    for (uint64_t s : t.scalars) w.add_scalars(s);
    encoded.push_back(std::move(w));
    sent.push_back(Pending{std::move(t)});
  }
  bool over = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    over = session_over_;
    if (over) {  // the session ended while encoding: these never left
      for (auto& p : sent)
        done_.push_back({p.task.seq, static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE), "",
                         fmt::format("{}: session lost: {}", label(), end_reason_)});
      sent.clear();
    }
    for (auto& p : sent) {
      p.abandoned = abandoned_.erase(p.task.seq) > 0;
      pending_.emplace(p.task.seq, std::move(p));
    }
    for (auto& r : refused) done_.push_back(std::move(r));
    if (!done_.empty()) has_done_.store(true, std::memory_order_release);
  }
  if ((!refused.empty() || over) && wake_) wake_();
  if (over || encoded.empty()) return !over;
  // A task's inline bytes fit a frame (tensors_to_stage); several go together
  // while they fit.
  const uint64_t budget = cfg_.frame_budget();
  for (size_t from = 0; from < encoded.size();) {
    pto::v1::Frame tf;
    auto* body = tf.mutable_task();
    uint64_t bytes = 0;
    for (; from < encoded.size(); ++from) {
      const uint64_t size = encoded[from].ByteSizeLong() + DaemonConfig::kRepeatedOverhead;
      if (body->tasks_size() > 0 && bytes + size > budget) break;
      bytes += size;
      *body->add_tasks() = std::move(encoded[from]);
    }
    fill_header(&tf);
    if (!stream_->Write(encode_frame(tf))) return false;
  }
  return true;
}

void GrpcRemoteLink::writer_loop() {
  const uint64_t hb_ns = uint64_t(cfg_.heartbeat_ms) * 1'000'000;
  const uint64_t dead_ns = uint64_t(cfg_.dead_after_ms) * 1'000'000;
  uint64_t last_health = 0;
  std::vector<pto::RemoteTask> tasks;
  std::deque<OutFrame> frames;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      out_cv_.wait_for(lk, std::chrono::milliseconds(cfg_.heartbeat_ms / 2 + 1),
                       [&] { return session_over_ || !tasks_out_.empty() || !frames_out_.empty(); });
      if (session_over_) return;
      frames.swap(frames_out_);
      cv_.notify_all();  // stop() waits for its SHUTDOWN to leave the queue
      tasks.clear();
      while (!tasks_out_.empty()) {
        tasks.push_back(std::move(tasks_out_.front()));
        tasks_out_.pop_front();
      }
    }
    bool ok = true;
    const uint64_t now = now_ns();
    {
      std::lock_guard<std::mutex> w(write_mu_);
      for (auto& fr : frames) {
        fill_header(&fr.f);
        if (ok) ok = stream_->Write(encode_frame(fr.f, &fr.data));
      }
      frames.clear();
      if (!tasks.empty() && ok) {
        ok = write_tasks(tasks);
        tasks.clear();  // each is in flight or reported now: not queued again below
      }
      if (ok && now - last_health >= hb_ns) {
        pto::v1::Frame hb;
        hb.mutable_health()->set_sent_ns(now);
        fill_header(&hb);
        ok = stream_->Write(encode_frame(hb));
        last_health = now;
      }
    }
    if (!ok) {
      // Tasks taken this round but never written (a frame before them
      // failed) are in neither pending_ nor tasks_out_: they go back to the
      // queue, which the session's end reports, or are reported here when the
      // session ended already (the watchdog's TryCancel failed the write).
      if (!tasks.empty()) {
        std::lock_guard<std::mutex> g(mu_);
        if (session_over_) {
          for (auto& t : tasks)
            done_.push_back({t.seq, static_cast<uint8_t>(pto::Outcome::ENDPOINT_FAILURE), "",
                             fmt::format("{}: session lost: {}", label(), end_reason_)});
          has_done_.store(true, std::memory_order_release);
        } else {
          tasks_out_.insert(tasks_out_.begin(), std::make_move_iterator(tasks.begin()),
                            std::make_move_iterator(tasks.end()));
        }
        tasks.clear();
      }
      end_session("the connection broke while sending");
      if (wake_) wake_();
      return;
    }
    const uint64_t last = last_recv_ns_.load();
    if (now > last && now - last > dead_ns) {
      end_session(fmt::format("no frame from the peer for {} ms (heartbeat every {} ms)", (now - last) / 1'000'000,
                              cfg_.heartbeat_ms));
      return;
    }
  }
}

void GrpcRemoteLink::reader_loop() {
  pto::v1::Frame f;
  std::string why;
  grpc::ByteBuffer bb;
  Payload chunk;
  while (stream_->Read(&bb)) {
    last_recv_ns_ = now_ns();
    if (!decode_frame(bb, &f, &chunk, &why)) {
      why = "protocol error: " + why;
      break;
    }
    if (std::string bad = check_frame_order(f, session_, in_seq_ + 1); !bad.empty()) {
      why = "protocol error: " + bad;
      break;
    }
    in_seq_ = f.seq();
    if (f.has_completion()) {
      std::vector<pto::RemoteCompletion> out;
      for (const auto& c : f.completion().completions()) {
        // proto3 enums are open: a value past the last Outcome would read as
        // anything the cast makes of it (256 as SUCCESS, its outputs never
        // copied back).
        if (c.outcome() < pto::v1::SUCCESS || c.outcome() > pto::v1::STOPPED) {
          why = fmt::format("protocol error: COMPLETION for task {} has outcome {}, not an Outcome (0..4)", c.id(),
                            int(c.outcome()));
          break;
        }
        Pending p;
        {
          std::lock_guard<std::mutex> g(mu_);
          auto it = pending_.find(c.id());
          if (it == pending_.end()) {
            why = fmt::format("protocol error: COMPLETION for task {}, which is not in flight", c.id());
            break;
          }
          p = std::move(it->second);
          pending_.erase(it);
        }
        pto::RemoteCompletion rc{c.id(), static_cast<uint8_t>(c.outcome()), c.failure().worker(),
                                 c.failure().message()};
        if (c.outcome() == pto::v1::SUCCESS && !p.abandoned) {
          // Abandoned since it left pending_? Then abandon() marked it in
          // abandoned_; from here until the copy is done it waits.
          std::lock_guard<std::mutex> o(outputs_mu_);
          {
            std::lock_guard<std::mutex> g(mu_);
            p.abandoned = abandoned_.erase(c.id()) > 0;
          }
          if (!p.abandoned) copy_outputs_back(c, p.task, &rc);
        } else if (!c.failure().callable().empty() || c.failure().task_id()) {
          rc.message = fmt::format("{} (peer task {}, callable {})", c.failure().message(), c.failure().task_id(),
                                   c.failure().callable().substr(0, 16));
        }
        {
          std::lock_guard<std::mutex> g(mu_);
          if (stager_.unstage(rc, p.task, p.abandoned))
            continue;  // outputs in remote buffers: the stager reads them back
        }
        out.push_back(std::move(rc));
      }
      {
        std::lock_guard<std::mutex> g(mu_);
        for (auto& r : out) done_.push_back(std::move(r));
        has_done_.store(!done_.empty(), std::memory_order_release);
      }
      if (wake_) wake_();
      if (!why.empty()) break;
    } else if (f.has_control_reply()) {
      std::lock_guard<std::mutex> g(mu_);
      auto it = controls_.find(f.control_reply().id());
      if (it != controls_.end()) {
        it->second.done = true;
        it->second.reply = std::move(*f.mutable_control_reply());
        it->second.data = std::move(chunk);
        ctl_cv_.notify_all();
      }
    } else if (f.has_health()) {
      if (f.health().has_tree()) set_tree(f.health().tree());
    } else if (f.has_shutdown()) {
      why = "the peer shut the session down: " + f.shutdown().reason();
      break;
    } else {
      why = fmt::format("protocol error: unexpected frame (body {}) from the peer", int(f.body_case()));
      break;
    }
  }
  end_session(why.empty() ? "the connection was lost" : why);
}

void GrpcRemoteLink::run() {
  auto lg = log("remote");
  uint32_t backoff_ms = 50;
  std::string last_why;
  for (;;) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) break;
    }
    std::string why;
    if (!open_session(&why)) {
      std::unique_lock<std::mutex> lk(mu_);
      state_ = "connecting: " + why;
      if (why != last_why) lg->warn("{}: {}", label(), why);
      last_why = why;
      cv_.wait_for(lk, std::chrono::milliseconds(backoff_ms), [&] { return stop_; });
      backoff_ms = std::min<uint32_t>(backoff_ms * 2, 1000);
      continue;
    }
    last_why.clear();
    std::thread reader([this] { reader_loop(); });
    std::thread writer([this] { writer_loop(); });
    // A new session knows nothing of this coordinator: re-install what was
    // committed before it is used.
    std::map<pto::Digest, std::string> again;
    {
      std::lock_guard<std::mutex> g(mu_);
      again = committed_;
    }
    std::string failed;
    for (const auto& [d, payload] : again) {
      pto::CallableIdentity id;
      id.digest = d;
      pto::Status s = prepare(id, payload, cfg_.peer_ready_timeout_ms);
      if (s.ok()) s = commit(id, cfg_.peer_ready_timeout_ms);
      if (!s.ok()) {
        failed = fmt::format("re-installing {} failed: {}", id.short_hex(), s.message);
        break;
      }
    }
    if (!failed.empty()) {
      end_session(failed);  // the peer cannot hold what the coordinator relies on: not used; retried with backoff
    } else {
      std::lock_guard<std::mutex> g(mu_);
      if (!session_over_) {
        backoff_ms = 50;
        ready_.store(true, std::memory_order_release);
        state_ = "ready";
        lg->info("{}: session {:016x} READY ({} credits, {} registration(s) re-installed)", label(), session_,
                 window_.load(), again.size());
      }
    }
    if (wake_) wake_();
    {
      // This thread is also the session's watchdog: silence for dead_after_ms
      // ends it even when the writer is blocked in a Write (TryCancel
      // unblocks that).
      std::unique_lock<std::mutex> lk(mu_);
      while (!cv_.wait_for(lk, std::chrono::milliseconds(cfg_.heartbeat_ms), [&] { return session_over_ || stop_; })) {
        const uint64_t now = now_ns(), last = last_recv_ns_.load();
        if (now > last && now - last > uint64_t(cfg_.dead_after_ms) * 1'000'000) {
          lk.unlock();
          end_session(fmt::format("no frame from the peer for {} ms (heartbeat every {} ms)", (now - last) / 1'000'000,
                                  cfg_.heartbeat_ms));
          lk.lock();
        }
      }
      if (stop_ && !session_over_) {
        pto::v1::Frame f;
        f.mutable_shutdown()->set_reason("the coordinator is stopping");
        frames_out_.push_back({std::move(f), grpc::Slice()});
        out_cv_.notify_one();
        cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return frames_out_.empty(); });
      }
    }
    bool stopping;
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping = stop_;
    }
    end_session(stopping ? "the coordinator stopped" : "ended");
    writer.join();
    reader.join();
    {
      std::lock_guard<std::mutex> w(write_mu_);  // a direct write in progress finishes first
      (void)stream_->Finish();
      std::lock_guard<std::mutex> g(mu_);
      stream_.reset();
      ctx_.reset();
      session_up_ = false;
      // The marks go with the session, but for tasks whose outputs the stager
      // still reads back (through the peer's fd socket that can outlive the
      // session): it looks at them, and forgets each as it delivers its end.
      std::erase_if(abandoned_, [&](uint64_t seq) { return !stager_.unstaging(seq); });
    }
    if (!failed.empty()) {  // a peer that refuses a re-install is retried at the backoff's pace
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(backoff_ms), [&] { return stop_; });
      backoff_ms = std::min<uint32_t>(backoff_ms * 2, 1000);
      state_ = "connecting: " + failed;
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  state_ = "stopped";
}

}  // namespace ptod
