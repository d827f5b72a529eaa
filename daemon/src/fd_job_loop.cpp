// The fd socket's job loop: one thread that waits for the next request of
// every connection that submits jobs (epoll), starts the jobs of all the
// requests that came together, drives their runs in waves and answers
// each that ended once the round's last wave is driven (one commit of
// their records). A connection's own thread would sleep in poll() and in its
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

// The loop's own state: its connections and its epoll set, on its thread.
class FdTransfers::JobLoop {
 public:
  explicit JobLoop(FdTransfers& t) : t_(t), ep_(::epoll_create1(EPOLL_CLOEXEC)) {}
  ~JobLoop() {
    for (auto it = open_.begin(); it != open_.end();) t_.close_conn(leave(it++));
    if (ep_ >= 0) ::close(ep_);
  }
  JobLoop(const JobLoop&) = delete;
  JobLoop& operator=(const JobLoop&) = delete;

  void run() {
    if (ep_ < 0 || !watch(t_.wake_) || !watch(t_.adopted_wake_)) {
      log("main")->error("fd socket: the job loop cannot start: {}", pto::errno_text(errno));
      return;
    }
    // Room for every connection and both eventfds: at stop, every request
    // already here is in the last batch and answered.
    epoll_event evs[kMaxConnections + 2];
    bool stopping = false;
    // Stopping, the loop goes on until the requests it holds are answered.
    while (!stopping || !round_.empty()) {
      // Requests left from the last round: they start now, after a look at
      // what else came.
      const int n = ::epoll_wait(ep_, evs, kMaxConnections + 2, round_.empty() ? 1000 : 0);
      if (n < 0 && errno != EINTR) {
        log("main")->error("fd socket: the job loop stops: {}", pto::errno_text(errno));
        return;
      }
      const auto now = Clock::now();
      for (int i = 0; i < n; ++i) {
        if (evs[i].data.fd == t_.wake_) stopping = true;  // the requests already here are answered first
        if (evs[i].data.fd == t_.adopted_wake_) take_adopted(now);
      }
      for (int i = 0; i < n; ++i)
        if (auto it = open_.find(evs[i].data.fd); it != open_.end() && !it->second.waiting) read_request(it, now);
      run_round();
      close_idle();
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Open {
    Conn k;
    Clock::time_point last;  // its last request (kIdleTimeout)
    bool waiting = false;    // its request is in round_, not started yet: nothing more is read
  };
  using Iter = std::map<int, Open>::iterator;
  // A request of this round: its job once started.
  struct Started {
    int c = -1;
    pto::v1::FdRequest req;
    bool started = false;
    bool ended = false;  // its run ended within the round's drive
    FdJobHost::Job job;
  };

  bool watch(int fd) const {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    return ::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &e) == 0;
  }

  // A connection leaves the loop: to a thread of its own, or closed.
  Conn leave(Iter it) {
    (void)::epoll_ctl(ep_, EPOLL_CTL_DEL, it->first, nullptr);
    const Conn k = it->second.k;
    open_.erase(it);
    return k;
  }

  void hand_off(Iter it, Handoff h) {
    t_.handoffs_.fetch_add(1, std::memory_order_relaxed);
    const Conn k = leave(it);
    std::lock_guard<std::mutex> g(t_.mu_);
    t_.spawn_locked(k, std::move(h));
  }

  // A reply sent without waiting; what the socket does not take at once is
  // sent by a thread of the connection's own.
  void answer(Iter it, const pto::v1::FdReply& r) {
    size_t sent = 0;
    const std::string frame = fd_reply_frame(r);
    if (!send_frame(it->first, frame, &sent, MSG_DONTWAIT)) {
      t_.close_conn(leave(it));
    } else if (sent < frame.size()) {
      Handoff h;
      h.unsent = frame.substr(sent);
      hand_off(it, std::move(h));
    }
  }

  // The connections threads handed over (adopt).
  void take_adopted(Clock::time_point now) {
    uint64_t count = 0;
    (void)!::read(t_.adopted_wake_, &count, sizeof count);
    std::vector<Conn> in;
    {
      std::lock_guard<std::mutex> g(t_.mu_);
      in.swap(t_.adopted_);
    }
    for (const Conn& k : in) {
      if (watch(k.c)) {
        open_[k.c] = Open{k, now};
      } else {
        std::lock_guard<std::mutex> g(t_.mu_);
        t_.spawn_locked(k, Handoff{});  // served by a thread of its own, as before the loop
      }
    }
  }

  // What connection `it` sent: a job for this round, or the connection to a
  // thread of its own with what was read.
  void read_request(Iter it, Clock::time_point now) {
    const int c = it->first;
    it->second.last = now;
    FdInbound in;
    const FdInbound::Step step = in.read(c);
    if (step == FdInbound::Step::kClosed && !in.started()) {
      t_.close_conn(leave(it));  // the client closed
      return;
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
      return;
    }
    t_.served_[size_t(req.op())].fetch_add(1, std::memory_order_relaxed);
    it->second.waiting = true;
    round_.emplace_back();
    round_.back().c = c;
    round_.back().req.Swap(&req);
  }

  // Starts the round's jobs in waves as wide as the jobs that run at once:
  // a job beyond those would be queued in the Worker, whose run threads
  // take it up only to find no slot for it. The round has kLoopDrive for
  // all its waves (its first wave always starts): the requests left wait
  // for the next round. Then it answers each job that ended and hands on
  // each that did not: the commit before the first answer carries the
  // records of every job of the round that ended (JobManager's
  // flush_records), one transaction a round. Answering a wave before the
  // next one starts cost a commit per wave: measured, 8 clients 9.2k-10.9k
  // jobs/s against 11.5k-13.1k (docs/daemon.md, the job loop).
  void run_round() {
    const size_t wave = std::max<size_t>(1, t_.jobs_->concurrent_jobs());
    const auto bound = Clock::now() + kLoopDrive;
    size_t first = 0;
    for (; first < round_.size() && (first == 0 || Clock::now() < bound); first += wave) {
      const size_t last = std::min(round_.size(), first + wave);
      for (size_t j = first; j < last; ++j) {
        Started& s = round_[j];
        auto it = open_.find(s.c);  // there: only its own request makes it leave
        it->second.waiting = false;
        pto::v1::FdReply refusal;
        s.started = t_.start_submit(s.req, it->second.k.uid, &s.job, &refusal);
        if (!s.started) answer(it, refusal);
      }
      for (size_t j = first; j < last; ++j) {
        Started& s = round_[j];
        if (s.started) s.ended = t_.jobs_->drive_job(s.job, bound);
      }
    }
    for (size_t j = 0; j < std::min(first, round_.size()); ++j) {
      Started& s = round_[j];
      if (s.started) finish(s);
    }
    round_.erase(round_.begin(), round_.begin() + static_cast<std::ptrdiff_t>(std::min(first, round_.size())));
  }

  void finish(Started& s) {
    auto it = open_.find(s.c);
    if (!s.ended) {
      Handoff h;
      h.job = std::move(s.job);
      hand_off(it, std::move(h));
      return;
    }
    t_.loop_jobs_.fetch_add(1, std::memory_order_relaxed);
    answer(it, t_.finish_submit(s.job, s.c));  // ended: no wait but for its record's commit
  }

  // Idle connections give their slots back (clients connect again).
  void close_idle() {
    const auto now = Clock::now();
    for (auto it = open_.begin(); it != open_.end();) {
      auto next = std::next(it);
      if (now - it->second.last >= kIdleTimeout) t_.close_conn(leave(it));
      it = next;
    }
  }

  FdTransfers& t_;
  const int ep_;
  std::map<int, Open> open_;  // by socket
  std::vector<Started> round_;
};

void FdTransfers::job_loop() {
  JobLoop(*this).run();  // its connections closed as it ends
  std::vector<Conn> left;
  {
    std::lock_guard<std::mutex> g(mu_);
    loop_ended_ = true;
    left.swap(adopted_);
  }
  for (const Conn& k : left) close_conn(k);
}

}  // namespace ptod
