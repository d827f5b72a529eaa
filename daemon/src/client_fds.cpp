#include "client_fds.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "log.h"

namespace ptod {

namespace {

// Closer threads, started as descriptors come and never joined: a close
// may wait as long as the client wants. A thread is started when none is
// free, up to kMaxThreads (a client can hold that many in closes that never
// end: FLUSH unanswered; the descriptors queue behind them). Past
// max_queued() a descriptor is kept open, logged, rather than closed where
// the caller would wait: an unbounded queue would let a client take every
// descriptor the daemon may open.
class Closer {
 public:
  static constexpr int kMaxThreads = 4;
  // A quarter of the descriptors the process may open, at most 4096 (under
  // systemd ptod may open 65536: deploy/ptod.service.in).
  static size_t max_queued() {
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) return 4096;
    return std::clamp<size_t>(nofile.rlim_cur / 4, 16, 4096);
  }

  bool take(int fd) {
    std::lock_guard<std::mutex> g(mu_);
    if (q_.size() >= max_queued_) return false;
    if (free_ == 0 && threads_ < kMaxThreads) {
      try {
        std::thread([this] { main(); }).detach();
        ++threads_;
        ++free_;
      } catch (const std::system_error&) {
        if (threads_ == 0) return false;  // no thread to close it: the caller's to decide
      }
    }
    q_.push_back(fd);
    cv_.notify_one();
    return true;
  }

 private:
  void main() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      // Bounded (a minute: an idle daemon is not woken for nothing).
      if (!cv_.wait_for(lk, std::chrono::seconds(60), [&] { return !q_.empty(); })) continue;
      const int fd = q_.front();
      q_.pop_front();
      --free_;
      lk.unlock();
      ::close(fd);
      lk.lock();
      ++free_;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> q_;
  const size_t max_queued_ = max_queued();
  int threads_ = 0;
  int free_ = 0;  // threads not in a close
};

// Lives as long as the process: its detached threads use it until exit.
Closer& closer() {
  static auto* c = new Closer;
  return *c;
}

// TCP over IP with no upper-layer protocol (kTLS flushes records on close):
// with SO_LINGER 0 its close sends a reset and never waits.
bool plain_tcp(int fd) {
  int domain = 0, protocol = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || (domain != AF_INET && domain != AF_INET6))
    return false;
  len = sizeof protocol;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) return false;
  char ulp[16];
  len = sizeof ulp;
  return getsockopt(fd, IPPROTO_TCP, TCP_ULP, ulp, &len) == 0 && len == 0;
}

}  // namespace

void release_client_fd(int fd) {
  if (fd < 0) return;
  // A memfd, or any tmpfs file (seals are shmem's; a FUSE file has none):
  // nothing to flush. The question never reaches the file's filesystem.
  if (fcntl(fd, F_GET_SEALS) >= 0) {
    ::close(fd);
    return;
  }
  if (plain_tcp(fd)) {
    const linger at_once{1, 0};
    if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &at_once, sizeof at_once) == 0) {
      ::close(fd);
      return;
    }
  }
  if (closer().take(fd)) return;
  log("main")->error("client descriptor {} is kept open: {} wait for the closer threads, or none could start", fd,
                     Closer::max_queued());
}

void close_client_connection(int c) {
  // The client can send no more; what it sent is still read.
  ::shutdown(c, SHUT_RD);
  char bytes[16384];
  bool cut = false;
  for (;;) {
    const ssize_t got = receive_with_descriptors(c, bytes, sizeof bytes, release_client_fd, &cut);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
  }
  ::close(c);
}

}  // namespace ptod
