// The runner side of a runner channel (runner_channel.h, docs/worker.md
// "Runners"): a process forked from the engine's for one LOAD, or for JOBs
// of one library, symbol and reuse key — after a job's DONE it waits for the
// engine's next JOB (a warm runner) until the engine kills it. It loads the
// library, and for a JOB calls its orchestration with an Orchestrator whose
// every call is carried to the engine over the channel.
// It never touches the engine's own objects (their threads do not exist
// here) and leaves with _exit, whatever the library does: exit() from user
// code ends here too, without running the parent image's exit handlers.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include "futex.h"
#include "orchestrator_backend.h"
#include "output_capture.h"
#include "runner_channel.h"

namespace pto {

namespace {
// The current job's log ("" = none): the heartbeat keeps it under its cap.
// A warm runner serves one job after another, so it changes between jobs:
// the streams and this path change together under the lock, which the
// heartbeat holds while it checks the cap (so a cap reached by one job's log
// never silences the next job's streams).
std::mutex g_runner_log_mu;
std::string g_runner_log;

// Points stdout and stderr at `path`, or, when it is "" or cannot be opened,
// back at the streams the runner was forked with.
void switch_runner_log(const std::string& path, int saved_out, int saved_err) {
  std::lock_guard<std::mutex> g(g_runner_log_mu);
  if (!path.empty() && redirect_streams_to(path)) {
    g_runner_log = path;
    return;
  }
  g_runner_log.clear();
  std::fflush(nullptr);
  if (saved_out >= 0) (void)::dup2(saved_out, 1);
  if (saved_err >= 0) (void)::dup2(saved_err, 2);
}

void cap_runner_log() {
  std::lock_guard<std::mutex> g(g_runner_log_mu);
  if (!g_runner_log.empty()) enforce_log_cap(g_runner_log);
}
}  // namespace
namespace {

// Waits until the engine wrote one of the states in `want`; the runner ends
// itself if the engine's process went away.
uint32_t wait_for(RunnerChannel* ch, pid_t parent, uint64_t spin_ns, uint32_t want_a, uint32_t want_b) {
  const uint64_t t0 = now_ns();
  uint32_t spins = 0;
  for (;;) {
    uint32_t s = ch->state.load(std::memory_order_acquire);
    if (s == want_a || s == want_b) return s;
    if (now_ns() - t0 < spin_ns) {
      for (int i = 0; i < 16; ++i) spin_step(spins);
      continue;
    }
    ch->runner_parked.store(1, std::memory_order_seq_cst);
    s = ch->state.load(std::memory_order_seq_cst);
    if (s != want_a && s != want_b) futex_wait_shared(&ch->state, s, 100'000'000);
    ch->runner_parked.store(0, std::memory_order_relaxed);
    if (getppid() != parent) _exit(3);
  }
}

void send(RunnerChannel* ch, uint32_t state, const std::vector<uint8_t>& payload) {
  std::memcpy(ch->payload, payload.data(), payload.size());
  ch->bytes = static_cast<uint32_t>(payload.size());
  ch->state.store(state, std::memory_order_seq_cst);
  if (ch->engine_parked.load(std::memory_order_seq_cst)) futex_wake_shared(&ch->state);
}

// The Orchestrator of a job, as seen from the runner.
class RunnerSide final : public OrchestratorBackend {
 public:
  RunnerSide(RunnerChannel* ch, pid_t parent, uint64_t spin_ns, const RunnerJob& job)
      : ch_(ch), parent_(parent), spin_ns_(spin_ns), job_(job) {}

  SubmitResult submit(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members, const CallConfig& cfg,
                      const std::vector<int>& pinned, bool group) override {
    RunnerCall c;
    c.op = RO_SUBMIT;
    c.next_level = next_level;
    c.group = group;
    c.handle = h;
    c.config = cfg;
    c.pinned = pinned;
    c.members = std::move(members);
    SubmitResult r;
    if (Status s = call(c); !s.ok()) {
      r.status = s;
      return r;
    }
    if (Status s = decode_submit_reply(reply_.data(), reply_.size(), &r); !s.ok()) r.status = s;
    return r;
  }
  Result<ContinuousTensor> alloc(const std::vector<uint32_t>& shape, int32_t dtype) override {
    RunnerCall c;
    c.op = RO_ALLOC;
    c.shape = shape;
    c.dtype = dtype;
    Result<ContinuousTensor> r;
    if (Status s = call(c); !s.ok()) {
      r.status = s;
      return r;
    }
    if (Status s = decode_alloc_reply(reply_.data(), reply_.size(), &r); !s.ok()) r.status = s;
    return r;
  }
  void scope_begin() override { (void)simple(RO_SCOPE_BEGIN); }
  Status scope_end() override { return simple(RO_SCOPE_END); }
  int scope_depth() const override { return depth_; }
  CallableHandle find_callable(const std::string& name) const override {
    RunnerCall c;
    c.op = RO_FIND_CALLABLE;
    c.text = name;
    CallableHandle h;
    if (Status s = const_cast<RunnerSide*>(this)->call(c); !s.ok()) {
      h.status = s;
      return h;
    }
    if (Status s = decode_handle_reply(reply_.data(), reply_.size(), &h); !s.ok()) h.status = s;
    return h;
  }
  bool cancelled() const override {
    int64_t v = 0;
    (void)const_cast<RunnerSide*>(this)->simple(RO_CANCELLED, &v);
    return v != 0;
  }
  void fail(const std::string& message) override {
    RunnerCall c;
    c.op = RO_FAIL;
    c.text = clip_message(message);
    (void)call(c);
  }
  int level() const override { return job_.level; }
  int num_next_level() const override { return job_.num_next_level; }
  int num_sub_workers() const override { return job_.num_sub_workers; }

 private:
  // One call: the request goes out, the reply comes back into reply_.
  Status call(const RunnerCall& c) {
    const std::vector<uint8_t> p = encode_call(c);
    if (p.size() > kRunnerPayloadBytes)
      return Status::Error(kWorkerInvalidArgument,
                           fmt::format("the call's {} bytes of arguments exceed the runner channel ({} bytes)",
                                       p.size(), kRunnerPayloadBytes));
    send(ch_, RC_CALL, p);
    (void)wait_for(ch_, parent_, spin_ns_, RC_REPLY, RC_REPLY);
    const size_t n = std::min<size_t>(ch_->bytes, kRunnerPayloadBytes);
    reply_.assign(ch_->payload, ch_->payload + n);
    return Status::Ok();
  }
  Status simple(RunnerOp op, int64_t* value = nullptr) {
    RunnerCall c;
    c.op = op;
    if (Status s = call(c); !s.ok()) return s;
    Status st;
    int64_t v = 0;
    if (Status s = decode_status_reply(reply_.data(), reply_.size(), &st, &v); !s.ok()) return s;
    if (op == RO_SCOPE_BEGIN || op == RO_SCOPE_END) depth_ = static_cast<int>(v);
    if (value) *value = v;
    return st;
  }

  RunnerChannel* ch_;
  pid_t parent_;
  uint64_t spin_ns_;
  const RunnerJob& job_;
  std::vector<uint8_t> reply_;
  int depth_ = 0;
};

// dlopen + dlsym; the channel's `loaded` flag tells the engine the library's
// constructors have returned.
void* load(RunnerChannel* ch, const std::string& path, const std::string& symbol, std::string* error) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe): per-thread state
    *error = fmt::format("cannot load '{}': {}", path, why ? why : "?");
    return nullptr;
  }
  void* sym = dlsym(lib, symbol.c_str());
  if (!sym) {
    *error = fmt::format("'{}' does not export '{}'", path, symbol);
    return nullptr;
  }
  ch->loaded.store(1, std::memory_order_release);
  return sym;
}

}  // namespace

namespace {

// This process's threads (/proc/self/stat, field 20), or -1.
int own_threads() {
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p) return -1;
  // After ") ": state (field 3) ... num_threads (field 20).
  for (int field = 2; field < 20 && p; ++field) p = std::strchr(p + 1, ' ');
  if (!p) return -1;
  char* end = nullptr;
  const long threads = std::strtol(p + 1, &end, 10);
  return end != p + 1 && threads >= 0 && threads <= INT_MAX ? static_cast<int>(threads) : -1;
}

// Whether a process the library forked still lives (a child that exited is
// reaped here): such a runner serves no other job either.
bool has_children() {
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(-1, &status, WNOHANG);
    if (r > 0) continue;  // one that ended: reaped, look again
    return r == 0;        // 0: some still run; -1 (ECHILD): none
  }
}

// One JOB from the channel: its streams go to the job's log (the library's
// constructors included, the first time it loads), the orchestration runs,
// DONE goes back. `saved_out` / `saved_err` are the streams the runner was
// forked with, for a job without a log after one with a log.
void serve_job(RunnerChannel* ch, pid_t parent, uint64_t spin_ns, int saved_out, int saved_err, int threads_at_start) {
  const size_t n = std::min<size_t>(ch->bytes, kRunnerPayloadBytes);
  RunnerJob job;
  ch->reusable.store(0, std::memory_order_relaxed);
  if (Status st = decode_job(ch->payload, n, &job); !st.ok()) {
    send(ch, RC_DONE, encode_outcome(-1, st.message));
    return;
  }
  switch_runner_log(job.log_file, saved_out, saved_err);
  std::string error;
  auto entry = reinterpret_cast<OrchestrationEntryFn>(load(ch, job.path, job.symbol, &error));
  if (!entry) {
    send(ch, RC_DONE, encode_outcome(-1, error));
    return;
  }
  RunnerSide side(ch, parent, spin_ns, job);
  Orchestrator orch = OrchestratorAccess::make(&side);
  const TaskArgsView view = job.args.view();
  int64_t rc = 0;
  std::string message;
  try {
    rc = entry(&orch, &view, &job.config);
  } catch (const std::exception& e) {
    rc = -1;
    message = fmt::format("the orchestration threw: {}", e.what());
  } catch (...) {
    rc = -1;
    message = "the orchestration threw a non-std exception";
  }
  // _exit skips stdio's buffers: what the orchestration printed is written
  // (to its job's log) before the job is reported done.
  std::fflush(nullptr);
  // A thread the library started and left running could make Orchestrator
  // calls during the next job, as could a process it forked (which maps the
  // channel too): such a runner serves no other job.
  const bool clean = threads_at_start > 0 && own_threads() == threads_at_start && !has_children();
  ch->reusable.store(clean ? 1 : 0, std::memory_order_relaxed);
  send(ch, RC_DONE, encode_outcome(rc, message));
}

}  // namespace

void runner_main(RunnerChannel* ch, pid_t parent, uint32_t spin_us) {
  // A process group of its own (the engine sets it too, whichever runs
  // first): what the library forks is in it, and ends with the runner (the
  // engine kills the group). The reaper of what it forks, also of a
  // grandchild whose parent left (has_children sees it). In a group of its
  // own it is in the background of a terminal: a library that touches the
  // terminal gets an error, instead of a stop the liveness check kills.
  setpgid(0, 0);
  (void)prctl(PR_SET_CHILD_SUBREAPER, 1);
  // exit() from the library's code ends the runner at once: the parent
  // image's exit handlers and static destructors must not run here.
  on_exit([](int status, void*) { _exit(status); }, nullptr);
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGTTIN, SIG_IGN);
  signal(SIGTTOU, SIG_IGN);
  // The library's faults end this process with their own signal: a crash
  // handler inherited from the parent (a test framework's, a daemon's) must
  // not report, or survive, them here; nor may what the parent ignores (ptod
  // ignores SIGXFSZ, gRPC SIGPIPE) change what a write past a file-size
  // limit or into a closed pipe does to it.
  for (int sig : {SIGPIPE, SIGXFSZ, SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS}) signal(sig, SIG_DFL);
  if (close_range(3, ~0u, 0) != 0)
    for (int fd = 3; fd < 4096; ++fd) ::close(fd);
  const int saved_out = ::fcntl(1, F_DUPFD_CLOEXEC, 3), saved_err = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
  // The heartbeat, and the parent's end noticed within 100 ms (this process
  // was forked from a thread that may end before it: no parent-death signal).
  std::thread([ch, parent] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ch->heartbeat.fetch_add(1, std::memory_order_relaxed);
      cap_runner_log();
      if (getppid() != parent) _exit(3);
    }
  }).detach();
  const uint64_t spin_ns = uint64_t(spin_us) * 1000;
  const uint32_t s = wait_for(ch, parent, spin_ns, RC_LOAD, RC_JOB);
  if (s == RC_LOAD) {
    const size_t n = std::min<size_t>(ch->bytes, kRunnerPayloadBytes);
    std::string path, symbol, error;
    Status st = decode_load(ch->payload, n, &path, &symbol);
    if (st.ok() && !load(ch, path, symbol, &error)) st = Status::Error(kWorkerInvalidArgument, error);
    send(ch, RC_LOADED, encode_outcome(st.code, st.message));
    _exit(0);
  }
  // Jobs until the engine kills this runner: it sends another JOB of the
  // same library and reuse key to a runner it keeps warm.
  const int threads_at_start = own_threads();
  for (;;) {
    serve_job(ch, parent, spin_ns, saved_out, saved_err, threads_at_start);
    (void)wait_for(ch, parent, spin_ns, RC_JOB, RC_JOB);
  }
}

}  // namespace pto
