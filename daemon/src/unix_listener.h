// ptod's unix socket, accepted by ptod itself rather than by gRPC: gRPC C++
// does not tell a service who is on the other end of a unix socket (grpc/grpc
// issues 15511 and 28755), so each connection's credentials (SO_PEERCRED) are
// read here, recorded by fd (UnixPeers) and the connection is then handed to
// the gRPC server, which names its peer "fd:N".
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>

#include "pto/base/status.h"

namespace grpc {
class Server;
}

namespace ptod {

class UnixPeers;

// A unix stream socket of the daemon's bound at `path` (claimed first, with
// SocketPath), listening, non-blocking, mode 0660; and an eventfd that ends
// the loop accepting on it. `what` names it in errors. On error neither is
// left open.
pto::Status listen_unix(const std::string& path, const char* what, int backlog, int* fd, int* wake);

// One step of a loop accepting on such a socket: waits for a connection or
// `wake`; false when the loop must end. *conn is the connection (accept4
// with `flags` | SOCK_CLOEXEC) and *cr its peer's credentials, or -1 when
// this step accepted none (a failed accept is logged, naming `what`).
bool accept_unix(int fd, int wake, int flags, const char* what, int* conn, ucred* cr);

class UnixListener {
 public:
  UnixListener() = default;
  ~UnixListener() { stop(); }
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Binds and listens (mode 0660); the path was claimed (SocketPath) first.
  pto::Status bind(const std::string& path);
  // Accepts on a thread of its own until stop(): connections queued since
  // bind() are served from here on.
  void start(grpc::Server* server, UnixPeers* peers);
  void stop();

 private:
  void accept_loop(grpc::Server* server, UnixPeers* peers);
  int fd_ = -1;
  int wake_ = -1;  // an eventfd that ends the accept loop
  std::thread thread_;
};

}  // namespace ptod
