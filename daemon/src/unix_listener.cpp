#include "unix_listener.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "log.h"
#include "principal.h"

namespace ptod {

pto::Status listen_unix(const std::string& path, const char* what, int backlog, int* fd, int* wake) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    return pto::Status::Error(pto::kInvalidConfig,
                              fmt::format("{} '{}': the path is longer than {} bytes", what, path, sizeof a.sun_path - 1));
  std::memcpy(a.sun_path, path.data(), path.size());
  *fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  *wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (*fd < 0 || *wake < 0 || ::bind(*fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(*fd, backlog) != 0) {
    const int err = errno;
    if (*fd >= 0) ::close(*fd);
    if (*wake >= 0) ::close(*wake);
    *fd = *wake = -1;
    return pto::Status::Error(pto::kInvalidConfig,
                              fmt::format("{} '{}': cannot listen: {}", what, path, pto::errno_text(err)));
  }
  chmod(path.c_str(), 0660);
  return pto::Status::Ok();
}

pto::Status UnixListener::bind(const std::string& path) {
  return listen_unix(path, "[server] socket", 128, &fd_, &wake_);
}

void UnixListener::start(grpc::Server* server, UnixPeers* peers) {
  if (fd_ >= 0) thread_ = std::thread([this, server, peers] { accept_loop(server, peers); });
}

bool accept_unix(int fd, int wake, int flags, const char* what, int* conn, ucred* cr) {
  *conn = -1;
  pollfd p[2] = {{fd, POLLIN, 0}, {wake, POLLIN, 0}};
  if (::poll(p, 2, -1) < 0 && errno != EINTR) return false;
  if (p[1].revents) return false;
  if (!(p[0].revents & POLLIN)) return true;
  const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | flags);
  if (c < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      log("main")->warn("{}: cannot accept a connection: {}", what, pto::errno_text(errno));
      ::poll(p + 1, 1, 100);  // out of descriptors: let some close instead of spinning
    }
    return true;
  }
  socklen_t len = sizeof *cr;
  if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, cr, &len) != 0) {
    ::close(c);
    return true;
  }
  *conn = c;
  return true;
}

void UnixListener::accept_loop(grpc::Server* server, UnixPeers* peers) {
  int c = -1;
  ucred cr{};
  // Non-blocking, as gRPC's own endpoints are: its poller reads until EAGAIN.
  while (accept_unix(fd_, wake_, SOCK_NONBLOCK, "unix socket", &c, &cr)) {
    if (c < 0) continue;
    peers->set(c, cr.uid, cr.pid);
    grpc::AddInsecureChannelFromFd(server, c);  // the server owns c from here on
  }
}

void UnixListener::stop() {
  if (wake_ >= 0) {
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  if (wake_ >= 0) ::close(wake_);
  fd_ = wake_ = -1;
}

}  // namespace ptod
