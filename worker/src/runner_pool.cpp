// The engine side of runners (pto/runner.h, runner_channel.h): fork a runner
// for one LOAD or take a warm one for a JOB, then serve it from the run's
// thread until it answers, dies, stops beating, or the run is cancelled. A
// runner whose job ended cleanly waits, warm, for the next job with the same
// library, symbol and reuse key; a thread of the pool kills those idle too
// long, dead or silent.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "engine_fork.h"
#include "futex.h"
#include "pto/runner.h"
#include "runner_channel.h"
#include "shared_memory.h"

namespace pto {
namespace {

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = sigdescr_np(WTERMSIG(status));
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), name ? name : "unknown");
  }
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  return "ended";
}

// One runner process and its channel, for one request. The destructor makes
// sure the process is gone and reaped.
class Runner {
 public:
  Runner(const RunnerConfig& cfg, std::atomic<uint64_t>& started, std::atomic<uint64_t>& failed)
      : cfg_(cfg), failed_(failed) {
    if (Status s = map_.map(sizeof(RunnerChannel), "a runner channel", /*confined=*/true); !s.ok()) {
      error_ = s;
      return;
    }
    ch_ = reinterpret_cast<RunnerChannel*>(map_.data());
    const pid_t parent = getpid();
    const pid_t pid = engine_fork(ch_);
    if (pid < 0) {
      error_ = Status::Error(kWorkerChildFailed, fmt::format("fork of a runner: {}", errno_text(errno)));
      return;
    }
    if (pid == 0) runner_main(ch_, parent, cfg_.spin_us);
    setpgid(pid, pid);  // as the runner does: its group exists before stop() may kill it
    pid_ = pid;
    ++started;
    beat_ = ch_->heartbeat.load(std::memory_order_relaxed);
    born_ns_ = beat_ns_ = start_ns_ = now_ns();
  }
  ~Runner() { stop(); }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  const Status& error() const { return error_; }
  RunnerChannel* channel() { return ch_; }
  pid_t pid() const { return pid_; }

  // A message that does not fit the channel is not sent (false); callers
  // bound what they send, this is the last line before a memcpy past it.
  [[nodiscard]] bool send(uint32_t state, const std::vector<uint8_t>& payload) {
    if (payload.size() > kRunnerPayloadBytes) return false;
    std::memcpy(ch_->payload, payload.data(), payload.size());
    ch_->bytes = static_cast<uint32_t>(payload.size());
    ch_->state.store(state, std::memory_order_seq_cst);
    if (ch_->runner_parked.load(std::memory_order_seq_cst)) futex_wake_shared(&ch_->state);
    return true;
  }

  // Waits for the runner's next message (CALL, DONE or LOADED). Returns that
  // state; 0 with *why set when the runner is gone, stopped beating, did not
  // load in time, or `stop_now()` said so (its reason in *why).
  template <class StopNow>
  uint32_t next(std::string* why, StopNow&& stop_now) {
    const uint64_t spin_ns = uint64_t(cfg_.spin_us) * 1000;
    const uint64_t load_ns = uint64_t(cfg_.load_timeout_ms) * 1'000'000;
    const uint64_t t0 = now_ns();
    uint32_t spins = 0;
    uint64_t last_check = 0;
    for (;;) {
      const uint32_t s = ch_->state.load(std::memory_order_acquire);
      if (s == RC_CALL || s == RC_DONE || s == RC_LOADED) return s;
      const uint64_t now = now_ns();
      if (now - t0 < spin_ns) {
        for (int i = 0; i < 16; ++i) spin_step(spins);
        continue;
      }
      if (now - last_check >= 1'000'000) {  // every millisecond: is it still worth waiting?
        last_check = now;
        std::string w = check(now, load_ns);
        if (w.empty()) w = stop_now();
        if (!w.empty()) {
          *why = w;
          stop();
          return 0;
        }
      }
      ch_->engine_parked.store(1, std::memory_order_seq_cst);
      const uint32_t again = ch_->state.load(std::memory_order_seq_cst);
      if (again != RC_CALL && again != RC_DONE && again != RC_LOADED) futex_wait_shared(&ch_->state, again, 1'000'000);
      ch_->engine_parked.store(0, std::memory_order_relaxed);
    }
  }

  // Kills the runner (if alive) and every process in its group - what the
  // library forked - and reaps the runner. The group is killed before the
  // runner is reaped: until then its pid, the group's id, cannot be reused.
  void stop() {
    if (pid_ <= 0) return;
    int status = 0;
    // Only while the runner is still this process's child to reap (alive or
    // a zombie): one reaped elsewhere (SIGCHLD ignored) may have a reused pid.
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0) kill(-pid_, SIGKILL);
    if (waitpid(pid_, &status, WNOHANG) != pid_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  void count_failure() { ++failed_; }

  // After its DONE: may it serve another job? Not if the job left a thread
  // running in it, nor once it is max_age_s old.
  bool keepable() const {
    return ch_->reusable.load(std::memory_order_relaxed) == 1 &&
           now_ns() - born_ns_ < uint64_t(cfg_.max_age_s) * 1'000'000'000;
  }

  // Before a warm runner's next job: its silence while idle counts from now.
  void rearm() {
    beat_ = ch_->heartbeat.load(std::memory_order_relaxed);
    beat_ns_ = start_ns_ = now_ns();
  }

  // A reason to give up on the runner, or "" (it is alive and beating).
  std::string check(uint64_t now, uint64_t load_ns) {
    // Dead: its group (what the library forked) is killed while the runner
    // is still a zombie - its pid, the group's id, not yet free - then reaped.
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
      kill(-pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return describe_status(status);
    }
    if (load_ns && !ch_->loaded.load(std::memory_order_acquire) && now - start_ns_ > load_ns)
      return fmt::format("did not finish loading within {} ms (load_timeout_ms) and was killed", cfg_.load_timeout_ms);
    const uint64_t beat = ch_->heartbeat.load(std::memory_order_relaxed);
    if (beat != beat_) {
      beat_ = beat;
      beat_ns_ = now;
      return "";
    }
    // Beats come from the runner's first moment (a thread of its own), also
    // while the library loads: a runner stopped then is found here, a
    // constructor that never returns by the load timeout above.
    if (cfg_.liveness_timeout_ms && now - beat_ns_ > uint64_t(cfg_.liveness_timeout_ms) * 1'000'000)
      return fmt::format("stopped making progress: no heartbeat for {} ms (stopped, or frozen) and was killed",
                         (now - beat_ns_) / 1'000'000);
    return "";
  }

 private:
  const RunnerConfig& cfg_;
  std::atomic<uint64_t>& failed_;
  SharedMapping map_;
  RunnerChannel* ch_ = nullptr;
  pid_t pid_ = -1;
  Status error_;
  uint64_t beat_ = 0, beat_ns_ = 0, start_ns_ = 0, born_ns_ = 0;
};

}  // namespace

// Warm runners, by key (library, symbol, reuse key), and the thread that
// kills those idle longer than idle_ms, dead, or no longer beating.
class RunnerPool::Warm {
 public:
  explicit Warm(const RunnerConfig& cfg) : cfg_(cfg) {}
  ~Warm() {
    std::vector<Idle> gone;
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
      gone.swap(idle_);
    }
    cv_.notify_all();
    if (reaper_.joinable()) reaper_.join();
  }  // `gone` kills and reaps them

  // A warm runner for `key`, or null.
  std::unique_ptr<Runner> take(const std::string& key) {
    for (;;) {
      std::unique_ptr<Runner> r;
      {
        std::lock_guard<std::mutex> g(mu_);
        auto it = std::find_if(idle_.rbegin(), idle_.rend(), [&](const Idle& i) { return i.key == key; });
        if (it == idle_.rend()) return nullptr;
        r = std::move(it->runner);
        idle_.erase(std::next(it).base());
      }
      if (r->check(now_ns(), 0).empty()) {
        r->rearm();
        return r;
      }
    }  // a dead or silent one is killed and reaped here; try the next
  }

  // Keeps `r`, whose job ended cleanly, for the next job of `key`.
  void give_back(const std::string& key, std::unique_ptr<Runner> r) {
    std::unique_ptr<Runner> evicted;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) return;
      if (idle_.size() >= std::max<uint32_t>(cfg_.max_idle, 1)) {
        evicted = std::move(idle_.front().runner);
        idle_.erase(idle_.begin());
      }
      if (!reaper_.joinable()) {
        try {
          reaper_ = std::thread([this] { reap(); });
        } catch (const std::system_error&) {
          return;  // no thread to bound its idle time: `r` is not kept (killed here)
        }
      }
      idle_.push_back({key, std::move(r), now_ns()});
    }
  }

  size_t idle() const {
    std::lock_guard<std::mutex> g(mu_);
    return idle_.size();
  }

 private:
  struct Idle {
    std::string key;
    std::unique_ptr<Runner> runner;
    uint64_t since_ns;
  };

  // Every 100 ms: kills (outside the lock) the runners idle too long, and
  // reaps those that died or stopped beating while idle.
  void reap() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::milliseconds(100));
      std::vector<std::unique_ptr<Runner>> gone;
      const uint64_t now = now_ns(), idle_ns = uint64_t(cfg_.idle_ms) * 1'000'000;
      for (auto it = idle_.begin(); it != idle_.end();) {
        if (now - it->since_ns > idle_ns || !it->runner->check(now, 0).empty()) {
          gone.push_back(std::move(it->runner));
          it = idle_.erase(it);
        } else {
          ++it;
        }
      }
      lk.unlock();
      gone.clear();
      lk.lock();
    }
  }

  const RunnerConfig& cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Idle> idle_;  // oldest first
  bool stop_ = false;
  std::thread reaper_;
};

namespace {

// Serves one call of the orchestration; false (with *why) when the call is
// malformed or the runner is to be killed.
bool serve(Runner& r, Orchestrator& o, std::string* why) {
  RunnerChannel* ch = r.channel();
  RunnerCall c;
  if (Status s = decode_call(ch->payload, std::min<size_t>(ch->bytes, kRunnerPayloadBytes), &c); !s.ok()) {
    *why = "sent a malformed call (" + s.message + ") and was killed";
    return false;
  }
  std::vector<uint8_t> reply;
  switch (c.op) {
    case RO_SUBMIT: {
      SubmitResult res;
      if (c.next_level)
        res = c.group ? o.submit_next_level_group(c.handle, c.members, c.config, c.pinned)
                      : o.submit_next_level(c.handle, c.members[0], c.config, c.pinned.empty() ? -1 : c.pinned[0]);
      else
        res = c.group ? o.submit_sub_group(c.handle, c.members, c.config) : o.submit_sub(c.handle, c.members[0], c.config);
      reply = encode_submit_reply(res);
      break;
    }
    case RO_ALLOC: reply = encode_alloc_reply(o.alloc(c.shape, c.dtype)); break;
    case RO_SCOPE_BEGIN:
      if (o.scope_depth() >= Orchestrator::kMaxScopeDepth) {
        // The run failed at the bound (TaskGraph::scope_begin); a library
        // that keeps opening scopes is in a loop that only a kill ends.
        o.scope_begin();
        *why = fmt::format("opened more than {} nested scopes and was killed", Orchestrator::kMaxScopeDepth);
        return false;
      }
      o.scope_begin();
      reply = encode_status_reply(Status::Ok(), o.scope_depth());
      break;
    case RO_SCOPE_END: {
      const Status s = o.scope_end();
      reply = encode_status_reply(s, o.scope_depth());
      break;
    }
    case RO_FIND_CALLABLE: reply = encode_handle_reply(o.find_callable(c.text)); break;
    case RO_FAIL:
      o.fail(c.text);
      reply = encode_status_reply(Status::Ok());
      break;
    case RO_CANCELLED: reply = encode_status_reply(Status::Ok(), o.cancelled() ? 1 : 0); break;
    default: *why = fmt::format("sent call {}, which is no call, and was killed", uint32_t(c.op)); return false;
  }
  if (!r.send(RC_REPLY, reply)) {
    *why = fmt::format("was sent a reply of {} bytes, more than its channel holds, and was killed", reply.size());
    return false;
  }
  return true;
}

}  // namespace

RunnerPool::RunnerPool(RunnerConfig cfg) : cfg_(cfg), warm_(std::make_unique<Warm>(cfg_)) {}
RunnerPool::~RunnerPool() = default;

RunnerPool::Stats RunnerPool::stats() const { return {started_.load(), failed_.load(), reused_.load(), warm_->idle()}; }

Status RunnerPool::check_library(const std::string& path, const std::string& symbol) const {
  if (Status s = check_load(path, symbol); !s.ok()) return s;
  Runner r(cfg_, started_, failed_);
  if (!r.error().ok()) return r.error();
  if (!r.send(RC_LOAD, encode_load(path, symbol)))
    return Status::Error(kWorkerInvalidArgument, "the load request exceeds the runner channel");
  std::string why;
  const uint32_t s = r.next(&why, [] { return std::string(); });
  if (s != RC_LOADED) {
    r.count_failure();
    return Status::Error(kWorkerChildFailed, fmt::format("loading '{}' in a runner: the runner {}", path, why));
  }
  int64_t code = 0;
  std::string message;
  if (Status st = decode_outcome(r.channel()->payload, std::min<size_t>(r.channel()->bytes, kRunnerPayloadBytes),
                                 &code, &message);
      !st.ok())
    return st;
  return code == 0 ? Status::Ok() : Status::Error(static_cast<int32_t>(code), message);
}

OrchestrationFunction RunnerPool::orchestration(const std::string& path, const std::string& symbol,
                                                const std::string& name, const std::string& log_file,
                                                const std::string& reuse_key) const {
  // '\0' cannot occur in a path or a symbol: the reuse key, last, may hold any byte.
  std::string key = path + '\0' + symbol + '\0' + reuse_key;
  return [this, path, symbol, name, log_file, key](Orchestrator& o, const TaskArgsView& view,
                                                   const CallConfig& cfg) -> int {
    std::unique_ptr<Runner> warm = cfg_.idle_ms ? warm_->take(key) : nullptr;
    if (warm) ++reused_;
    std::unique_ptr<Runner> fresh = warm ? nullptr : std::make_unique<Runner>(cfg_, started_, failed_);
    Runner& r = warm ? *warm : *fresh;
    if (!r.error().ok()) {
      o.fail(fmt::format("orchestration {}: {}", name, r.error().message));
      return 1;
    }
    RunnerJob job;
    job.path = path;
    job.symbol = symbol;
    job.name = name;
    job.level = o.level();
    job.num_next_level = o.num_next_level();
    job.num_sub_workers = o.num_sub_workers();
    job.log_file = log_file;
    job.config = cfg;
    job.args = TaskArgs::from_view(view);
    const std::vector<uint8_t> payload = encode_job(job);
    if (payload.size() > kRunnerPayloadBytes) {
      o.fail(fmt::format("orchestration {}: its arguments ({} bytes) exceed the runner channel", name, payload.size()));
      if (warm) warm_->give_back(key, std::move(warm));  // it was sent nothing: still sound
      return 1;
    }
    const pid_t pid = r.pid();
    (void)r.send(RC_JOB, payload);  // it fits: checked above
    auto cancelled = [&o]() { return o.cancelled() ? std::string("was stopped: the run was cancelled") : std::string(); };
    for (;;) {
      std::string why;
      const uint32_t s = r.next(&why, cancelled);
      if (s == RC_CALL) {
        if (serve(r, o, &why)) continue;
        r.stop();
      }
      if (s == RC_DONE) {
        int64_t rc = 0;
        std::string message;
        if (Status st = decode_outcome(r.channel()->payload,
                                       std::min<size_t>(r.channel()->bytes, kRunnerPayloadBytes), &rc, &message);
            !st.ok()) {
          r.count_failure();
          o.fail(fmt::format("orchestration {} (runner pid {}): {}", name, pid, st.message));
          return 1;
        }
        if (rc != 0 && !message.empty()) o.fail(fmt::format("orchestration {}: {}", name, message));
        // It answered: alive, its library loaded, waiting for another JOB.
        if (cfg_.idle_ms && r.keepable()) warm_->give_back(key, warm ? std::move(warm) : std::move(fresh));
        return static_cast<int>(rc);
      }
      if (o.cancelled()) return 0;  // the run's verdict is its cancellation
      r.count_failure();
      o.fail(fmt::format("orchestration {} (runner pid {}) {}", name, pid, why));
      return 1;
    }
  };
}

}  // namespace pto
