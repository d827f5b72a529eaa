#include "fd_channel.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "pto/base/fd_passing.h"

namespace pto::client {
namespace {

Status unavailable(const std::string& what) {
  return Status::Error(static_cast<int>(grpc::StatusCode::UNAVAILABLE),
                       fmt::format("the fd socket: {}: {}", what, pto::errno_text(errno)));
}

}  // namespace

std::string unix_socket_path(const std::string& address) {
  if (address.rfind("unix://", 0) == 0) return address.substr(7);
  if (address.rfind("unix:", 0) == 0) return address.substr(5);
  return "";
}

FdChannel::~FdChannel() { close_socket(); }

void FdChannel::close_socket() {
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
}

bool FdChannel::connect(const std::string& path) {
  close_socket();
  path_ = path;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path) return false;
  std::memcpy(a.sun_path, path.data(), path.size());
  sock_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock_ < 0) return false;
  if (::connect(sock_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    close_socket();
    return false;
  }
  return true;
}

Result<pto::v1::FdReply> FdChannel::call(const pto::v1::FdRequest& req, int fd, std::chrono::milliseconds timeout) {
  if (Status s = send(req, fd, timeout, true); !s.ok()) {
    Result<pto::v1::FdReply> r;
    r.status = s;
    return r;
  }
  return receive(timeout);
}

// A socket timeout of zero is no timeout at all: a bound of at least 1 ms
// (a client's timeout of 0 fails at once, as a gRPC deadline of now does).
static timeval socket_bound(std::chrono::milliseconds timeout) {
  const int64_t ms = std::max<int64_t>(timeout.count(), 1);
  return {static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
}

Status FdChannel::send(const pto::v1::FdRequest& req, int fd, std::chrono::milliseconds timeout, bool reconnect) {
  const timeval bound = socket_bound(timeout);
  // Every send is bounded, also one on a connection made again below.
  auto bounded_send = [&](const std::vector<uint8_t>& frame) {
    return sock_ >= 0 && setsockopt(sock_, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound) == 0 && send_frame(frame, fd);
  };
  const std::string body = req.SerializeAsString();
  std::vector<uint8_t> frame(4 + body.size());
  const auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) frame[size_t(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(frame.data() + 4, body.data(), body.size());
  // The descriptor rides with the frame's first bytes. The daemon closes a
  // connection idle for a minute: then connect again and send once more
  // (nothing of the request reached it).
  if (!bounded_send(frame) && !(reconnect && connect(path_) && bounded_send(frame))) {
    const Status s = unavailable("sending a request");
    close_socket();
    return s;
  }
  return Status::Ok();
}

Result<pto::v1::FdReply> FdChannel::receive(std::chrono::milliseconds timeout) {
  Result<pto::v1::FdReply> r;
  const timeval bound = socket_bound(timeout);
  const bool bounded = sock_ >= 0 && setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound) == 0;
  auto read_full = [&](uint8_t* p, size_t len) {
    while (len > 0) {
      const ssize_t got = ::recv(sock_, p, len, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) errno = ECONNRESET;  // closed: errno is not recv's to say, and may be stale
      if (got <= 0) return false;
      p += got;
      len -= size_t(got);
    }
    return true;
  };
  // A lost reply is not UNAVAILABLE: the daemon may have done the request.
  // One that did not come within the bound is DEADLINE_EXCEEDED, as over gRPC.
  const auto lost = [&] {
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK)
      r.status = Status::Error(
          static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED),
          fmt::format("the fd socket: no reply within {} ms: the request may have been carried out", timeout.count()));
    else
      r.status =
          Status::Error(static_cast<int>(grpc::StatusCode::UNKNOWN),
                        fmt::format("the fd socket: the reply was lost ({}): the request may have been carried out",
                                    pto::errno_text(err)));
    close_socket();
    return r;
  };
  if (sock_ < 0 || !bounded) return lost();
  uint8_t head[4];
  if (!read_full(head, 4)) return lost();
  const uint32_t len = uint32_t(head[0]) | uint32_t(head[1]) << 8 | uint32_t(head[2]) << 16 | uint32_t(head[3]) << 24;
  if (len > (1u << 20)) {  // bounded before anything is allocated
    errno = EPROTO;
    return lost();
  }
  std::vector<uint8_t> reply(len);
  if (!read_full(reply.data(), len)) return lost();
  if (!r.value.ParseFromArray(reply.data(), int(len))) {
    errno = EPROTO;
    return lost();
  }
  if (r.value.refused()) {  // closed at accept, the request unread: nothing happened
    r.status = Status::Error(static_cast<int>(grpc::StatusCode::UNAVAILABLE),
                             "the fd socket refused the connection: " + r.value.message());
    close_socket();
  }
  return r;
}

bool FdChannel::send_frame(const std::vector<uint8_t>& frame, int fd) {
  if (sock_ < 0) return false;
  ssize_t sent = pto::send_with_fd(sock_, frame.data(), frame.size(), fd);
  size_t off = sent > 0 ? size_t(sent) : 0;
  while (sent > 0 && off < frame.size()) {
    sent = ::send(sock_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (sent > 0) off += size_t(sent);
  }
  return sent > 0;
}

}  // namespace pto::client
