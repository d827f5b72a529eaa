// ptod keeps user code at arm's length (docs/daemon.md, "Jobs" and
// "Isolation"): each finding of the operator's review, against the real
// daemon. Orchestration libraries run in runners; jobs run at once; cancel,
// timeouts and liveness reach running work; children are replaced at once;
// the drain is bounded whatever user code does.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <future>
#include <thread>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"

using namespace pto_test;
using pto::client::Client;
namespace v1 = pto::v1;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The sub callables and the fixture orchestrations, by name.
void register_fixtures(Client& c) {
  REQUIRE(c.register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  REQUIRE(c.register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  REQUIRE(c.register_import(NATIVE_SUBS, "pto_test_sleep", "sleep").ok());
  for (const char* s : {"pto_test_orch_subs", "pto_test_orch_segv", "pto_test_orch_exit3", "pto_test_orch_abort",
                        "pto_test_orch_hang", "pto_test_orch_sleeps"}) {
    auto r = c.register_import(RUNNER_ORCHS, s, s, true);
    INFO(s << ": " << r.status.message);
    REQUIRE(r.ok());
  }
}

v1::SubmitRequest job(const std::string& callable, std::vector<uint64_t> scalars = {}) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name(callable);
  for (uint64_t s : scalars) req.mutable_args()->add_scalars(s);
  return req;
}

// A job whose one tensor argument is `tensor` (by name) with `tag`.
v1::SubmitRequest job_on(const std::string& callable, const std::string& tensor, v1::TensorTag tag,
                         std::vector<uint64_t> scalars) {
  v1::SubmitRequest req = job(callable, std::move(scalars));
  req.mutable_args()->add_tensors()->mutable_tensor()->set_name(tensor);
  req.mutable_args()->add_tags(tag);
  return req;
}

// The pid of a child of the daemon's Worker ("chip 0", "sub 1").
int child_pid(Client& c, const std::string& name) {
  auto w = c.workers();
  if (!w.ok()) return -1;
  for (const auto& n : w.value.root().children())
    if (n.name() == name) return n.pid();
  return -1;
}

std::string child_state(Client& c, const std::string& name) {
  auto w = c.workers();
  if (!w.ok()) return "";
  for (const auto& n : w.value.root().children())
    if (n.name() == name) return n.state();
  return "";
}

}  // namespace

TEST_CASE("an orchestration that crashes, exits or aborts fails its job naming it - ptod and the next job are fine") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  auto x = c->alloc("x", {4}, PTO_FLOAT32);
  REQUIRE(x.ok());
  for (const auto& [symbol, says] : std::vector<std::pair<std::string, std::string>>{
           {"pto_test_orch_segv", "killed by signal 11"}, {"pto_test_orch_exit3", "exited with status 3"},
           {"pto_test_orch_abort", "signal 6"}}) {
    auto r = c->run(job(symbol));
    REQUIRE(r.ok());
    INFO(symbol << ": " << r.value.message());
    CHECK(r.value.state() == v1::FAILED);
    CHECK(r.value.message().find(says) != std::string::npos);
    CHECK(r.value.message().find(symbol) != std::string::npos);
    CHECK(kill(d.pid(), 0) == 0);  // ptod is alive
    auto ok = c->run(job_on("pto_test_orch_subs", "x", v1::INOUT, {10}));
    REQUIRE(ok.ok());
    CHECK(ok.value.state() == v1::SUCCEEDED);
  }
  auto health = c->health();
  REQUIRE(health.ok());
  CHECK(health.value == "SERVING");
}

TEST_CASE("a library whose constructor crashes or never returns is refused at Register - ptod goes on and stops") {
  const std::string dir = make_temp_dir("ptod-iso");
  std::ofstream(dir + "/ptod.toml") << "[worker]\nrunner_load_timeout_ms = 2000\n";  // register_fixtures loads six
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  auto segv = c->register_import(SEGV_CTOR, "pto_test_never_reached_segv", "bad1", true);
  INFO(segv.status.message);
  CHECK_FALSE(segv.ok());
  CHECK(segv.status.message.find("killed by signal 11") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  auto hang = c->register_import(HANG_CTOR, "pto_test_never_reached", "bad2", true);
  INFO(hang.status.message);
  CHECK_FALSE(hang.ok());
  CHECK(hang.status.message.find("did not finish loading within 2000 ms") != std::string::npos);
  CHECK(ms_since(t0) < 8000);
  // Later orchestration registrations work.
  register_fixtures(*c);
  const auto s0 = std::chrono::steady_clock::now();
  CHECK(d.stop(SIGTERM, 30) == 0);
  CHECK(ms_since(s0) < 5000);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an orchestration that never returns is cancelled at once - jobs behind it run - the drain is bounded") {
  const std::string dir = make_temp_dir("ptod-iso");
  std::ofstream(dir + "/ptod.toml") << "[daemon]\ndrain_timeout_s = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  auto hung = c->submit(job("pto_test_orch_hang"));
  REQUIRE(hung.ok());
  REQUIRE(eventually([&] {
    auto r = c->result(hung.value.job_id());
    return r.ok() && r.value.state() == v1::RUNNING;
  }));
  // Jobs submitted behind it run (jobs run at once).
  auto other = c->run(job("noop"));
  REQUIRE(other.ok());
  CHECK(other.value.state() == v1::SUCCEEDED);
  const auto t0 = std::chrono::steady_clock::now();
  auto cancelled = c->cancel(hung.value.job_id());
  REQUIRE(cancelled.ok());
  auto end = c->result(hung.value.job_id(), 5000);
  REQUIRE(end.ok());
  CHECK(end.value.state() == v1::CANCELLED);
  CHECK(ms_since(t0) < 1000);
  // SIGTERM with a hung orchestration still running: ptod ends within drain_timeout_s + 2 s.
  auto hung2 = c->submit(job("pto_test_orch_hang"));
  REQUIRE(hung2.ok());
  REQUIRE(eventually([&] {
    auto r = c->result(hung2.value.job_id());
    return r.ok() && r.value.state() == v1::RUNNING;
  }));
  const auto s0 = std::chrono::steady_clock::now();
  CHECK(d.stop(SIGTERM, 30) == 0);
  const double stop_ms = ms_since(s0);
  INFO(d.log());
  CHECK(stop_ms < 3000);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a sub job that loops honours timeout_ms, and Cancel stops it at once") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  v1::SubmitRequest slow = job("sleep", {600000});
  slow.mutable_config()->set_timeout_ms(1500);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->run(slow);
  REQUIRE(r.ok());
  INFO(r.value.message());
  CHECK(r.value.state() == v1::FAILED);
  CHECK(r.value.first_failure().message().find("timed out") != std::string::npos);
  CHECK(ms_since(t0) < 4000);
  auto loop = c->submit(job("sleep", {600000}));
  REQUIRE(loop.ok());
  REQUIRE(eventually([&] {
    auto s = c->result(loop.value.job_id());
    return s.ok() && s.value.state() == v1::RUNNING && (child_state(*c, "sub 0") == "busy" ||
                                                        child_state(*c, "sub 1") == "busy");
  }));
  const auto t1 = std::chrono::steady_clock::now();
  REQUIRE(c->cancel(loop.value.job_id()).ok());
  auto end = c->result(loop.value.job_id(), 5000);
  REQUIRE(end.ok());
  CHECK(end.value.state() == v1::CANCELLED);
  CHECK(end.value.tasks_stopped() == 1);
  CHECK(ms_since(t1) < 1000);
  // Both sub workers serve again at once.
  CHECK(eventually([&] { return child_state(*c, "sub 0") == "idle" && child_state(*c, "sub 1") == "idle"; }));
}

TEST_CASE("a job's timeout_ms bounds the tasks its orchestration submits - also those given no config") {
  // pto_test_orch_sleeps submits its sub tasks without a CallConfig. Before: they ran under [worker]
  // task_timeout_ms (5 minutes by default), the job's timeout_ms reaching only the orchestration's cfg.
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  v1::SubmitRequest slow = job("pto_test_orch_sleeps", {1, 600000});
  slow.mutable_config()->set_timeout_ms(1500);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c->run(slow);
  REQUIRE(r.ok());
  INFO(r.value.message());
  CHECK(r.value.state() == v1::FAILED);
  CHECK(r.value.first_failure().message().find("timed out") != std::string::npos);
  CHECK(ms_since(t0) < 6000);
  // A task's own shorter timeout still holds, and a job without one is bounded by [worker] task_timeout_ms as
  // before (here: it runs to the end).
  auto fine = c->run(job("pto_test_orch_sleeps", {2, 50}));
  REQUIRE(fine.ok());
  CHECK(fine.value.state() == v1::SUCCEEDED);
}

TEST_CASE("a stopped chip child mid-job is noticed within the liveness bound - the daemon stays healthy") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep_chip").ok());
  const int pid = child_pid(*c, "chip 0");
  REQUIRE(pid > 0);
  v1::SubmitRequest req = job("sleep_chip", {20000});
  auto fut = c->run_async(req);
  REQUIRE(eventually([&] { return child_state(*c, "chip 0") == "busy"; }));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kill(pid, SIGSTOP) == 0);
  auto r = fut.get();
  REQUIRE(r.ok());
  INFO(r.value.message());
  CHECK(r.value.state() == v1::FAILED);
  CHECK(r.value.first_failure().outcome() == v1::ENDPOINT_FAILURE);
  CHECK(r.value.first_failure().message().find("no heartbeat") != std::string::npos);
  CHECK(ms_since(t0) < 4000);  // the default bound is 2 s
  CHECK(eventually([&] { return child_pid(*c, "chip 0") != pid && child_state(*c, "chip 0") == "idle"; }));
}

TEST_CASE("a stopped idle sub child gets no new work: the jobs go to the other one") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  const int pid = child_pid(*c, "sub 0");
  REQUIRE(kill(pid, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<pto::client::Result<v1::JobResult>>> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(c->run_async(job("sleep", {50})));
  for (auto& j : jobs) {
    auto r = j.get();
    REQUIRE(r.ok());
    // A job that landed on the stopped child before it was noticed fails
    // (ENDPOINT_FAILURE, naming the cause); none waits behind it for ever.
    if (r.value.state() != v1::SUCCEEDED)
      CHECK(r.value.first_failure().message().find("no heartbeat") != std::string::npos);
  }
  CHECK(ms_since(t0) < 5000);
  REQUIRE(eventually([&] { return child_pid(*c, "sub 0") != pid; }));
  for (int i = 0; i < 4; ++i) {
    auto r = c->run(job("sleep", {10}));
    REQUIRE(r.ok());
    CHECK(r.value.state() == v1::SUCCEEDED);
  }
}

TEST_CASE("a killed child is replaced at once: a registration right after it succeeds") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  const int pid = child_pid(*c, "chip 0");
  REQUIRE(kill(pid, SIGKILL) == 0);
  REQUIRE(eventually([&] { return child_pid(*c, "chip 0") != pid && child_state(*c, "chip 0") == "idle"; }));
  auto reg = c->register_chip(VECTOR_CONFIG, "vector");
  INFO(reg.status.message);
  CHECK(reg.ok());
}

TEST_CASE("jobs run at once: disjoint tensors overlap, writers of one tensor go in submission order") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  REQUIRE(c->alloc("p", {4}, PTO_FLOAT32).ok());
  REQUIRE(c->alloc("q", {4}, PTO_FLOAT32).ok());
  auto both = [&](const std::string& t1, const std::string& t2) {
    const auto t0 = std::chrono::steady_clock::now();
    auto a = c->run_async(job_on("sleep", t1, v1::INOUT, {500}));
    auto b = c->run_async(job_on("sleep", t2, v1::INOUT, {500}));
    auto ra = a.get(), rb = b.get();
    REQUIRE(ra.ok());
    REQUIRE(rb.ok());
    CHECK(ra.value.state() == v1::SUCCEEDED);
    CHECK(rb.value.state() == v1::SUCCEEDED);
    return ms_since(t0);
  };
  const double disjoint = both("p", "q");
  const double same = both("p", "p");
  INFO("disjoint " << disjoint << " ms, same tensor " << same << " ms");
  CHECK(disjoint < 900);
  CHECK(same >= 1000);
}

TEST_CASE("a one-task job is served while a 2,000-task job runs (round robin between jobs)") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  register_fixtures(*c);
  auto idle = c->run(job("noop"));
  REQUIRE(idle.ok());
  auto big = c->submit(job("pto_test_orch_sleeps", {4000, 1}));  // ~2 s of work on two sub workers
  REQUIRE(big.ok());
  std::string last;
  const bool going = eventually([&] {
    auto r = c->result(big.value.job_id());
    last = r.ok() ? r.value.ShortDebugString() : r.status.message;
    return r.ok() && r.value.state() == v1::RUNNING && r.value.tasks_submitted() > 200;
  });
  INFO(last);
  REQUIRE(going);
  const auto t0 = std::chrono::steady_clock::now();
  auto one = c->run(job("noop"));
  const double ms = ms_since(t0);
  REQUIRE(one.ok());
  CHECK(one.value.state() == v1::SUCCEEDED);
  auto still = c->result(big.value.job_id());
  REQUIRE(still.ok());
  INFO("one-task job " << ms << " ms while the big job had " << still.value.tasks_succeeded() << " tasks done");
  CHECK(still.value.state() == v1::RUNNING);
  CHECK(ms < 500);  // FIFO would have waited for the rest of the big job (1.8 s)
  REQUIRE(c->cancel(big.value.job_id()).ok());
}
