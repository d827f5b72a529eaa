#include "remote_fd_path.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

#include "fd_transfers.h"
#include "pto/worker.h"

namespace ptod {

PeerFdPath::~PeerFdPath() {
  std::lock_guard<std::mutex> g(mu_);
  drop_staging_locked();
}

void PeerFdPath::drop_staging_locked() {
  if (slots_) munmap(slots_, 2 * kSlotBytes);
  if (memfd_ >= 0) ::close(memfd_);
  slots_ = nullptr;
  memfd_ = -1;
}

bool PeerFdPath::ready_locked(std::string* why) {
  if (!channel_.connected() && !channel_.connect(fd_socket_path(socket_))) {
    *why = fmt::format("no fd socket at {}: {}", fd_socket_path(socket_), pto::errno_text(errno));
    return false;
  }
  if (slots_) return true;
  // Sealed against shrinking, as the peer requires of any memfd it maps.
  memfd_ = memfd_create("pto-remote-buffer-chunks", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void* p = MAP_FAILED;
  if (memfd_ >= 0 && ftruncate(memfd_, static_cast<off_t>(2 * kSlotBytes)) == 0 &&
      fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK) == 0)
    p = mmap(nullptr, 2 * kSlotBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) {
    *why = "the staging memfd: " + pto::errno_text(errno);
    drop_staging_locked();
    return false;
  }
  slots_ = static_cast<uint8_t*>(p);
  return true;
}

pto::Status PeerFdPath::transfer(const pto::RemoteBufferRef& b, char* host, uint64_t bytes, bool write,
                                 uint32_t timeout_ms) {
  std::lock_guard<std::mutex> g(mu_);
  auto failed = [&](const std::string& why) {
    return pto::Status::Error(pto::kWorkerChildFailed, "the peer's fd socket: " + why);
  };
  std::string why;
  if (!ready_locked(&why)) return failed(why);
  const std::chrono::milliseconds timeout(timeout_ms);
  // Chunk k goes through slot k % 2; at most two requests are in flight,
  // so chunk k + 2 reuses the slot only after chunk k's reply.
  struct Chunk {
    uint64_t off, n;
    uint8_t* slot;
  };
  std::deque<Chunk> in_flight;
  uint64_t next = 0, k = 0;
  auto post = [&]() -> pto::Status {
    Chunk c{next, std::min<uint64_t>(kSlotBytes, bytes - next), slots_ + (k % 2) * kSlotBytes};
    if (write) std::memcpy(c.slot, host + c.off, c.n);
    pto::v1::FdRequest req;
    req.set_op(write ? pto::v1::FdRequest::BUFFER_WRITE : pto::v1::FdRequest::BUFFER_READ);
    req.set_token(token_);
    req.set_buffer_id(b.id);
    req.set_generation(b.generation);
    req.set_buffer_offset(b.offset + c.off);
    req.set_fd_offset(static_cast<uint64_t>(c.slot - slots_));
    req.set_bytes(c.n);
    // Reconnecting (the peer closes a connection idle for a minute) only
    // when nothing is in flight on it.
    if (pto::Status s = channel_.send(req, memfd_, timeout, in_flight.empty()); !s.ok()) return s;
    in_flight.push_back(c);
    next += c.n;
    ++k;
    return pto::Status::Ok();
  };
  pto::Status st;
  bool lost = false;  // a reply that did not come: its request may still be served
  while (st.ok() && next < bytes && in_flight.size() < 2) st = post();
  while (st.ok() && !in_flight.empty()) {
    const Chunk c = in_flight.front();
    in_flight.pop_front();
    auto r = channel_.receive(timeout);
    if (!r.ok()) {
      st = r.status;
      lost = true;
    } else if (r.value.code() != 0) {
      st = pto::Status::Error(pto::kWorkerChildFailed, r.value.message());
    } else {
      if (!write) std::memcpy(host + c.off, c.slot, c.n);
      if (next < bytes) st = post();
    }
  }
  if (st.ok()) return st;
  // Replies may still be owed on this connection, and the peer may still be
  // reading a slot: neither is used again.
  if (lost || !in_flight.empty()) {
    channel_.close();
    drop_staging_locked();
  }
  return failed(st.message);
}

}  // namespace ptod
