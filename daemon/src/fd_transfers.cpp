#include "fd_transfers.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "client_fds.h"
#include "fd_frames.h"
#include "fd_wire.h"
#include "job_manager.h"
#include "log.h"
#include "principal.h"
#include "pto/base/crc32c.h"
#include "services.h"
#include "tensor_store.h"
#include "unix_listener.h"

namespace ptod {
namespace {

pto::v1::FdReply reply_error(grpc::StatusCode code, const std::string& message) {
  pto::v1::FdReply r;
  r.set_code(static_cast<int>(code));
  r.set_message(message);
  return r;
}

pto::v1::FdReply reply_status(const Status& s, const std::string& what) {
  const grpc::Status g = to_grpc(s);
  return reply_error(g.error_code(), what + ": " + g.error_message());
}

// `flags`: MSG_DONTWAIT for a refusal at accept, which must not wait.
bool write_frame(int c, const pto::v1::FdReply& r, int flags = 0) {
  size_t sent = 0;
  const std::string frame = fd_reply_frame(r);
  return send_frame(c, frame, &sent, flags) && sent == frame.size();
}

}  // namespace

// The ranges of memfds a connection sent, kept mapped: a client sends the
// same buffer again and again (its staging buffer, its shared buffers), and
// mapping 256 MiB of 4 KiB pages costs about as much as copying them. Only
// the pages of a transfer are mapped, populated at once (one call sets up
// every page instead of a fault per page).
class FdTransfers::Mappings {
 public:
  static constexpr size_t kMax = 4;  // per connection
  Mappings() = default;
  ~Mappings() {
    for (const M& m : ms_) munmap(m.base, m.len);
  }
  Mappings(const Mappings&) = delete;
  Mappings& operator=(const Mappings&) = delete;

  bool empty() const { return ms_.empty(); }
  // [offset, offset + bytes) of memfd `fd` (of `st`), for writing too when
  // `writable`; nullptr and *err on failure.
  uint8_t* map(int fd, const struct stat& st, uint64_t offset, uint64_t bytes, bool writable, int* err) {
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    const uint64_t len = offset + bytes - start;
    ++tick_;
    for (M& m : ms_)
      if (m.dev == st.st_dev && m.ino == st.st_ino && m.start == start && m.len == len &&
          m.file_size == uint64_t(st.st_size) && (m.writable || !writable)) {
        m.used = tick_;
        return m.base + (offset - start);
      }
    bool rw = true;  // both ways when the descriptor allows it, so that the next transfer finds it
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(start));
    if (p == MAP_FAILED && !writable) {
      rw = false;
      p = mmap(nullptr, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(start));
    }
    if (p == MAP_FAILED) {
      *err = errno;
      return nullptr;
    }
    if (ms_.size() == kMax) {
      auto oldest = std::min_element(ms_.begin(), ms_.end(), [](const M& x, const M& y) { return x.used < y.used; });
      munmap(oldest->base, oldest->len);
      ms_.erase(oldest);
    }
    ms_.push_back({st.st_dev, st.st_ino, uint64_t(st.st_size), start, len, static_cast<uint8_t*>(p), rw, tick_});
    return static_cast<uint8_t*>(p) + (offset - start);
  }

 private:
  struct M {
    dev_t dev;
    ino_t ino;
    uint64_t file_size, start, len;
    uint8_t* base;
    bool writable;
    uint64_t used;
  };
  std::vector<M> ms_;
  uint64_t tick_ = 0;
};

pto::Status FdTransfers::bind(const std::string& path) { return listen_unix(path, "the fd socket", 64, &fd_, &wake_); }

void FdTransfers::start() {
  if (fd_ < 0) return;
  if (jobs_) {
    adopted_wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (adopted_wake_ >= 0)
      loop_ = std::thread([this] { job_loop(); });
    else
      loop_ended_ = true;  // no job loop: a connection's thread serves all its jobs
  } else {
    loop_ended_ = true;
  }
  accept_ = std::thread([this] { accept_loop(); });
}

void FdTransfers::accept_loop() {
  int c = -1;
  ucred cr{};
  while (accept_unix(fd_, wake_, 0, "fd socket", &c, &cr)) {
    if (c < 0) continue;
    std::lock_guard<std::mutex> g(mu_);
    if (open_ >= kMaxConnections || by_uid_[cr.uid] >= kMaxPerUser) {
      const std::string why = fmt::format("fd socket: {} connections are open ({} of uid {}); one more is closed",
                                          open_, by_uid_[cr.uid], cr.uid);
      log("tensors")->warn("{}", why);
      // Said before the close, so that the client knows its first request
      // was not read (a job it sent may go through gRPC instead).
      pto::v1::FdReply refusal = reply_error(grpc::StatusCode::RESOURCE_EXHAUSTED, why);
      refusal.set_refused(true);
      (void)write_frame(c, refusal, MSG_DONTWAIT);
      refused_.fetch_add(1, std::memory_order_relaxed);
      close_client_connection(c);
      continue;
    }
    ++by_uid_[cr.uid];
    ++open_;
    spawn_locked(Conn{c, cr.uid}, Handoff{});
  }
}

void FdTransfers::spawn_locked(Conn k, Handoff h) {
  reap_locked();
  const uint64_t id = ++next_id_;
  const uint64_t job = h.job ? h.job->reply.job_id() : 0;  // h is moved into the thread's function
  try {
    threads_.emplace(id, std::thread([this, k, id, h = std::move(h)]() mutable {
                       if (!connection(k, std::move(h))) close_conn(k);
                       std::lock_guard<std::mutex> g(mu_);
                       ended_.push_back(id);
                     }));
  } catch (const std::system_error& e) {
    // No thread to be had (the process's limit): the connection is closed,
    // its client connects again or takes gRPC.
    log("tensors")->warn("fd socket: no thread for a connection (uid {}): {}; it is closed", k.uid, e.what());
    if (job) jobs_->abandon_job(job);  // it goes on; its end is seen through Jobs.Result and Watch
    close_client_connection(k.c);
    --by_uid_[k.uid];
    --open_;
  }
}

void FdTransfers::reap_locked() {
  for (uint64_t id : ended_) {
    auto it = threads_.find(id);
    it->second.join();  // it has ended (it said so last)
    threads_.erase(it);
  }
  ended_.clear();
}

void FdTransfers::close_conn(Conn k) {
  close_client_connection(k.c);  // descriptors still queued in it are let go of, not closed by the kernel here
  std::lock_guard<std::mutex> g(mu_);
  --by_uid_[k.uid];
  --open_;
}

// Why a frame cannot be read as a request (empty: *req holds it), naming the
// case and its figures: a client author reads this, not the daemon's code.
std::string FdTransfers::unreadable_frame(const FdInbound& in, FdInbound::Step step, pto::v1::FdRequest* req) {
  if (in.too_long()) return fmt::format("a request of {} bytes: at most {}", in.announced(), kMaxFdFrame);
  if (in.truncated() && in.descriptors() > FdInbound::kMaxFdsPerRequest)
    return fmt::format("a request with {} descriptors: at most {}", in.descriptors(), FdInbound::kMaxFdsPerRequest);
  if (in.truncated()) return "a request whose control data was cut short: more than one message may carry";
  if (step == FdInbound::Step::kWhole) {
    if (req->ParseFromArray(in.body(), static_cast<int>(in.size()))) return {};
    return fmt::format("a request of {} bytes that is not an FdRequest", in.size());
  }
  const std::string until = step == FdInbound::Step::kLate
                                ? fmt::format("in the {} s a request has from its first byte", kFrameTimeout.count())
                                : std::string("before the connection closed");
  if (!in.length_known())
    return fmt::format("a request cut short: {} of its 4 length bytes came {}", in.head_received(), until);
  return fmt::format("a request cut short: {} of its {} bytes came {}", in.body_received(), in.announced(), until);
}

bool FdTransfers::parse(FdInbound& in, FdInbound::Step step, pto::v1::FdRequest* req, pto::v1::FdReply* refusal,
                        bool* keep) {
  *keep = true;
  if (std::string bad = unreadable_frame(in, step, req); !bad.empty()) {
    *refusal = reply_error(grpc::StatusCode::INVALID_ARGUMENT, bad);
    *keep = false;  // the framing is lost
    return false;
  }
  if (std::string bad = check_fd_request(*req); !bad.empty()) {
    *refusal = reply_error(grpc::StatusCode::INVALID_ARGUMENT, bad);
    return false;
  }
  return true;
}

bool FdTransfers::connection(Conn k, Handoff h) {
  const int c = k.c;
  Mappings mappings;
  const timeval send_bound{static_cast<time_t>(kFrameTimeout.count()), 0};
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &send_bound, sizeof send_bound);
  // What the job loop left unfinished comes first.
  if (!h.unsent.empty()) {
    size_t sent = 0;
    if (!send_frame(c, h.unsent, &sent)) return false;
  }
  if (h.job && !write_frame(c, finish_submit(*h.job, c))) return false;
  std::optional<FdInbound> pending = std::move(h.inbound);
  for (;;) {
    FdInbound in;
    bool stopping = false;
    if (pending) {
      in = std::move(*pending);
      pending.reset();
    } else {
      pollfd p[2] = {{c, POLLIN, 0}, {wake_, POLLIN, 0}};
      const int ready = ::poll(p, 2, static_cast<int>(std::chrono::milliseconds(kIdleTimeout).count()));
      if (ready < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      if (ready == 0) return false;  // idle: the slot goes back (clients connect again)
      // The daemon stops: a request already here is still answered (a job is
      // refused, the daemon draining), so that its client is not left with a
      // lost reply for something that never happened; then the connection ends.
      stopping = p[1].revents != 0;
      if (stopping && !(p[0].revents & POLLIN)) return false;
    }
    // Within kFrameTimeout of its first byte (which may have come to the job loop).
    const FdInbound::Step step =
        in.read(c, (in.started() ? in.started_at() : std::chrono::steady_clock::now()) + kFrameTimeout, wake_);
    if (step == FdInbound::Step::kClosed && !in.started()) return false;  // the client closed
    // The daemon stops: a request still coming in is not waited for, nor
    // answered (its client may read no more than it writes) - the stop has a
    // bound of its own (drain_timeout_s + 2 s) that a 10 s wait here overran.
    if (step == FdInbound::Step::kLate && stop_requested()) return false;
    int fd = in.take_fd();
    pto::v1::FdRequest req;
    pto::v1::FdReply reply;
    bool keep = true;
    bool submitted = false;
    if (parse(in, step, &req, &reply, &keep)) {
      served_[size_t(req.op())].fetch_add(1, std::memory_order_relaxed);
      if (req.op() == pto::v1::FdRequest::SUBMIT) {
        FdJobHost::Job job;
        if (start_submit(req, k.uid, &job, &reply)) reply = finish_submit(job, c);
        submitted = true;  // a descriptor that came with it is closed below
      } else if (fd < 0) {
        reply = reply_error(grpc::StatusCode::INVALID_ARGUMENT,
                            "no descriptor came with the request (a memfd, attached with SCM_RIGHTS)");
      } else {
        reply = serve(req, fd, k.uid, mappings);
        fd = -1;  // serve() closed it
      }
    }
    release_client_fd(fd);  // never a close that waits on the client (client_fds.h)
    if (!write_frame(c, reply) || !keep || stopping) return false;
    // A connection that submits jobs waits for its next request with the
    // others' in the job loop: no thread of its own woken per job. One that
    // moves tensors too keeps its thread, and with it its mapped memfds.
    if (submitted && mappings.empty() && adopt(k)) return true;
  }
}

pto::v1::FdReply FdTransfers::serve(const pto::v1::FdRequest& req, int fd, uid_t uid, Mappings& mappings) {
  struct Release {
    int fd;
    ~Release() { release_client_fd(fd); }
  } release_at_end{fd};
  Principal who;
  if (Status s = principals_.of_unix_peer(uid, req.token(), &who); !s.ok()) {
    // Logged as every refused identity is (start_submit, identify in
    // services.cpp): token guesses through transfers left no trace before.
    log("main")->warn("request from fd socket (uid {}) refused: {}", uid, s.message);
    return reply_status(s, "fd socket");
  }
  // Only a memfd can carry seals; F_SEAL_SHRINK keeps every page the daemon
  // maps in existence until it unmaps it.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK))
    return reply_error(grpc::StatusCode::INVALID_ARGUMENT,
                       "the descriptor must be a memfd sealed against shrinking (memfd_create with "
                       "MFD_ALLOW_SEALING, then F_ADD_SEALS F_SEAL_SHRINK)");
  // tmpfs only: a hugetlbfs memfd whose pool runs dry would fault (SIGBUS)
  // in the daemon's copy.
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
    return reply_error(grpc::StatusCode::INVALID_ARGUMENT,
                       "the memfd must be of ordinary memory (tmpfs), not huge pages (MFD_HUGETLB)");
  struct stat st {};
  if (fstat(fd, &st) != 0) return reply_error(grpc::StatusCode::INVALID_ARGUMENT, "the descriptor cannot be read");
  switch (req.op()) {
    case pto::v1::FdRequest::UPLOAD: return upload(req, fd, st, who, mappings);
    case pto::v1::FdRequest::DOWNLOAD: return download(req, fd, st, who, mappings);
    default: return buffer_chunk(req, fd, st, who, mappings);  // BUFFER_WRITE, BUFFER_READ (check_fd_request)
  }
}

bool FdTransfers::start_submit(const pto::v1::FdRequest& req, uid_t uid, FdJobHost::Job* job,
                               pto::v1::FdReply* refusal) {
  if (!jobs_) {
    *refusal = reply_error(grpc::StatusCode::UNIMPLEMENTED, "submit: this fd socket takes no jobs");
    return false;
  }
  Principal who;
  if (Status s = principals_.of_unix_peer(uid, req.token(), &who); !s.ok()) {
    // Worded and logged as Jobs.Submit's refusal (identify, services.cpp).
    log("main")->warn("request from fd socket (uid {}) refused: {}", uid, s.message);
    const grpc::Status g = to_grpc(s);
    *refusal = reply_error(g.error_code(), g.error_message());
    return false;
  }
  if (const grpc::Status g = jobs_->start_job(who, req.submit(), job); !g.ok()) {
    *refusal = reply_error(g.error_code(), g.error_message());
    return false;
  }
  return true;
}

pto::v1::FdReply FdTransfers::finish_submit(FdJobHost::Job& job, int c) {
  // The client hung up (its end shut or gone): a waiting submit stops
  // waiting, as a cancelled gRPC call's does; the job goes on.
  const auto gone = [c] {
    pollfd p{c, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
  if (const grpc::Status g = jobs_->finish_job(job, gone); !g.ok())
    return reply_error(g.error_code(), g.error_message());
  pto::v1::FdReply r;
  r.mutable_submit()->Swap(&job.reply);
  return r;
}

pto::v1::FdReply FdTransfers::buffer_chunk(const pto::v1::FdRequest& req, int fd, const struct stat& st,
                                           const Principal& who, Mappings& mappings) {
  const bool write = req.op() == pto::v1::FdRequest::BUFFER_WRITE;
  const char* what = write ? "remote buffer write" : "remote buffer read";
  if (!buffers_)
    return reply_error(grpc::StatusCode::FAILED_PRECONDITION, fmt::format("{}: this daemon holds no sessions", what));
  const auto fd_size = static_cast<uint64_t>(st.st_size);
  if (req.fd_offset() > fd_size || fd_size - req.fd_offset() < req.bytes())
    return reply_error(grpc::StatusCode::INVALID_ARGUMENT,
                       fmt::format("{}: the memfd holds {} bytes; {} from offset {} do not fit", what, fd_size,
                                   req.bytes(), req.fd_offset()));
  FdBufferHost::Held held;
  if (std::string why = buffers_->hold_buffer(who, req, &held); !why.empty())
    return reply_error(grpc::StatusCode::NOT_FOUND, fmt::format("{}: {}", what, why));
  struct Release {
    std::function<void()>& f;
    ~Release() { f(); }
  } release_at_end{held.release};
  int err = 0;
  uint8_t* mem = mappings.map(fd, st, req.fd_offset(), req.bytes(), !write, &err);
  if (!mem)
    return reply_error(grpc::StatusCode::INVALID_ARGUMENT,
                       fmt::format("{}: the memfd cannot be mapped: {}", what, pto::errno_text(err)));
  if (write) {
    // As the session's BUFFER_WRITE: through the Worker, into the arena.
    if (Status s = buffers_->engine().write(held.t, req.buffer_offset(), {iovec{mem, req.bytes()}}); !s.ok())
      return reply_error(grpc::StatusCode::INTERNAL, fmt::format("{}: {}", what, s.message));
  } else {
    std::memcpy(mem, reinterpret_cast<const void*>(held.t.data + req.buffer_offset()), req.bytes());
  }
  return pto::v1::FdReply();
}

pto::v1::FdReply FdTransfers::upload(const pto::v1::FdRequest& req, int fd, const struct stat& st,
                                     const Principal& who, Mappings& mappings) {
  const auto fd_size = static_cast<uint64_t>(st.st_size);
  TensorEntry e;
  // Invisible, and not freeable by anyone else, until committed below.
  if (Status s = tensors_.create(who, req.name(), std::vector<uint32_t>(req.shape().begin(), req.shape().end()),
                                 req.dtype(), &e, true);
      !s.ok())
    return reply_status(s, "upload");
  auto fail = [&](grpc::StatusCode code, const std::string& m) {
    tensors_.abandon(e.id);
    return reply_error(code, "upload: " + m);
  };
  if (req.fd_offset() > fd_size || fd_size - req.fd_offset() < e.bytes)
    return fail(grpc::StatusCode::INVALID_ARGUMENT,
                fmt::format("the memfd holds {} bytes; {} from offset {} do not fit", fd_size, e.bytes,
                            req.fd_offset()));
  int err = 0;
  const uint8_t* src = mappings.map(fd, st, req.fd_offset(), e.bytes, false, &err);
  if (!src) return fail(grpc::StatusCode::INVALID_ARGUMENT, "the memfd cannot be mapped: " + pto::errno_text(err));
  if (Status s = tensors_.write(e, 0, src, e.bytes); !s.ok()) return fail(grpc::StatusCode::INTERNAL, s.message);
  if (req.check_crc32c()) {
    const uint32_t crc = pto::crc32c(0, reinterpret_cast<const void*>(e.tensor.data), e.bytes);
    if (crc != req.crc32c())
      return fail(grpc::StatusCode::DATA_LOSS,
                  fmt::format("the bytes have CRC-32C {:08x}, the request says {:08x}", crc, req.crc32c()));
  }
  if (Status s = tensors_.commit(e.id); !s.ok()) return fail(grpc::StatusCode::INTERNAL, s.message);
  pto::v1::FdReply r;
  to_proto(e, r.mutable_tensor());
  log("tensors")->debug("tensor {} uploaded through the fd socket ({} bytes)", e.id, e.bytes);
  return r;
}

pto::v1::FdReply FdTransfers::download(const pto::v1::FdRequest& req, int fd, const struct stat& st,
                                       const Principal& who, Mappings& mappings) {
  const auto fd_size = static_cast<uint64_t>(st.st_size);
  TensorEntry e;
  if (Status s = tensors_.find_and_pin(who, req.tensor().id(), req.tensor().name(), &e); !s.ok())
    return reply_status(s, "download");
  struct Unpin {
    TensorStore& t;
    uint64_t id;
    ~Unpin() { t.pin(id, -1); }
  } unpin_at_end{tensors_, e.id};
  // The room the client gives: `bytes` at fd_offset, or the rest of the memfd.
  const uint64_t rest = req.fd_offset() > fd_size ? 0 : fd_size - req.fd_offset();
  const uint64_t room = req.bytes() ? std::min(req.bytes(), rest) : rest;
  if (room < e.bytes) {
    // OUT_OF_RANGE with the tensor's description: a client can size its
    // buffer and ask again.
    pto::v1::FdReply r = reply_error(grpc::StatusCode::OUT_OF_RANGE,
                                     fmt::format("download: the memfd has room for {} bytes at offset {}; the "
                                                 "tensor's {} do not fit",
                                                 room, req.fd_offset(), e.bytes));
    to_proto(e, r.mutable_tensor());
    return r;
  }
  int err = 0;
  uint8_t* dst = mappings.map(fd, st, req.fd_offset(), e.bytes, true, &err);
  if (!dst)
    return reply_error(grpc::StatusCode::INVALID_ARGUMENT,
                       "download: the memfd cannot be mapped for writing: " + pto::errno_text(err));
  std::memcpy(dst, reinterpret_cast<const void*>(e.tensor.data), e.bytes);
  pto::v1::FdReply r;
  to_proto(e, r.mutable_tensor());
  return r;
}

FdSocketCounts FdTransfers::counts() const {
  FdSocketCounts c;
  for (size_t i = 0; i < c.by_op.size(); ++i) c.by_op[i] = served_[i].load(std::memory_order_relaxed);
  c.refused = refused_.load(std::memory_order_relaxed);
  c.loop_jobs = loop_jobs_.load(std::memory_order_relaxed);
  c.handoffs = handoffs_.load(std::memory_order_relaxed);
  return c;
}

bool FdTransfers::stop_requested() const {
  pollfd p{wake_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void FdTransfers::stop() {
  if (wake_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }
  if (accept_.joinable()) accept_.join();
  // The job loop ends at its next wait (the jobs of a round under way are
  // answered or handed to threads first) and closes its connections; the
  // threads end at their next wait (a transfer under way finishes first).
  // Only these two start threads, so none starts after the swap below.
  if (loop_.joinable()) loop_.join();
  std::map<uint64_t, std::thread> left;
  {
    std::lock_guard<std::mutex> g(mu_);
    left.swap(threads_);
    ended_.clear();
  }
  for (auto& [id, t] : left) t.join();
  if (fd_ >= 0) {
    // Connections not accepted yet may carry descriptors: closing the
    // listener would have the kernel close them here.
    (void)fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
    for (;;) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) break;
      close_client_connection(c);
    }
    ::close(fd_);
  }
  if (wake_ >= 0) ::close(wake_);
  if (adopted_wake_ >= 0) ::close(adopted_wake_);
  fd_ = wake_ = adopted_wake_ = -1;
}

}  // namespace ptod
