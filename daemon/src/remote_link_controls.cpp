// GrpcRemoteLink's CONTROL calls over the session (docs/remote.md,
// "Registration" and "Remote buffers"): one call or several in flight, the
// two-phase registration of callables on the peer, and remote buffers —
// allocated, freed, written and read in chunks through a sliding window.
// The session itself (streams, reader, writer, tasks) is remote_link.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include "log.h"
#include "remote_link.h"
#include "remote_fd_path.h"

namespace ptod {

pto::Status GrpcRemoteLink::call(pto::v1::Control c, uint32_t timeout_ms, pto::v1::ControlReply* reply) {
  std::vector<pto::v1::Control> one(1);
  one[0] = std::move(c);
  std::vector<pto::v1::ControlReply> replies;
  pto::Status s = call_batch(one, timeout_ms, &replies);
  if (!replies.empty()) *reply = std::move(replies[0]);
  return s;
}

uint64_t GrpcRemoteLink::post_control(pto::v1::Control&& c, grpc::Slice data) {
  if (!session_up_ || session_over_) return 0;
  const uint64_t id = ++control_id_;
  c.set_id(id);
  pto::v1::Frame f;
  *f.mutable_control() = std::move(c);
  controls_[id];
  frames_out_.push_back({std::move(f), std::move(data)});
  out_cv_.notify_one();
  return id;
}

pto::Status GrpcRemoteLink::await_control(std::unique_lock<std::mutex>& lk, uint64_t id,
                                          std::chrono::steady_clock::time_point deadline, uint32_t timeout_ms,
                                          pto::v1::ControlReply* reply, Payload* data) {
  if (id == 0)
    return pto::Status::Error(pto::kWorkerChildFailed, fmt::format("{} is not connected ({})", label(), state_));
  const bool done = ctl_cv_.wait_until(lk, deadline, [&] { return controls_[id].done; });
  *reply = std::move(controls_[id].reply);
  if (data) *data = std::move(controls_[id].data);
  controls_.erase(id);
  if (!done)
    return pto::Status::Error(pto::kWorkerTimeout, fmt::format("{} did not answer within {} ms", label(), timeout_ms));
  if (!reply->ok()) return pto::Status::Error(pto::kWorkerChildFailed, reply->message());
  return pto::Status::Ok();
}

// Several CONTROLs in flight at once: all are queued for the writer, then
// every reply is awaited; the first failure is returned.
pto::Status GrpcRemoteLink::call_batch(std::vector<pto::v1::Control>& cs, uint32_t timeout_ms,
                                       std::vector<pto::v1::ControlReply>* replies) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!session_up_ || session_over_)
    return pto::Status::Error(pto::kWorkerChildFailed, fmt::format("{} is not connected ({})", label(), state_));
  std::vector<uint64_t> ids;
  for (auto& c : cs) ids.push_back(post_control(std::move(c)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  pto::Status first;
  for (uint64_t id : ids) {
    pto::Status s = await_control(lk, id, deadline, timeout_ms, &replies->emplace_back());
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

pto::Status GrpcRemoteLink::prepare(const pto::CallableIdentity& id, const std::string& payload, uint32_t timeout_ms) {
  const std::string digest(reinterpret_cast<const char*>(id.digest.data()), 32);
  pto::v1::Control q;
  q.set_op(pto::v1::Control::QUERY);
  q.set_digest(digest);
  pto::v1::ControlReply r;
  if (pto::Status s = call(q, timeout_ms, &r); !s.ok()) return s;
  pto::v1::Control p;
  p.set_op(pto::v1::Control::PREPARE);
  p.set_digest(digest);
  // The bytes travel only to a peer that lacks the digest.
  if (!r.present() && !p.mutable_request()->ParseFromString(payload))
    return pto::Status::Error(pto::kWorkerInvalidArgument, "the registration payload is not a pto.v1.RegisterRequest");
  if (pto::Status s = call(p, timeout_ms, &r); !s.ok()) return s;
  log("remote")->info("{}: prepared {} ({})", label(), id.short_hex(),
                      r.present() || !p.has_request() ? "already held: no bytes sent"
                                                      : fmt::format("{} bytes sent", p.request().ByteSizeLong()));
  std::lock_guard<std::mutex> g(mu_);
  prepared_[id.digest] = payload;
  return pto::Status::Ok();
}

pto::Status GrpcRemoteLink::digest_op(int op, const pto::CallableIdentity& id, uint32_t timeout_ms) {
  pto::v1::Control c;
  c.set_op(static_cast<pto::v1::Control::Op>(op));
  c.set_digest(std::string(reinterpret_cast<const char*>(id.digest.data()), 32));
  pto::v1::ControlReply r;
  return call(c, timeout_ms, &r);
}

pto::Status GrpcRemoteLink::commit(const pto::CallableIdentity& id, uint32_t timeout_ms) {
  if (pto::Status s = digest_op(pto::v1::Control::COMMIT, id, timeout_ms); !s.ok()) return s;
  std::lock_guard<std::mutex> g(mu_);
  auto it = prepared_.find(id.digest);
  if (it == prepared_.end())
    return pto::Status::Error(pto::kWorkerInvalidArgument,
                              fmt::format("{}: commit of {} without a prepare", label(), id.short_hex()));
  committed_[id.digest] = it->second;
  prepared_.erase(it);
  return pto::Status::Ok();
}

pto::Status GrpcRemoteLink::abort(const pto::CallableIdentity& id, uint32_t timeout_ms) {
  {
    std::lock_guard<std::mutex> g(mu_);
    prepared_.erase(id.digest);
  }
  return digest_op(pto::v1::Control::ABORT, id, timeout_ms);
}

pto::Status GrpcRemoteLink::unregister(const pto::CallableIdentity& id, uint32_t timeout_ms) {
  {
    std::lock_guard<std::mutex> g(mu_);
    committed_.erase(id.digest);
  }
  return digest_op(pto::v1::Control::UNREGISTER, id, timeout_ms);
}

pto::Status GrpcRemoteLink::buffer_alloc(uint64_t bytes, pto::RemoteBufferRef* out, uint32_t timeout_ms) {
  pto::v1::Control c;
  c.set_op(pto::v1::Control::BUFFER_ALLOC);
  c.set_bytes(bytes);
  pto::v1::ControlReply r;
  if (pto::Status s = call(c, timeout_ms, &r); !s.ok()) return s;
  out->id = r.buffer_id();
  out->generation = r.generation();
  out->offset = 0;
  return pto::Status::Ok();
}

pto::Status GrpcRemoteLink::buffer_free(const pto::RemoteBufferRef& b, uint32_t timeout_ms) {
  pto::v1::Control c;
  c.set_op(pto::v1::Control::BUFFER_FREE);
  c.set_buffer_id(b.id);
  c.set_generation(b.generation);
  pto::v1::ControlReply r;
  return call(c, timeout_ms, &r);
}

pto::Status GrpcRemoteLink::buffer_write(const pto::RemoteBufferRef& b, const void* src, uint64_t bytes,
                                         uint32_t timeout_ms) {
  return transfer(b, static_cast<char*>(const_cast<void*>(src)), bytes, true, timeout_ms);
}

pto::Status GrpcRemoteLink::buffer_read(const pto::RemoteBufferRef& b, void* dst, uint64_t bytes, uint32_t timeout_ms) {
  return transfer(b, static_cast<char*>(dst), bytes, false, timeout_ms);
}

pto::Status GrpcRemoteLink::transfer(const pto::RemoteBufferRef& b, char* host, uint64_t bytes, bool write,
                                     uint32_t timeout_ms) {
  if (fd_path_) {
    const pto::Status s = fd_path_->transfer(b, host, bytes, write, timeout_ms);
    if (s.ok()) {
      fd_path_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      return s;
    }
    // The stream gives the authoritative answer (a buffer no longer live
    // fails there as well); the fd path is tried again next time.
    if (!fd_path_failed_.exchange(true))
      log("remote")->info("{}: remote-buffer bytes go over the session's stream: {}", label(), s.message);
  }
  return transfer_on_stream(b, host, bytes, write, timeout_ms);
}

// Chunked: one CONTROL per kChunkBytes in a sliding window of kChunkWindow —
// each reply that arrives lets the next chunk go, so the stream never drains
// between windows. Each chunk waits at most timeout_ms for its reply; after
// the first failure nothing more is sent or awaited (later replies are
// dropped by the reader), and a chunk is only sent on the session the
// transfer began on. A chunk written goes as a slice over the caller's
// bytes (session_wire.h); a chunk read is copied from gRPC's buffers
// straight into the caller's, without the lock.
pto::Status GrpcRemoteLink::transfer_on_stream(const pto::RemoteBufferRef& b, char* host, uint64_t bytes,
                                               bool write, uint32_t timeout_ms) {
  struct Chunk {
    uint64_t id, off, n;
  };
  std::deque<Chunk> in_flight;
  uint64_t next = 0;
  auto lent = std::make_shared<pto::v1::LentSlices>();
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t session = session_;
  auto post_next = [&] {
    const uint64_t n = std::min<uint64_t>(kChunkBytes, bytes - next);
    pto::v1::Control c;
    c.set_op(write ? pto::v1::Control::BUFFER_WRITE : pto::v1::Control::BUFFER_READ);
    c.set_buffer_id(b.id);
    c.set_generation(b.generation);
    c.set_offset(b.offset + next);
    grpc::Slice data;
    if (write)
      data = lent->slice(host + next, n);
    else
      c.set_bytes(n);
    in_flight.push_back({session_ == session ? post_control(std::move(c), std::move(data)) : 0, next, n});
    next += n;
  };
  while (next < bytes && in_flight.size() < static_cast<size_t>(kChunkWindow)) post_next();
  pto::Status first;
  while (!in_flight.empty()) {
    const Chunk k = in_flight.front();
    in_flight.pop_front();
    pto::v1::ControlReply r;
    Payload got;
    if (!first.ok()) {  // already failed: forget the rest without waiting
      if (k.id != 0) controls_.erase(k.id);
      continue;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    if (pto::Status s = await_control(lk, k.id, deadline, timeout_ms, &r, &got); !s.ok()) {
      first = s;
      continue;
    }
    if (!write) {
      const uint64_t size = got.empty() ? r.data().size() : got.size;
      if (size != k.n) {
        first = pto::Status::Error(pto::kWorkerChildFailed, fmt::format("{}: read {} bytes at offset {}, got {}",
                                                                        label(), k.n, b.offset + k.off, size));
        continue;
      }
      lk.unlock();
      if (got.empty())
        std::memcpy(host + k.off, r.data().data(), k.n);
      else
        got.copy_to(host + k.off);
      lk.lock();
    }
    if (next < bytes) post_next();
  }
  lk.unlock();
  // gRPC may still hold a written chunk's slice after its reply came back
  // (or after a failure, queued or in the socket). The caller's bytes are
  // its until every slice is let go.
  std::string why;
  const bool let_go = lent->wait(
      [&] {
        std::lock_guard<std::mutex> g(mu_);
        return session_ == session && session_up_ && !session_over_;
      },
      &why);
  if (!let_go && first.ok()) first = pto::Status::Error(pto::kWorkerChildFailed, fmt::format("{}: {}", label(), why));
  return first;
}

}  // namespace ptod
