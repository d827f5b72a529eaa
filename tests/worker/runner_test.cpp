// Orchestration libraries in runner processes (pto/runner.h): the library's
// calls cross the runner channel with their usual meaning; whatever the
// library does — crash, exit, abort, hang, stop — ends its runner and fails
// its run with a message that names it, and the next run works. A runner
// whose job ended is kept warm for the next job of the same library, symbol
// and principal, and killed when idle too long.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>

#include "pto/base/clock.h"
#include "pto/runner.h"
#include "sanitized.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

// A sanitizer intercepts mmap itself (TSan resets the shadow of what is
// mapped): under one, the wrapper below and the test that needs it are left out.

#ifndef PTO_SANITIZED
// While set, a mapping of a runner channel's size (1 MiB, shared, anonymous)
// returns some time after it is made - the first 50 ms, later ones 300 ms:
// the window between a channel's mapping and its listing as confined, in
// which another thread's fork (after its own, shorter, window) inherited it.
// This executable's mmap is the one the engine (linked in) calls.
static std::atomic<bool> g_slow_channel_maps{false};
static std::atomic<int> g_slowed{0};
extern "C" void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
  const long p = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  if (p == -1) return MAP_FAILED;
  if (g_slow_channel_maps.load() && len == (1u << 20) && (flags & MAP_SHARED) && (flags & MAP_ANONYMOUS))
    std::this_thread::sleep_for(std::chrono::milliseconds(g_slowed++ == 0 ? 50 : 300));
  return reinterpret_cast<void*>(p);
}
#endif

namespace {

struct Fixture {
  explicit Fixture(RunnerConfig rc = {}) : w({.level = 3, .num_sub_workers = 2}), pool(rc) {
    auto noop = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_noop"));
    auto add = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
    auto say = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_say"));
    REQUIRE(w.init().ok());
    REQUIRE(w.name_callable("noop", noop).ok());
    REQUIRE(w.name_callable("add_one", add).ok());
    REQUIRE(w.name_callable("say", say).ok());
    x = alloc_f32(w, 4);
    f32(x)[0] = 10.f;
  }
  RunResult run(const char* symbol, RunOptions o = {}, const std::string& principal = "") {
    TaskArgs a;
    a.add_tensor(x, INOUT).add_scalar(100);
    RunResult r = w.run_function(pool.orchestration(RUNNER_ORCHS, symbol, symbol, "", principal), a, {}, o);
    // Shown with the next assertion, so a REQUIRE(run(...).ok()) that fails says why.
    if (!r.ok()) UNSCOPED_INFO("run of " << symbol << " failed: " << r.status.message);
    return r;
  }
  Worker w;
  RunnerPool pool;
  ContinuousTensor x;
};

// Processes whose parent is this test and that are not the Worker's children: runners.
std::set<int> runner_pids(Worker& w) {
  std::set<int> known;
  for (const ChildInfo& c : w.children()) known.insert(c.pid);
  std::set<int> out;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || known.count(pid)) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(f, line);
    const auto p = line.rfind(')');
    if (p == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(line.c_str() + p + 2, "%c %d", &state, &ppid) == 2 && ppid == getpid() && state != 'Z')
      out.insert(pid);
  }
  closedir(d);
  return out;
}

}  // namespace

TEST_CASE("an orchestration in a runner submits, allocates and scopes as in-process - the result is exact") {
  Fixture f;
  RunResult r = f.run("pto_test_orch_subs");
  INFO(r.status.message);
  REQUIRE(r.ok());
  CHECK(r.tasks_submitted == 102);  // 100 no-ops, the scoped buffer's task, x += 1
  CHECK(r.tasks_succeeded == 102);
  CHECK(f32(f.x)[0] == 11.f);
  CHECK(f.pool.stats().started == 1);
  CHECK(f.pool.stats().failed == 0);
  // The runner stays warm for the next job of the same library and symbol:
  // that job forks nothing and computes the same.
  CHECK(f.pool.stats().idle == 1);
  CHECK(runner_pids(f.w).size() == 1);
  RunResult again = f.run("pto_test_orch_subs");
  REQUIRE(again.ok());
  CHECK(again.tasks_succeeded == 102);
  CHECK(f32(f.x)[0] == 12.f);
  CHECK(f.pool.stats().started == 1);
  CHECK(f.pool.stats().reused == 1);
}

TEST_CASE("warm runners: one per library, symbol and principal, gone after idle_ms, never after a failure") {
  RunnerConfig rc;
  rc.idle_ms = 2000;  // alice's first runner stays warm through the forks and runs below
  Fixture f(rc);
  REQUIRE(f.run("pto_test_orch_subs", {}, "alice").ok());
  REQUIRE(f.run("pto_test_orch_subs", {}, "alice").ok());
  CHECK(f.pool.stats().started == 1);
  CHECK(f.pool.stats().reused == 1);
  REQUIRE(f.run("pto_test_orch_subs", {}, "bob").ok());  // another principal: a runner of its own
  CHECK(f.pool.stats().started == 2);
  CHECK_FALSE(f.run("pto_test_orch_fail", {}, "alice").ok());  // another symbol: likewise
  CHECK(f.pool.stats().started == 3);
  CHECK(f.pool.stats().idle == 3);  // a failure the library reports leaves its runner sound
  // A crash: that runner is gone, not kept.
  CHECK_FALSE(f.run("pto_test_orch_segv", {}, "alice").ok());
  CHECK(f.pool.stats().idle == 3);
  CHECK(runner_pids(f.w).size() == 3);
  // Idle for idle_ms: killed and reaped (no zombie left).
  std::set<int> warm = runner_pids(f.w);
  CHECK(eventually([&] { return f.pool.stats().idle == 0; }, 10000));
  for (int pid : warm) CHECK(eventually([&] { return process_gone(pid); }, 10000));
  REQUIRE(f.run("pto_test_orch_subs", {}, "alice").ok());
  CHECK(f.pool.stats().started == 5);  // 3 kept, the crashed one, and this one
}

TEST_CASE("a warm runner writes each job's lines to that job's log only, and none after a job without a log") {
  Fixture f;
  char tmpl[] = "/tmp/runner-logs-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  auto say = [&](uint64_t tag, const std::string& log) {
    TaskArgs a;
    a.add_scalar(tag);
    return f.w.run_function(f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_say", "say", log), a, {}, {});
  };
  auto text = [](const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  REQUIRE(say(1, dir + "/a.log").ok());
  REQUIRE(say(2, dir + "/b.log").ok());
  REQUIRE(say(3, "").ok());  // back to the streams the runner was forked with
  REQUIRE(say(4, dir + "/d.log").ok());
  CHECK(f.pool.stats().started == 1);
  CHECK(f.pool.stats().reused == 3);
  const std::string a = text(dir + "/a.log"), b = text(dir + "/b.log"), d = text(dir + "/d.log");
  CHECK_THAT(a, Catch::Contains("orchestration 1 says hello") && Catch::Contains("orchestration 1 on stderr"));
  CHECK_THAT(b, Catch::Contains("orchestration 2 says hello") && !Catch::Contains("orchestration 1"));
  CHECK_THAT(d, Catch::Contains("orchestration 4 on stderr") && !Catch::Contains("orchestration 2"));
  for (const std::string* log : {&a, &b, &d}) CHECK_THAT(*log, !Catch::Contains("orchestration 3"));
  std::filesystem::remove_all(dir);
}

// Shared mappings of exactly one runner channel's size in process `pid`.
int channel_sized_mappings(int pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3 && hi - lo == (1u << 20) && perms[3] == 's') ++n;
  }
  return n;
}

TEST_CASE("a runner does not map another runner's channel: a later runner of another principal cannot reach it") {
  Fixture f;
  REQUIRE(f.run("pto_test_orch_subs", {}, "alice").ok());
  const std::set<int> first = runner_pids(f.w);
  REQUIRE(first.size() == 1);
  REQUIRE(f.run("pto_test_orch_subs", {}, "bob").ok());  // forked while alice's runner is warm
  std::set<int> both = runner_pids(f.w);
  REQUIRE(both.size() == 2);
  both.erase(*first.begin());
  const int alice = *first.begin(), bob = *both.begin();
  INFO("alice's runner " << alice << ", bob's " << bob);
  CHECK(channel_sized_mappings(bob) == channel_sized_mappings(alice));  // its own channel only, as alice's
}

#ifndef PTO_SANITIZED
TEST_CASE("runners started at once by two jobs each map only their own channel") {
  Fixture f;
  REQUIRE(f.run("pto_test_orch_subs", {}, "alone").ok());
  const std::set<int> lone = runner_pids(f.w);
  REQUIRE(lone.size() == 1);
  const int own_only = channel_sized_mappings(*lone.begin());
  // Two jobs of two principals: two fresh runners, their channels mapped at
  // once on two run threads, each fork in the other's window.
  g_slow_channel_maps = true;
  TaskArgs a;
  a.add_tensor(f.x, INOUT).add_scalar(1);
  RunHandle h1 = f.w.submit_function(f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_subs", "s", "", "one"), a, {});
  RunHandle h2 = f.w.submit_function(f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_subs", "s", "", "two"), a, {});
  REQUIRE(h1.wait(std::chrono::milliseconds(30000)));
  REQUIRE(h2.wait(std::chrono::milliseconds(30000)));
  g_slow_channel_maps = false;
  CHECK(h1.result().ok());
  CHECK(h2.result().ok());
  std::set<int> all = runner_pids(f.w);
  REQUIRE(all.size() == 3);  // kept warm
  for (int pid : all) {
    INFO("runner " << pid);
    CHECK(channel_sized_mappings(pid) == own_only);  // before: one had the other's channel too
  }
}
#endif

TEST_CASE("a job that leaves a thread of its own running: its runner serves no other job") {
  Fixture f;
  TaskArgs a;
  auto leaves = [&] {
    return f.w.run_function(f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_leaves_thread", "leaves"), a, {}, {});
  };
  REQUIRE(leaves().ok());
  CHECK(f.pool.stats().idle == 0);
  REQUIRE(leaves().ok());
  CHECK(f.pool.stats().started == 2);
  CHECK(f.pool.stats().reused == 0);
  CHECK(eventually([&] { return runner_pids(f.w).empty(); }));  // killed, not kept
}

TEST_CASE("a warm runner killed or stopped while idle is reaped, and the next job gets a fresh one") {
  RunnerConfig rc;
  rc.liveness_timeout_ms = 500;
  Fixture f(rc);
  REQUIRE(f.run("pto_test_orch_subs").ok());
  std::set<int> pids = runner_pids(f.w);
  REQUIRE(pids.size() == 1);
  REQUIRE(kill(*pids.begin(), SIGKILL) == 0);
  CHECK(eventually([&] { return process_gone(*pids.begin()); }, 3000));  // reaped while idle
  RunResult r = f.run("pto_test_orch_subs");
  INFO(r.status.message);
  CHECK(r.ok());
  CHECK(f.pool.stats().started == 2);
  // Stopped while idle: its heartbeat stops, the pool kills it.
  pids = runner_pids(f.w);
  REQUIRE(pids.size() == 1);
  REQUIRE(kill(*pids.begin(), SIGSTOP) == 0);
  CHECK(eventually([&] { return process_gone(*pids.begin()); }, 3000));
  CHECK(f.pool.stats().idle == 0);
  CHECK(f.run("pto_test_orch_subs").ok());
  CHECK(f.pool.stats().started == 3);
}

TEST_CASE("idle_ms = 0: a fresh runner for every job, gone when its job ends - max_idle bounds the warm ones") {
  SECTION("idle_ms = 0") {
    RunnerConfig rc;
    rc.idle_ms = 0;
    Fixture f(rc);
    REQUIRE(f.run("pto_test_orch_subs").ok());
    REQUIRE(f.run("pto_test_orch_subs").ok());
    CHECK(f.pool.stats().started == 2);
    CHECK(f.pool.stats().reused == 0);
    CHECK(f.pool.stats().idle == 0);
    CHECK(eventually([&] { return runner_pids(f.w).empty(); }));
  }
  SECTION("max_idle = 1") {
    RunnerConfig rc;
    rc.max_idle = 1;
    Fixture f(rc);
    REQUIRE(f.run("pto_test_orch_subs", {}, "alice").ok());
    REQUIRE(f.run("pto_test_orch_subs", {}, "bob").ok());
    CHECK(f.pool.stats().idle == 1);
    CHECK(eventually([&] { return runner_pids(f.w).size() == 1; }));
    REQUIRE(f.run("pto_test_orch_subs", {}, "bob").ok());
    CHECK(f.pool.stats().reused == 1);  // bob's was kept, alice's went
  }
}

TEST_CASE("a crash, exit() or abort() in the library fails its run naming the signal or status - the next run works") {
  RunnerConfig rc;
  rc.idle_ms = 0;  // no warm runner left at the end to tell apart
  Fixture f(rc);
  struct Case {
    const char* symbol;
    const char* says;
  };
  for (const Case c : {Case{"pto_test_orch_segv", "killed by signal 11"}, Case{"pto_test_orch_exit3", "exited with status 3"},
                       Case{"pto_test_orch_abort", "killed by signal 6"}}) {
    RunResult r = f.run(c.symbol);
    INFO(c.symbol << ": " << r.status.message);
    CHECK_FALSE(r.ok());
    CHECK(r.status.message.find(c.says) != std::string::npos);
    CHECK(r.status.message.find(c.symbol) != std::string::npos);  // the callable is named
    RunResult ok = f.run("pto_test_orch_subs");
    CHECK(ok.ok());
  }
  CHECK(f.pool.stats().failed == 3);
  CHECK(eventually([&] { return runner_pids(f.w).empty(); }));
}

TEST_CASE("the library's own failure message reaches the run") {
  Fixture f;
  RunResult r = f.run("pto_test_orch_fail");
  CHECK_FALSE(r.ok());
  CHECK(r.status.message.find("the fixture says no") != std::string::npos);
}

// ptod ignores SIGXFSZ (a file-size limit fails its writes instead of killing
// it) and gRPC ignores SIGPIPE: the processes that run user code must not
// inherit that: a library past a file-size limit dies of SIGXFSZ, as it
// would anywhere else, instead of losing its writes quietly.
TEST_CASE("user code runs with SIGXFSZ and SIGPIPE at their defaults though its parent ignores them") {
  struct Ignored {
    struct sigaction was[2] = {};
    Ignored() {
      struct sigaction ignore = {};
      ignore.sa_handler = SIG_IGN;
      sigaction(SIGXFSZ, &ignore, &was[0]);
      sigaction(SIGPIPE, &ignore, &was[1]);
    }
    ~Ignored() {  // as they were
      sigaction(SIGXFSZ, &was[0], nullptr);
      sigaction(SIGPIPE, &was[1], nullptr);
    }
  } ignored;
  Fixture f;  // its children forked after the signals were ignored
  auto check = f.w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_signal_default"));
  REQUIRE(check.ok());
  // SIGPIPE: the sub workers keep the parent's (their answers cross shared
  // memory; their stdout may be a socket the daemon's journal reads).
  for (int sig : {SIGXFSZ}) {
    RunResult r = f.w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
      return o.submit_sub(check, TaskArgs().add_scalar(uint64_t(sig))).ok() ? 0 : 1;
    });
    INFO("sub worker, signal " << sig << ": " << r.status.message);
    CHECK(r.ok());
  }
  for (int sig : {SIGXFSZ, SIGPIPE}) {
    TaskArgs a;
    a.add_scalar(uint64_t(sig));
    RunResult r = f.w.run_function(
        f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_signal_default", "signal_default", "", ""), a, {}, {});
    INFO("runner, signal " << sig << ": " << r.status.message);
    CHECK(r.ok());
  }
}

TEST_CASE("a hung orchestration ends with its run: cancel and deadline kill the runner at once") {
  Fixture f;
  SECTION("cancel") {
    TaskArgs a;
    RunHandle h = f.w.submit_function(f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_hang", "hang"), a, {}, nullptr,
                                      {});
    REQUIRE(eventually([&] { return runner_pids(f.w).size() == 1; }));
    const uint64_t t0 = now_ns();
    REQUIRE(h.cancel("stop it"));
    const RunResult& r = h.result();
    CHECK(r.status.code == kWorkerCancelled);
    CHECK(double(now_ns() - t0) / 1e6 < 1000);  // it would hang for ever
  }
  SECTION("deadline") {
    const uint64_t t0 = now_ns();
    RunResult r = f.run("pto_test_orch_hang", RunOptions{.deadline_ms = 300});
    CHECK(r.status.code == kWorkerCancelled);
    CHECK(double(now_ns() - t0) / 1e6 < 1000);
  }
  CHECK(eventually([&] { return runner_pids(f.w).empty(); }));
}

TEST_CASE("a stopped runner is noticed by its heartbeat and killed") {
  RunnerConfig rc;
  rc.liveness_timeout_ms = 500;
  Fixture f(rc);
  TaskArgs a;
  RunHandle h =
      f.w.submit_function(f.pool.orchestration(RUNNER_ORCHS, "pto_test_orch_hang", "hang"), a, {}, nullptr, {});
  std::set<int> pids;
  REQUIRE(eventually([&] { return (pids = runner_pids(f.w)).size() == 1; }));
  REQUIRE(kill(*pids.begin(), SIGSTOP) == 0);
  const RunResult& r = h.result();
  INFO(r.status.message);
  CHECK(r.status.message.find("no heartbeat") != std::string::npos);
  CHECK(eventually([&] { return process_gone(*pids.begin()); }));
}

TEST_CASE("a runner stopped while its library loads is noticed by its heartbeat, not at the load timeout") {
  RunnerConfig rc;
  rc.liveness_timeout_ms = 500;
  rc.load_timeout_ms = 20000;
  Fixture f(rc);
  TaskArgs a;
  // Its constructor never returns: the runner is loading until it is stopped.
  RunHandle h = f.w.submit_function(f.pool.orchestration(HANG_CTOR, "pto_test_never_reached", "hang_ctor"), a, {},
                                    nullptr, {});
  std::set<int> pids;
  REQUIRE(eventually([&] { return (pids = runner_pids(f.w)).size() == 1; }));
  const uint64_t t0 = now_ns();
  REQUIRE(kill(*pids.begin(), SIGSTOP) == 0);
  const RunResult& r = h.result();
  const double ms = double(now_ns() - t0) / 1e6;
  INFO(r.status.message << " after " << ms << " ms");
  CHECK(r.status.message.find("no heartbeat") != std::string::npos);
  CHECK(ms < 5000);
  CHECK(eventually([&] { return process_gone(*pids.begin()); }));
}

TEST_CASE("checking a library in a runner: constructors that crash or hang cost a runner, not this process") {
  RunnerConfig rc;
  rc.load_timeout_ms = 1500;  // the sound library's fork and load too, on a loaded host
  RunnerPool pool(rc);
  CHECK(pool.check_library(RUNNER_ORCHS, "pto_test_orch_subs").ok());
  Status missing = pool.check_library(RUNNER_ORCHS, "no_such_symbol");
  CHECK(missing.message.find("does not export 'no_such_symbol'") != std::string::npos);
  Status segv = pool.check_library(SEGV_CTOR, "pto_test_never_reached_segv");
  INFO(segv.message);
  CAPTURE(segv.message);
  CHECK(segv.message.find("killed by signal 11") != std::string::npos);
  const uint64_t t0 = now_ns();
  Status hang = pool.check_library(HANG_CTOR, "pto_test_never_reached");
  INFO(hang.message);
  CHECK(hang.message.find("did not finish loading within 1500 ms") != std::string::npos);
  CHECK(double(now_ns() - t0) / 1e6 < 6000);
  Status nofile = pool.check_library("/nonexistent/lib.so", "x");
  CHECK(nofile.message.find("cannot load '/nonexistent/lib.so'") != std::string::npos);
  CHECK(pool.stats().failed == 2);
}

TEST_CASE("a library path or symbol longer than a runner takes is refused, naming its bound - no runner starts") {
  RunnerPool pool;
  // 2 MiB: more than the whole channel (written past its mapping before).
  Status huge = pool.check_library(RUNNER_ORCHS, std::string(2u << 20, 's'));
  CHECK(huge.code == kWorkerInvalidArgument);
  CHECK(huge.message == "the symbol has 2097152 bytes; at most 1024");
  // Within the channel, past what the runner reads ("a malformed load request" before).
  Status long_symbol = pool.check_library(RUNNER_ORCHS, std::string(1500, 's'));
  CHECK(long_symbol.message == "the symbol has 1500 bytes; at most 1024");
  Status long_path = pool.check_library("/" + std::string(5000, 'p'), "x");
  CHECK(long_path.message == "the library path has 5001 bytes; at most 4096");
  CHECK(pool.stats().started == 0);
  CHECK(pool.check_library(RUNNER_ORCHS, "pto_test_orch_subs").ok());
}

TEST_CASE("an orchestration that opens scopes without end fails its run and its runner is killed") {
  Fixture f;
  RunResult r = f.run("pto_test_orch_scopes_forever");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status.message, Catch::Contains("more than 4096 nested scopes"));
  CHECK(f.pool.stats().failed == 1);
  CHECK(f.run("pto_test_orch_subs").ok());  // the next run works
}

TEST_CASE("a process the library forks ends with its runner - and such a runner serves no other job") {
  const std::string pid_file =
      (std::filesystem::temp_directory_path() / ("pto-forked-" + std::to_string(getpid()) + ".pid")).string();
  setenv("PTO_TEST_FORKED_PID_FILE", pid_file.c_str(), 1);  // the runners are forks of this process
  Fixture f;                                                // warm runners kept 10 s
  for (int i = 0; i < 2; ++i) {
    REQUIRE(f.run("pto_test_orch_forks").ok());
    int forked = 0;
    std::ifstream(pid_file) >> forked;
    REQUIRE(forked > 0);
    // Before: it lived on (no parent check, the arena and the channel mapped) in a runner kept warm.
    CHECK(eventually([&] { return process_dead(forked); }));
  }
  CHECK(f.pool.stats().reused == 0);
  unsetenv("PTO_TEST_FORKED_PID_FILE");
  std::filesystem::remove(pid_file);
}
