// The two endpoint transports (worker_impl.h, EndpointTransport): how the
// scheduler's dispatches, completions and liveness checks reach a forked
// child through its mailbox (docs/worker.md, "Mailbox") and a remote L3
// worker through a RemoteLink (docs/remote.md).
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include "endpoint.h"
#include "remote_buffers.h"
#include "run_state.h"
#include "scheduler.h"

namespace pto {
namespace {

std::string describe_exit(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status),
                       // sigdescr_np: strsignal's text without its shared buffer
                       sigdescr_np(WTERMSIG(status)) ? sigdescr_np(WTERMSIG(status)) : "unknown");
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended";
}

}  // namespace

// A forked child: one task at a time, written into its mailbox; the answer is
// the state word; liveness is waitpid.
class MailboxTransport final : public EndpointTransport {
 public:
  explicit MailboxTransport(Scheduler& w) : w_(w) {}

  uint32_t capacity(const Endpoint&) const override { return 1; }
  uint32_t held(const Endpoint& ep) const override { return ep.running ? 1 : 0; }
  void accept(Endpoint& ep, TaskNode* s, int, uint64_t*) override { ep.running = s; }

  void dispatch(Endpoint& ep, TaskNode* s, int member, uint64_t) override {
    Mailbox* mb = ep.mb;
    const auto& blob = s->blobs[member];
    std::memcpy(mb->digest, s->callable.digest.data(), 32);
    mb->config = s->config;
    mb->chip_submitted.store(0, std::memory_order_relaxed);  // the child is idle: nothing writes them now
    mb->chip_completed.store(0, std::memory_order_relaxed);
    ep.chip_seen_submitted = ep.chip_seen_completed = 0;
    const std::string& log = s->run->options.log_file;
    const size_t log_bytes = log.size() < sizeof mb->log_path ? log.size() : 0;  // too long: not captured
    std::memcpy(mb->log_path, log.data(), log_bytes);
    mb->log_path[log_bytes] = '\0';
    std::memcpy(mb->blob, blob.data(), blob.size());
    mb->blob_bytes = static_cast<uint32_t>(blob.size());
    mb->error_code = 0;
    mb->sequence = ++ep.seq;
    ep.dispatch_ns = now_ns();
    ep.timeout_ns = w_.task_timeout_ns(*s);
    mb->state.store(MB_TASK_READY, std::memory_order_seq_cst);
    if (mb->child_parked.load(std::memory_order_seq_cst)) futex_wake_shared(&mb->state);
  }

  // TASK_READY: still running; anything else is an answer or a broken child.
  bool has_completions(const Endpoint& ep) const override {
    return ep.running && ep.mb->state.load(std::memory_order_acquire) != MB_TASK_READY;
  }

  void collect(Endpoint& ep) override {
    Mailbox* mb = ep.mb;
    const uint32_t st = mb->state.load(std::memory_order_acquire);
    if (!ep.running || st == MB_TASK_READY) return;
    if (st != MB_TASK_DONE && st != MB_TASK_FAILED) {
      w_.endpoint_failed(ep, fmt::format("broke the mailbox protocol: state {} ({}) while a task was in flight", st,
                                         mailbox_state_name(st)));
      return;
    }
    if (mb->done_sequence != ep.seq) {
      // The child answered a different dispatch: it cannot be trusted.
      w_.endpoint_failed(ep,
                         fmt::format("broke the mailbox protocol: completion for dispatch {} while {} was in flight",
                                     mb->done_sequence, ep.seq));
      return;
    }
    w_.record_round_trip(false, now_ns() - ep.dispatch_ns);
    add_chip_progress(ep);  // the final counts, written before the answer
    const bool ok = st == MB_TASK_DONE;
    const std::string msg = ok ? std::string() : mb->error();
    const bool log_untouched = mb->log_appended == 0;
    mb->state.store(MB_IDLE, std::memory_order_release);
    TaskNode* s = ep.running;
    ep.running = nullptr;
    w_.complete_member(ep, s, ok ? Outcome::SUCCESS : Outcome::TASK_FAILURE, msg, log_untouched);
  }

  void check(Endpoint& ep, uint64_t now) override {
    if (!ep.alive) return;
    int status = 0;
    const pid_t r = waitpid(ep.pid, &status, WNOHANG);
    if (r == ep.pid) {
      w_.mark_dead(ep, describe_exit(status), true);
      return;
    }
    if (r < 0 && errno == ECHILD) {  // reaped elsewhere (SIGCHLD ignored by the application?)
      w_.mark_dead(ep, "is gone (it could not be waited for; is SIGCHLD ignored?)", true);
      return;
    }
    if (ep.running) add_chip_progress(ep);
    if (ep.running && ep.timeout_ns && now - ep.dispatch_ns > ep.timeout_ns)
      w_.endpoint_failed(ep, fmt::format("timed out: task {} ran longer than {} ms; the child was killed",
                                         ep.running->id, ep.timeout_ns / 1'000'000));
  }

  std::string down_reason(const Endpoint& ep) const override { return ep.death; }

 private:
  // What the chip child reported since the last look, added to the running
  // task's run (a chip child only; others leave the counters at 0).
  static void add_chip_progress(Endpoint& ep) {
    if (ep.kind != ChildKind::CHIP || !ep.running) return;
    const uint64_t sub = ep.mb->chip_submitted.load(std::memory_order_relaxed);
    const uint64_t comp = ep.mb->chip_completed.load(std::memory_order_relaxed);
    RunState* run = ep.running->run;
    if (sub > ep.chip_seen_submitted)
      run->chip_submitted.fetch_add(sub - ep.chip_seen_submitted, std::memory_order_relaxed);
    if (comp > ep.chip_seen_completed)
      run->chip_completed.fetch_add(comp - ep.chip_seen_completed, std::memory_order_relaxed);
    ep.chip_seen_submitted = std::max(sub, ep.chip_seen_submitted);
    ep.chip_seen_completed = std::max(comp, ep.chip_seen_completed);
  }

  Scheduler& w_;
};

// A remote L3 worker: tasks go to the link (which copies tensor bytes by
// direction), up to the peer's credits; completions come from link->poll();
// liveness is the session being READY.
class RemoteTransport final : public EndpointTransport {
 public:
  RemoteTransport(Scheduler& w, const RemoteBuffers& buffers) : w_(w), buffers_(buffers) {}

  uint32_t capacity(const Endpoint& ep) const override { return ep.link->credits(); }
  uint32_t held(const Endpoint& ep) const override { return static_cast<uint32_t>(ep.inflight.size()); }

  void accept(Endpoint& ep, TaskNode* s, int member, uint64_t* seq) override {
    *seq = ++ep.seq;
    ep.inflight.push_back({*seq, s, member, now_ns(), w_.task_timeout_ns(*s)});
  }

  void dispatch(Endpoint& ep, TaskNode* s, int member, uint64_t seq) override {
    RemoteTask t;
    t.seq = seq;
    t.task_id = s->id;
    t.callable = s->callable;
    t.config = s->config;
    if (s->run) t.principal = s->run->options.principal;
    TaskArgsView view{};
    (void)decode_args(s->blobs[member].data(), s->blobs[member].size(), &view);  // encoded by submit: valid
    t.tensors.assign(view.tensors, view.tensors + view.tensor_count);
    t.scalars.assign(view.scalars, view.scalars + view.scalar_count);
    if (member < static_cast<int>(s->dirs.size())) t.directions = s->dirs[member];
    t.directions.resize(t.tensors.size(), TensorDirection::INOUT);
    t.buffers.resize(t.tensors.size());
    for (size_t i = 0; i < t.tensors.size() && buffers_.active(); ++i) {
      int owner = -1;
      Status err;
      if (buffers_.find(t.tensors[i].data, t.tensors[i].data + tensor_bytes(t.tensors[i]), &owner, &t.buffers[i],
                        &err) &&
          (!err.ok() || owner != ep.index))  // freed since submit: the link refuses the task with this
        t.refuse = fmt::format("tensor {}: {}", i, err.ok() ? "its remote buffer is on another worker" : err.message);
    }
    ep.link->send(std::move(t));
  }

  bool has_completions(const Endpoint& ep) const override { return ep.link->has_completions(); }

  void collect(Endpoint& ep) override {
    done_.clear();
    ep.link->poll(&done_);
    ep.alive = ep.link->ready();
    for (const RemoteCompletion& c : done_) {
      size_t i = 0;
      while (i < ep.inflight.size() && ep.inflight[i].seq != c.seq) ++i;
      if (i == ep.inflight.size()) continue;  // not ours (the link reports each task once)
      const Outcome o =
          c.outcome <= static_cast<uint8_t>(Outcome::STOPPED) ? static_cast<Outcome>(c.outcome) : Outcome::TASK_FAILURE;
      const Endpoint::InFlight f = ep.inflight[i];
      ep.inflight[i] = ep.inflight.back();
      ep.inflight.pop_back();
      if (!f.s) continue;  // timed out earlier: its credit comes back now, nothing else
      if (o == Outcome::SUCCESS) w_.record_round_trip(true, now_ns() - f.dispatch_ns);
      // The failure names the peer and, when it said, the worker inside it.
      w_.complete_member(ep, f.s, o, c.worker.empty() ? c.message : fmt::format("{}: {}", c.worker, c.message));
    }
  }

  // A remote task cannot be killed from here: past its timeout it fails now,
  // but its entry stays (slot-less) and keeps its credit until the peer
  // answers or the session ends; the link drops its outputs.
  void check(Endpoint& ep, uint64_t now) override {
    ep.alive = ep.link->ready();
    for (auto& f : ep.inflight)
      if (f.s && f.timeout_ns && now - f.dispatch_ns > f.timeout_ns) {
        TaskNode* s = f.s;
        f.s = nullptr;
        ep.link->abandon(f.seq);
        w_.complete_member(
            ep, s, Outcome::TASK_FAILURE,
            fmt::format("timed out: task {} ran longer than {} ms on {}", s->id, f.timeout_ns / 1'000'000, ep.label()));
      }
  }

  std::string down_reason(const Endpoint& ep) const override { return ep.link->state_text(); }

 private:
  Scheduler& w_;
  const RemoteBuffers& buffers_;
  std::vector<RemoteCompletion> done_;  // collect's scratch (drive-token holder only)
};

std::unique_ptr<EndpointTransport> make_mailbox_transport(Scheduler& s) {
  return std::make_unique<MailboxTransport>(s);
}
std::unique_ptr<EndpointTransport> make_remote_transport(Scheduler& s, const RemoteBuffers& buffers) {
  return std::make_unique<RemoteTransport>(s, buffers);
}

}  // namespace pto
