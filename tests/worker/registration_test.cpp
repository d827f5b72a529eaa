// Registration while children are busy (docs/worker.md, "Registration"): a
// registration or unregistration does not wait for a child that runs a long
// task - the child serves it before its next task - while a registration
// still needs one child's acknowledgement before it is published, and a busy
// child that cannot install what it owes is replaced, the Worker serving on.
#include <filesystem>
#include <fstream>

#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A run whose one task sleeps `ms` on a sub worker; returns once a sub
// worker runs it, with *busy set to that worker's index.
RunHandle hold_a_sub(Worker& w, const CallableHandle& sleep, uint64_t ms, int* busy) {
  RunHandle h = w.submit([&sleep, ms](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    return o.submit_sub(sleep, TaskArgs().add_scalar(ms)).ok() ? 0 : 1;
  });
  *busy = -1;
  REQUIRE(eventually([&] {
    for (const auto& c : w.children())
      if (c.kind == ChildKind::SUB && c.state == ChildState::BUSY) *busy = c.index;
    return *busy >= 0;
  }));
  return h;
}

// Each of the Worker's `n` sub workers adds one to its own row of x, as a
// group (one member per worker): every worker runs the callable once.
RunResult add_one_everywhere(Worker& w, const CallableHandle& add_one, const ContinuousTensor& x, int n) {
  return w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    std::vector<TaskArgs> members(n);
    for (int m = 0; m < n; ++m) members[m].add_tensor(make_tensor(f32(x) + 4 * m, {4}, PTO_FLOAT32), INOUT);
    return o.submit_sub_group(add_one, members).ok() ? 0 : 1;
  });
}

}  // namespace

TEST_CASE("a registration does not wait for a child running a long task - the child installs it before its next") {
  // The request's own bound is 2 x 300 ms + 1 s = 1.6 s; the task takes 4 s.
  Worker w({.level = 3, .num_sub_workers = 2, .control_timeout_ms = 300});
  auto sleep = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_sleep"));
  REQUIRE(w.init().ok());
  int busy = -1;
  RunHandle long_run = hold_a_sub(w, sleep, 4000, &busy);
  const auto t0 = Clock::now();
  auto add_one = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  INFO(add_one.status.message);
  REQUIRE(add_one.ok());
  CHECK(seconds_since(t0) < 1.0);
  CHECK_FALSE(long_run.done());
  // Both workers run it, the busy one after its long task.
  ContinuousTensor x = alloc_f32(w, 8);
  fill(x, 1.f, 0.f);
  RunResult r = add_one_everywhere(w, add_one, x, 2);
  INFO(r.status.message);
  REQUIRE(r.ok());
  for (int i = 0; i < 8; ++i) CHECK(f32(x)[i] == 2.f);
  REQUIRE(long_run.wait(std::chrono::milliseconds(10000)));
  CHECK(long_run.result().ok());
  for (int i = 0; i < 2; ++i) CHECK(w.child_has_callable(add_one, ChildKind::SUB, i).value);
  for (const auto& c : w.children()) CHECK(c.restarts == 0);
  REQUIRE(w.close().ok());
}

TEST_CASE("an unregistration does not wait for a child running a long task - the child removes it before its next") {
  Worker w({.level = 3, .num_sub_workers = 2, .control_timeout_ms = 300});
  auto sleep = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_sleep"));
  REQUIRE(w.init().ok());
  auto add_one = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  REQUIRE(add_one.ok());
  int busy = -1;
  RunHandle long_run = hold_a_sub(w, sleep, 3000, &busy);
  const auto t0 = Clock::now();
  Status s = w.unregister_callable(add_one);
  INFO(s.message);
  REQUIRE(s.ok());
  CHECK(seconds_since(t0) < 1.0);
  // Registered again at once: the busy child serves both, in order.
  auto again = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  INFO(again.status.message);
  REQUIRE(again.ok());
  CHECK(seconds_since(t0) < 1.5);
  REQUIRE(long_run.wait(std::chrono::milliseconds(10000)));
  ContinuousTensor x = alloc_f32(w, 8);
  fill(x, 0.f, 0.f);
  RunResult r = add_one_everywhere(w, again, x, 2);
  INFO(r.status.message);
  REQUIRE(r.ok());
  for (int i = 0; i < 8; ++i) CHECK(f32(x)[i] == 1.f);
  // And away again: after the busy child's task neither has it.
  RunHandle second = hold_a_sub(w, sleep, 1500, &busy);
  REQUIRE(w.unregister_callable(again).ok());
  REQUIRE(second.wait(std::chrono::milliseconds(10000)));
  for (int i = 0; i < 2; ++i) CHECK_FALSE(w.child_has_callable(again, ChildKind::SUB, i).value);
  REQUIRE(w.close().ok());
}

TEST_CASE("a registration whose every target is busy waits for the first to be idle - and names them if none is") {
  Worker w({.level = 3, .num_sub_workers = 1, .control_timeout_ms = 300});
  auto sleep = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_sleep"));
  REQUIRE(w.init().ok());
  int busy = -1;
  // Within the request's bound (1.6 s): it waits for the task, then installs.
  RunHandle short_run = hold_a_sub(w, sleep, 800, &busy);
  auto t0 = Clock::now();
  auto add_one = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  INFO(add_one.status.message);
  REQUIRE(add_one.ok());
  CHECK(seconds_since(t0) > 0.3);  // published only once the child, after its task, acknowledged it
  REQUIRE(short_run.wait(std::chrono::milliseconds(10000)));
  CHECK(w.child_has_callable(add_one, ChildKind::SUB, 0).value);
  // Beyond it: the error says what it waited for.
  RunHandle long_run = hold_a_sub(w, sleep, 4000, &busy);
  t0 = Clock::now();
  auto noop = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_noop"));
  REQUIRE_FALSE(noop.ok());
  CHECK(seconds_since(t0) < 3.0);
  CHECK_THAT(noop.status.message,
             Catch::Contains("did not finish within 1600 ms") && Catch::Contains("sub 0 is running task"));
  REQUIRE(long_run.wait(std::chrono::milliseconds(10000)));
  // Given up, it was not published: submits of it fail.
  CallableHandle probe = noop;
  probe.status = Status::Ok();
  CHECK_FALSE(w.child_has_callable(probe, ChildKind::SUB, 0).value);
  REQUIRE(w.close().ok());
}

TEST_CASE("a query given up on while its child is busy does not hold up the registrations behind it") {
  Worker w({.level = 3, .num_sub_workers = 2, .control_timeout_ms = 300});
  auto sleep = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_sleep"));
  REQUIRE(w.init().ok());
  int busy = -1;
  RunHandle long_run = hold_a_sub(w, sleep, 5000, &busy);
  // The query waits for its busy child until its bound (1.6 s), then gives up...
  auto asked = w.child_has_callable(sleep, ChildKind::SUB, busy);
  CHECK_FALSE(asked.ok());
  CHECK_THAT(asked.status.message, Catch::Contains("is running task"));
  // ...and leaves the queue: before, it stayed at its front until the task
  // ended, and this registration timed out behind it.
  const auto t0 = Clock::now();
  auto add_one = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  INFO(add_one.status.message);
  REQUIRE(add_one.ok());
  CHECK(seconds_since(t0) < 1.0);
  REQUIRE(long_run.wait(std::chrono::milliseconds(10000)));
  REQUIRE(w.close().ok());
}

TEST_CASE("a busy child that cannot install the registration it owes is replaced - the Worker serves on") {
  const std::string marks =
      (std::filesystem::temp_directory_path() / ("pto-marked-" + std::to_string(getpid()) + ".pid")).string();
  setenv("PTO_TEST_CRASH_PID_FILE", marks.c_str(), 1);  // inherited by the children forked below
  Worker w({.level = 3, .num_sub_workers = 2, .control_timeout_ms = 300});
  auto sleep = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_sleep"));
  REQUIRE(w.init().ok());
  int busy = -1;
  RunHandle long_run = hold_a_sub(w, sleep, 1500, &busy);
  const int victim = child(w.children(), ChildKind::SUB, busy)->pid;
  std::ofstream(marks) << victim;
  // The idle worker loads it: published. The busy one aborts loading it
  // after its task, and its replacement (another pid) loads it as it starts.
  auto marked = w.register_callable(NativeCallable::import(MARKED_CTOR, "pto_test_marked_add_one"));
  INFO(marked.status.message);
  REQUIRE(marked.ok());
  REQUIRE(long_run.wait(std::chrono::milliseconds(10000)));
  CHECK(long_run.result().ok());  // its task had ended before the child died
  REQUIRE(eventually([&] {
    const ChildInfo c = *child(w.children(), ChildKind::SUB, busy);
    return c.restarts == 1 && c.state == ChildState::IDLE && c.pid != victim;
  }));
  ContinuousTensor x = alloc_f32(w, 8);
  fill(x, 0.f, 0.f);
  RunResult r = add_one_everywhere(w, marked, x, 2);
  INFO(r.status.message);
  REQUIRE(r.ok());
  for (int i = 0; i < 8; ++i) CHECK(f32(x)[i] == 1.f);
  REQUIRE(w.close().ok());
  unsetenv("PTO_TEST_CRASH_PID_FILE");
  std::filesystem::remove(marks);
}
