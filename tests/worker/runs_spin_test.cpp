// Several runs in flight on one Worker, and the driver that waits for their
// tasks' completions (docs/worker.md, "Waiting"): it spins before it parks,
// so a short sub task's completion costs no wake-up. A count of context
// switches says so only when the test has the machine's CPUs to itself: its
// CTest entries run serially (tests/worker/CMakeLists.txt).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "pto/base/clock.h"
#include "thread_switches.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

TEST_CASE("several runs in flight: a sub task's completion is caught spinning, not by a wake-up per task") {
  // Two runs with threads of their own, both in flight while their tasks
  // (50 us of work each) run one at a time on one sub worker: whoever drives
  // waits for each completion. Parking for it would cost a wake-up per task
  // (the child rings the doorbell); a driver that spins first catches it. The
  // spin budget is far above a task's round trip, so a park is the exception.
  Worker w({.level = 3, .num_sub_workers = 1, .spin_us = 2000, .max_concurrent_runs = 2});
  CallableHandle busy =
      w.register_callable(NativeCallable::function("busy_50us", [](const TaskArgsView&, std::string&) {
        const uint64_t until = now_ns() + 50'000;
        while (now_ns() < until) {}
        return 0;
      }));
  REQUIRE(w.init().ok());
  constexpr int kTasks = 300;
  std::atomic<int> started{0};
  const auto body = [&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    // Both runs have begun before either submits (bounded: 10 s).
    ++started;
    const uint64_t until = now_ns() + 10'000'000'000ull;
    while (started.load() < 2 && now_ns() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (int i = 0; i < kTasks; ++i)
      if (!o.submit_sub(busy, TaskArgs()).ok()) return 1;
    return 0;
  };
  // One attempt: both runs, and the voluntary switches of the Worker's threads.
  const auto attempt = [&]() -> uint64_t {
    started = 0;
    const uint64_t before = other_threads_switches();
    RunHandle a = w.submit_function(body, {}, {}, nullptr, {});
    RunHandle b = w.submit_function(body, {}, {}, nullptr, {});
    REQUIRE(a.wait(std::chrono::seconds(30)));
    REQUIRE(b.wait(std::chrono::seconds(30)));
    REQUIRE(a.result().ok());
    REQUIRE(b.result().ok());
    CHECK(started.load() == 2);
    return other_threads_switches() - before;
  };
  // A park per task would be 600 or more (640-750 measured before drivers
  // spun with several runs in flight; 35-170 since, alone on the machine).
  // Spinning catches a completion only on a CPU of its own: beside one busy
  // loop 71-120, beside two (both CPUs of the VM taken) 200-1,700. A
  // neighbouring test's burst spoils an attempt, a park per task spoils
  // every one: the best of up to five is checked.
  uint64_t best = UINT64_MAX;
  std::string seen;
  for (int i = 0; i < 5 && best >= kTasks; ++i) {
    const uint64_t switches = attempt();
    best = std::min(best, switches);
    seen += (seen.empty() ? "" : ", ") + std::to_string(switches);
  }
  INFO("voluntary context switches of the Worker's threads per attempt of " << 2 * kTasks << " tasks: " << seen);
#if defined(PTO_UNDER_TSAN)
  // ThreadSanitizer slows every shared access of the spin and the drive
  // several-fold: 130-410 here, alone on the machine. The count is checked
  // in the other builds; this one looks for races.
  WARN("wake-up bound not checked under ThreadSanitizer (" << seen << ")");
#elif defined(PTO_UNDER_ASAN)
  // AddressSanitizer makes each submit hold the engine lock several times
  // longer, so the two runs' submits and the driver meet on it: 117-562
  // here alone on the machine (339 in a CI run), most of them parks on
  // that mutex (perf: sched_switch from std::mutex::lock in submit_task and
  // dispatch_ready), which this count cannot tell from a completion's
  // wake-up. The Release build checks the bound.
  WARN("wake-up bound not checked under AddressSanitizer (" << seen << ")");
#else
  CHECK(best < kTasks);
#endif
}

namespace {
double process_cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec)) / 1e3;
}
}  // namespace

TEST_CASE("an idle Worker's scheduler thread wakes for its park's timeout without spinning again") {
  // Idle, the scheduler thread parks 100 ms at a time (liveness). It spins
  // spin_us before its first park only: spinning again after each timeout
  // cost an idle ptod (spin_us 500) 0.5% of a CPU, and here (20 ms after
  // every 100 ms) it would be a sixth of one.
  Worker w({.level = 3, .num_sub_workers = 1, .spin_us = 20'000});
  CallableHandle noop =
      w.register_callable(NativeCallable::function("noop", [](const TaskArgsView&, std::string&) { return 0; }));
  REQUIRE(w.init().ok());
  REQUIRE(w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
             if (!o.submit_sub(noop, TaskArgs()).ok()) return 1;
             return 0;
           }).ok());
  // Past the spin after the run (and the run queue's thread's), then 1.5 s
  // of nothing: 15 timeouts. The parent's CPU time is counted, so a busy
  // machine (this process off its CPU) can only lower it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double before = process_cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const double used = process_cpu_ms() - before;
  INFO("the idle Worker's process used " << used << " ms of CPU in 1.5 s (spinning 20 ms per timeout: ~250)");
  CHECK(used < 60);
}
