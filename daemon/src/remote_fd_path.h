// Remote-buffer chunks through a peer's fd socket (docs/remote.md, "Remote
// buffers through the fd socket"): when the coordinator reaches its peer by
// a unix socket, the peer is on this host, and a chunk need not travel
// through the session's stream (two kernel copies and gRPC's framing each
// way). The coordinator copies the chunk into a staging memfd and sends a
// BUFFER_WRITE naming it on the peer's fd socket; the peer copies it into
// the buffer (a read: the other way round). The memfd has two slots: the
// peer copies one chunk while this side fills (or empties) the other.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "fd_channel.h"
#include "pto/base/status.h"
#include "pto/remote.h"

namespace ptod {

class PeerFdPath {
 public:
  static constexpr uint64_t kSlotBytes = 8 << 20;  // one chunk per request; the memfd holds two

  // `socket`: the peer's unix gRPC socket (its fd socket is beside it);
  // `token`: the bearer the session presents ("" = this process's user).
  PeerFdPath(std::string socket, std::string token) : socket_(std::move(socket)), token_(std::move(token)) {}
  ~PeerFdPath();
  PeerFdPath(const PeerFdPath&) = delete;
  PeerFdPath& operator=(const PeerFdPath&) = delete;

  // Moves `bytes` between `host` and buffer b; each reply waited for at
  // most timeout_ms. On failure the caller may move the bytes another way
  // (a chunk written twice is written the same): a peer without an fd
  // socket, or one this process may not connect to, is tried again by the
  // next transfer (the peer may have been restarted since). Transfers on one
  // path take turns (one staging memfd).
  pto::Status transfer(const pto::RemoteBufferRef& b, char* host, uint64_t bytes, bool write, uint32_t timeout_ms);
 private:
  bool ready_locked(std::string* why);  // the connection and the staging memfd
  void drop_staging_locked();

  const std::string socket_, token_;
  std::mutex mu_;
  pto::client::FdChannel channel_;
  int memfd_ = -1;
  uint8_t* slots_ = nullptr;  // 2 * kSlotBytes, mapped
};

}  // namespace ptod
