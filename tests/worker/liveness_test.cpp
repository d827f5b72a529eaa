// Children that stop making progress, and children that die, while no run
// is looking (docs/worker.md, "Failure model"): a stopped process is noticed
// by its heartbeat within liveness_timeout_ms and replaced; a busy one is
// not mistaken for it; a dead child is forked again at once, not at the
// next run.
#include <signal.h>

#include <thread>

#include "pto/base/clock.h"
#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

// Burns CPU for scalars[0] ms without sleeping: a long kernel.
int spin_ms(const TaskArgsView& a, std::string&) {
  const uint64_t end = now_ns() + a.scalars[0] * 1'000'000;
  volatile uint64_t x = 0;
  while (now_ns() < end) x = x + 1;
  return 0;
}

int sub_pid(Worker& w, int i) { return child(w.children(), ChildKind::SUB, i)->pid; }

}  // namespace

TEST_CASE("a child stopped mid-task is noticed by its heartbeat, its task fails naming the cause, it is replaced") {
  Worker w({.level = 3, .num_sub_workers = 1, .liveness_timeout_ms = 500});
  auto sleeper = w.register_callable(NativeCallable::function("sleep_ms", sleep_ms));
  REQUIRE(w.init().ok());
  const int pid = sub_pid(w, 0);
  RunHandle h = w.submit([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    return o.submit_sub(sleeper, TaskArgs().add_scalar(30000)).ok() ? 0 : 1;
  });
  REQUIRE(eventually([&] { return child(w.children(), ChildKind::SUB, 0)->state == ChildState::BUSY; }));
  const uint64_t t0 = now_ns();
  REQUIRE(kill(pid, SIGSTOP) == 0);
  const RunResult& r = h.result();
  const double ms = double(now_ns() - t0) / 1e6;
  INFO(r.status.message << " after " << ms << " ms");
  REQUIRE(r.first_failure);
  CHECK(r.first_failure->outcome == Outcome::ENDPOINT_FAILURE);
  CHECK(r.first_failure->message.find("no heartbeat") != std::string::npos);
  CHECK(ms < 1500);
  CHECK(eventually([&] { return process_gone(pid); }));  // killed and reaped
  CHECK(eventually([&] {
    const ChildInfo c = *child(w.children(), ChildKind::SUB, 0);
    return c.pid != pid && c.state == ChildState::IDLE;
  }));
  CHECK(w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
           return o.submit_sub(sleeper, TaskArgs().add_scalar(1)).ok() ? 0 : 1;
         }).ok());
}

TEST_CASE("a stopped idle child gets no more work once noticed - the other child takes it") {
  Worker w({.level = 3, .num_sub_workers = 2, .liveness_timeout_ms = 500});
  auto sleeper = w.register_callable(NativeCallable::function("sleep_ms", sleep_ms));
  REQUIRE(w.init().ok());
  const int stopped = sub_pid(w, 0);
  REQUIRE(kill(stopped, SIGSTOP) == 0);
  // Noticed, killed and replaced without any run looking.
  REQUIRE(eventually([&] { return process_gone(stopped); }, 3000));
  for (int job = 0; job < 4; ++job) {
    const uint64_t t0 = now_ns();
    RunResult r = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
      return o.submit_sub(sleeper, TaskArgs().add_scalar(10)).ok() ? 0 : 1;
    });
    CHECK(r.ok());
    CHECK(double(now_ns() - t0) / 1e6 < 500);
  }
}

TEST_CASE("a busy kernel that never sleeps is not mistaken for a stopped child") {
  Worker w({.level = 3, .num_sub_workers = 1, .liveness_timeout_ms = 300});
  auto spinner = w.register_callable(NativeCallable::function("spin_ms", spin_ms));
  REQUIRE(w.init().ok());
  const int pid = sub_pid(w, 0);
  RunResult r = w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
    return o.submit_sub(spinner, TaskArgs().add_scalar(1500)).ok() ? 0 : 1;
  });
  INFO(r.status.message);
  CHECK(r.ok());
  CHECK(sub_pid(w, 0) == pid);
}

TEST_CASE("a killed child is replaced at once, and a registration right after reaches the replacement") {
  Worker w({.level = 3, .num_sub_workers = 2});
  auto sleeper = w.register_callable(NativeCallable::function("sleep_ms", sleep_ms));
  REQUIRE(w.init().ok());
  const int pid = sub_pid(w, 1);
  REQUIRE(kill(pid, SIGKILL) == 0);
  REQUIRE(eventually([&] {
    const ChildInfo c = *child(w.children(), ChildKind::SUB, 1);
    return c.pid != pid && c.state == ChildState::IDLE && c.restarts == 1;
  }));
  auto add_one = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  REQUIRE(add_one.ok());
  auto on1 = w.child_has_callable(add_one, ChildKind::SUB, 1);
  REQUIRE(on1.ok());
  CHECK(on1.value);
  ContinuousTensor x = alloc_f32(w, 4);
  f32(x)[0] = 1.f;
  CHECK(w.run([&](Orchestrator& o, const TaskArgsView&, const CallConfig&) {
           return o.submit_sub(add_one, TaskArgs().add_tensor(x, INOUT)).ok() ? 0 : 1;
         }).ok());
  CHECK(f32(x)[0] == 2.f);
}

TEST_CASE("a registration that starts while a child is being replaced waits for it instead of failing") {
  Worker w({.level = 3, .num_sub_workers = 1});
  REQUIRE(w.init().ok());
  const int pid = sub_pid(w, 0);
  REQUIRE(kill(pid, SIGKILL) == 0);
  // No wait: the registration may find the child dead, restarting, or back.
  auto add_one = w.register_callable(NativeCallable::import(NATIVE_SUBS, "pto_test_add_one"));
  INFO(add_one.status.message);
  REQUIRE(add_one.ok());
  auto has = w.child_has_callable(add_one, ChildKind::SUB, 0);
  REQUIRE(has.ok());
  CHECK(has.value);
}
