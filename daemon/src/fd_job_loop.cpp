// The fd socket's job loop: one thread that waits for the next request of
// every connection that submits jobs (epoll), starts the jobs of all the
// requests that came together, drives their runs at once and answers each
// as it ends. A connection's own thread would sleep in poll() and in its
// run's wait, and be woken for each; with many clients each job paid those
// wake-ups (this VM's context switches cost more than a trivial job's
// work). Anything that could hold the loop goes to a thread of the
// connection's own (FdTransfers::Handoff): a request that is not a job or
// not whole yet, a job that has not ended within kLoopDrive, a reply the
// socket would not take at once.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "fd_transfers.h"
#include "log.h"

namespace ptod {
namespace {

// How long one round of the loop drives its jobs before it hands those not
// ended to threads: long against a trivial job's ~0.1 ms, short enough that
// other clients' requests do not wait long behind a slow job (a wait rounds
// up to the next millisecond: RunHandle::wait takes milliseconds).
constexpr std::chrono::milliseconds kLoopDrive{2};

}  // namespace

bool FdTransfers::adopt(Conn k) {
  std::lock_guard<std::mutex> g(mu_);
  if (loop_ended_) return false;
  adopted_.push_back(k);
  const uint64_t one = 1;
  (void)!::write(adopted_wake_, &one, sizeof one);
  return true;
}

void FdTransfers::job_loop() {
  using Clock = std::chrono::steady_clock;
  struct Open {
    Conn k;
    Clock::time_point last;  // its last request (kIdleTimeout)
  };
  std::map<int, Open> open;  // by socket
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  const auto watch = [ep](int fd) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    return ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
  };
  // A connection leaves the loop: to a thread of its own, or closed.
  const auto leave = [&](std::map<int, Open>::iterator it) {
    (void)::epoll_ctl(ep, EPOLL_CTL_DEL, it->first, nullptr);
    const Conn k = it->second.k;
    open.erase(it);
    return k;
  };
  const auto hand_off = [&](std::map<int, Open>::iterator it, Handoff h) {
    handoffs_.fetch_add(1, std::memory_order_relaxed);
    const Conn k = leave(it);
    std::lock_guard<std::mutex> g(mu_);
    spawn_locked(k, std::move(h));
  };
  // A reply sent without waiting; what the socket does not take at once is
  // sent by a thread of the connection's own.
  const auto answer = [&](std::map<int, Open>::iterator it, const pto::v1::FdReply& r) {
    size_t sent = 0;
    const std::string frame = fd_reply_frame(r);
    if (!send_frame(it->first, frame, &sent, MSG_DONTWAIT)) {
      close_conn(leave(it));
    } else if (sent < frame.size()) {
      Handoff h;
      h.unsent = frame.substr(sent);
      hand_off(it, std::move(h));
    }
  };
  bool stopping = ep < 0 || !watch(wake_) || !watch(adopted_wake_);
  if (stopping) log("main")->error("fd socket: the job loop cannot start: {}", pto::errno_text(errno));
  struct Started {
    int c = -1;
    pto::v1::FdRequest req;
    bool started = false;
    FdJobHost::Job job;
  };
  std::vector<Started> round;
  // Room for every connection and both eventfds: at stop, every request
  // already here is in the last batch and answered.
  epoll_event evs[kMaxConnections + 2];
  while (!stopping) {
    const int n = ::epoll_wait(ep, evs, kMaxConnections + 2, 1000);
    if (n < 0 && errno != EINTR) {
      log("main")->error("fd socket: the job loop stops: {}", pto::errno_text(errno));
      break;
    }
    const auto now = Clock::now();
    for (int i = 0; i < n; ++i) {
      const int fd = evs[i].data.fd;
      if (fd == wake_) {
        stopping = true;  // the requests already here are answered first
      } else if (fd == adopted_wake_) {
        uint64_t count = 0;
        (void)!::read(adopted_wake_, &count, sizeof count);
        std::vector<Conn> in;
        {
          std::lock_guard<std::mutex> g(mu_);
          in.swap(adopted_);
        }
        for (const Conn& k : in) {
          if (watch(k.c)) {
            open[k.c] = Open{k, now};
          } else {
            std::lock_guard<std::mutex> g(mu_);
            spawn_locked(k, Handoff{});  // served by a thread of its own, as before the loop
          }
        }
      }
    }
    // Read every request that came: their jobs start together.
    for (int i = 0; i < n; ++i) {
      const int c = evs[i].data.fd;
      auto it = open.find(c);
      if (it == open.end()) continue;  // the eventfds
      it->second.last = now;
      FdInbound in;
      const FdInbound::Step step = in.read(c);
      if (step == FdInbound::Step::kClosed && !in.started()) {
        close_conn(leave(it));  // the client closed
        continue;
      }
      pto::v1::FdRequest req;
      pto::v1::FdReply refusal;
      bool keep = true;
      // Only a whole, well-formed SUBMIT without a descriptor is the loop's;
      // its thread answers anything else as it always did.
      if (step != FdInbound::Step::kWhole || in.too_long() || in.truncated() || in.has_fd() ||
          !parse(in, step, &req, &refusal, &keep) || req.op() != pto::v1::FdRequest::SUBMIT) {
        Handoff h;
        h.inbound = std::move(in);
        hand_off(it, std::move(h));
        continue;
      }
      served_[size_t(req.op())].fetch_add(1, std::memory_order_relaxed);
      round.emplace_back();
      round.back().c = c;
      round.back().req.Swap(&req);
    }
    // Start them in waves as wide as the jobs that run at once: a job
    // beyond those would be queued in the Worker, whose run threads take it
    // up only to find no slot for it. Answer each that ended, hand on each
    // that did not. The round has kLoopDrive for all its waves: once that
    // is spent, the jobs left are started and handed on at once.
    const size_t wave = std::max<size_t>(1, jobs_->concurrent_jobs());
    const auto bound = Clock::now() + kLoopDrive;
    for (size_t first = 0; first < round.size(); first += wave) {
      const size_t last = std::min(round.size(), first + wave);
      for (size_t j = first; j < last; ++j) {
        Started& s = round[j];
        auto it = open.find(s.c);
        pto::v1::FdReply refusal;
        s.started = start_submit(s.req, it->second.k.uid, &s.job, &refusal);
        if (!s.started) answer(it, refusal);
      }
      for (size_t j = first; j < last; ++j) {
        Started& s = round[j];
        if (!s.started) continue;
        auto it = open.find(s.c);
        if (!jobs_->drive_job(s.job, bound)) {
          Handoff h;
          h.job = std::move(s.job);
          hand_off(it, std::move(h));
          continue;
        }
        loop_jobs_.fetch_add(1, std::memory_order_relaxed);
        answer(it, finish_submit(s.job, s.c));  // ended: no wait but for its record's commit
      }
    }
    round.clear();
    // Idle connections give their slots back (clients connect again).
    for (auto it = open.begin(); it != open.end();) {
      auto next = std::next(it);
      if (Clock::now() - it->second.last >= kIdleTimeout) close_conn(leave(it));
      it = next;
    }
  }
  for (auto it = open.begin(); it != open.end();) close_conn(leave(it++));
  std::vector<Conn> left;
  {
    std::lock_guard<std::mutex> g(mu_);
    loop_ended_ = true;
    left.swap(adopted_);
  }
  for (const Conn& k : left) close_conn(k);
  if (ep >= 0) ::close(ep);
}

}  // namespace ptod
