#include "client_fds.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include "log.h"

namespace ptod {

namespace {

// Closer threads, started as descriptors come and never joined: a close
// may wait as long as the client wants. A thread is started when none is
// free for it, up to kMaxThreads (a client can hold that many in closes that never
// end - FLUSH unanswered - and the descriptors queue behind them: queued,
// each takes no more of the daemon's descriptors than it already did).
class Closer {
 public:
  static constexpr int kMaxThreads = 4;
  static constexpr size_t kWarnQueued = 1024;

  // False when no thread can close it (none could be started).
  bool take(int fd) {
    std::lock_guard<std::mutex> g(mu_);
    // A free thread for each queued descriptor and this one (a thread
    // started for the one before may not have taken it yet).
    if (q_.size() >= size_t(free_) && threads_ < kMaxThreads) {
      try {
        std::thread([this] { main(); }).detach();
        ++threads_;
        ++free_;
      } catch (const std::system_error&) {
        if (threads_ == 0) return false;
      }
    }
    q_.push_back(fd);
    if (q_.size() == kWarnQueued)
      log("main")->warn("{} client descriptors wait for the fd socket's closer threads (their closes wait on clients)",
                        q_.size());
    cv_.notify_one();
    return true;
  }

 private:
  void main() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      // Bounded; an idle closer wakes once a minute.
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
  int threads_ = 0;
  int free_ = 0;  // threads not in a close
};

// Lives as long as the process: its detached threads use it until exit.
Closer& closer() {
  static auto* c = new Closer;
  return *c;
}

// A socket whose close does not wait: TCP over IP without lingering (its
// close waits only with SO_LINGER on and a time) and without an
// upper-layer protocol (kTLS flushes records on close). A unix socket's
// close closes the descriptors queued in it: not one of these.
bool closes_at_once(int fd) {
  int domain = 0, protocol = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || (domain != AF_INET && domain != AF_INET6))
    return false;
  len = sizeof protocol;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) != 0 || protocol != IPPROTO_TCP) return false;
  linger l{};
  len = sizeof l;
  if (getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len) != 0 || (l.l_onoff != 0 && l.l_linger != 0)) return false;
  char ulp[16];
  len = sizeof ulp;
  return getsockopt(fd, IPPROTO_TCP, TCP_ULP, ulp, &len) == 0 && len == 0;
}

}  // namespace

void release_client_fd(int fd) {
  if (fd < 0) return;
  // A memfd, or any tmpfs file (seals are shmem's; a FUSE file has none):
  // nothing to flush. The question never reaches the file's filesystem.
  // The client's socket is left as it is (no option set on it: it may
  // still hold it).
  if (fcntl(fd, F_GET_SEALS) >= 0 || closes_at_once(fd)) {
    ::close(fd);
    return;
  }
  if (closer().take(fd)) return;
  log("main")->error("no closer thread could start: client descriptor {} is closed here", fd);
  ::close(fd);
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
