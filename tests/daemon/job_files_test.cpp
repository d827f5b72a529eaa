// A job's files through the daemon (docs/daemon.md "Jobs"): its log — what its
// sub tasks and its orchestration's runner wrote to stdout and stderr,
// captured per job — and its trace, fetched over gRPC and with ptoctl.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "daemon_client.h"
#include "daemon_process.h"
#include "pto/client.h"

using namespace pto_test;
using pto::client::Client;
namespace v1 = pto::v1;
using SC = grpc::StatusCode;

namespace {

v1::SubmitRequest say_job(const std::string& callable, uint64_t tag) {
  v1::SubmitRequest r;
  r.mutable_callable()->set_name(callable);
  r.mutable_args()->add_scalars(tag);
  return r;
}

// The whole log of a job (an error's text when the call fails).
std::string log_of(Client& c, uint64_t job) {
  std::string text;
  const pto::client::Status s = c.logs(job, [&](const std::string& chunk) { text += chunk; });
  return s.ok() ? text : "error " + std::to_string(s.code) + ": " + s.message;
}

}  // namespace

TEST_CASE("a job's log holds what its tasks and its orchestration wrote, and nothing of other jobs") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_say", "say").ok());
  REQUIRE(c->register_import(RUNNER_ORCHS, "pto_test_orch_say", "orch_say", true).ok());
  auto a = c->run(say_job("say", 7));
  auto b = c->run(say_job("say", 8));
  REQUIRE((a.ok() && b.ok()));
  REQUIRE(a.value.state() == v1::SUCCEEDED);
  const std::string la = log_of(*c, a.value.job_id()), lb = log_of(*c, b.value.job_id());
  CHECK_THAT(la, Catch::Contains("say 7 to stdout") && Catch::Contains("say 7 on stderr") && !Catch::Contains("say 8"));
  CHECK_THAT(lb, Catch::Contains("say 8 to stdout") && !Catch::Contains("say 7"));
  // An orchestration: its runner's lines and its sub task's.
  auto o = c->run(say_job("orch_say", 9));
  REQUIRE(o.ok());
  CHECK(o.value.state() == v1::SUCCEEDED);
  CHECK_THAT(log_of(*c, o.value.job_id()), Catch::Contains("orchestration 9 says hello") &&
                                               Catch::Contains("orchestration 9 on stderr") &&
                                               Catch::Contains("say 9 to stdout"));
  // The next job of the same orchestration runs in the same, warm, runner:
  // its lines go to its own log, none to the one before.
  auto o2 = c->run(say_job("orch_say", 10));
  REQUIRE(o2.ok());
  CHECK(o2.value.state() == v1::SUCCEEDED);
  CHECK_THAT(log_of(*c, o2.value.job_id()),
             Catch::Contains("orchestration 10 says hello") && !Catch::Contains("orchestration 9"));
  CHECK_THAT(log_of(*c, o.value.job_id()), !Catch::Contains("orchestration 10"));
  const std::string m = http_get(d.metrics_port(), "/metrics");
  CHECK_THAT(m, Catch::Contains("ptod_runners_total{event=\"reused\"} 1") && Catch::Contains("ptod_runners_idle 1"));
  // Nothing of it reached the daemon's own log.
  CHECK_FALSE(Catch::Contains("say 7").match(d.log()));
  // ptoctl logs prints it; an unknown job is NOT_FOUND (exit 1).
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  Output out = run_command({PTOCTL_PATH, "logs", std::to_string(a.value.job_id())}, 60, env);
  CHECK(out.code == 0);
  CHECK_THAT(out.text, Catch::Contains("say 7 to stdout"));
  Output missing = run_command({PTOCTL_PATH, "logs", "999999"}, 60, env);
  CHECK(missing.code == 1);
  CHECK_THAT(missing.text, Catch::Contains("NOT_FOUND"));
  // --follow of a job that ended prints the log and returns.
  Output follow = run_command({PTOCTL_PATH, "logs", "-f", std::to_string(b.value.job_id())}, 60, env);
  CHECK(follow.code == 0);
  CHECK_THAT(follow.text, Catch::Contains("say 8 on stderr"));
}

TEST_CASE("a job's log goes with its record, and a daemon that does not capture says so") {
  const std::string dir = make_temp_dir("ptod-logs");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nretain_finished = 1\n";
  {
    DaemonProcess d({"--config", dir + "/ptod.toml"});
    REQUIRE(d.up());
    auto c = connect(d);
    REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_say", "say").ok());
    auto first = c->run(say_job("say", 1));
    REQUIRE(first.ok());
    const std::string log = d.dir() + "/state/logs/job-" + std::to_string(first.value.job_id()) + ".log";
    CHECK(std::filesystem::exists(log));
    REQUIRE(c->run(say_job("say", 2)).ok());  // the first job's record is trimmed, its log with it
    CHECK_FALSE(std::filesystem::exists(log));
  }
  std::ofstream(dir + "/ptod.toml") << "[jobs]\ncapture_output = false\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_say", "say").ok());
  auto j = c->run(say_job("say", 3));
  REQUIRE(j.ok());
  const std::string text = log_of(*c, j.value.job_id());
  CHECK_THAT(text, Catch::StartsWith("error " + std::to_string(static_cast<int>(SC::FAILED_PRECONDITION))) &&
                       Catch::Contains("capture_output = false"));
  CHECK_THAT(d.log(), Catch::Contains("say 3 on stderr"));  // the children's streams stayed the daemon's
  std::filesystem::remove_all(dir);
}

TEST_CASE("the trace of a job that failed after its chip task ran goes with its record - and is served meanwhile") {
  const std::string dir = make_temp_dir("ptod-trace");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nretain_finished = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  // The orchestration runs vector on the chip, then "add_one" - here a sub
  // callable that fails.
  REQUIRE(c->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_fail", "add_one").ok());
  REQUIRE(c->register_import(L3_ORCHESTRATION, "pto_test_l3_vector_plus_one", "l3", true).ok());
  const uint32_t n = 16384;  // the vector kernel's size
  std::vector<float> x(n, 0.5f);
  REQUIRE(c->upload("a", {n}, PTO_FLOAT32, x.data(), n * 4).ok());
  REQUIRE(c->upload("b", {n}, PTO_FLOAT32, x.data(), n * 4).ok());
  REQUIRE(c->alloc("f", {n}, PTO_FLOAT32).ok());
  v1::SubmitRequest req;
  req.mutable_callable()->set_name("l3");
  for (const char* t : {"a", "b", "f"}) req.mutable_args()->add_tensors()->mutable_tensor()->set_name(t);
  req.mutable_args()->add_tags(v1::INPUT);
  req.mutable_args()->add_tags(v1::INPUT);
  req.mutable_args()->add_tags(v1::OUTPUT);
  req.mutable_args()->add_scalars(n);
  req.mutable_config()->set_enable_profiling(true);
  auto failed = c->run(req);
  REQUIRE(failed.ok());
  INFO(failed.value.ShortDebugString());
  REQUIRE(failed.value.state() == v1::FAILED);
  // The chip task ran and wrote the trace; the record names it (it did not).
  const std::string trace = d.dir() + "/state/traces/job-" + std::to_string(failed.value.job_id()) + ".json";
  REQUIRE(std::filesystem::exists(trace));
  CHECK(failed.value.trace_path() == trace);
  std::string json;
  REQUIRE(c->trace(failed.value.job_id(), [&](const std::string& chunk) { json += chunk; }).ok());
  CHECK_THAT(json, Catch::Contains("traceEvents"));
  // The next job's end trims the record (retain_finished = 1): the file goes too.
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  v1::SubmitRequest noop;
  noop.mutable_callable()->set_name("noop");
  REQUIRE(c->run(noop).ok());
  CHECK_FALSE(c->result(failed.value.job_id()).ok());
  CHECK_FALSE(std::filesystem::exists(trace));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a job's trace is fetched over gRPC and with ptoctl trace - a job without one is NOT_FOUND") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  v1::SubmitRequest req = say_job("sleep", 1);
  req.mutable_config()->set_enable_profiling(true);
  auto traced = c->run(req);
  REQUIRE(traced.ok());
  REQUIRE(traced.value.state() == v1::SUCCEEDED);
  std::string json;
  REQUIRE(c->trace(traced.value.job_id(), [&](const std::string& chunk) { json += chunk; }).ok());
  CHECK_THAT(json, Catch::Contains("traceEvents"));
  std::ifstream on_disk(traced.value.trace_path());
  CHECK(json == std::string((std::istreambuf_iterator<char>(on_disk)), std::istreambuf_iterator<char>()));
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  const std::string file = d.dir() + "/t.json";
  Output out = run_command({PTOCTL_PATH, "trace", std::to_string(traced.value.job_id()), "-o", file}, 60, env);
  INFO(out.text);
  CHECK(out.code == 0);
  CHECK_THAT(out.text, Catch::Contains("bytes in " + file));
  std::ifstream fetched(file);
  CHECK(json == std::string((std::istreambuf_iterator<char>(fetched)), std::istreambuf_iterator<char>()));
  // ptoctl result points at ptoctl trace, not at a path on the daemon's host.
  Output result = run_command({PTOCTL_PATH, "result", std::to_string(traced.value.job_id())}, 60, env);
  CHECK_THAT(result.text, Catch::Contains("trace: ptoctl trace") && !Catch::Contains("/state/traces"));
  auto plain = c->run(say_job("sleep", 1));
  REQUIRE(plain.ok());
  const pto::client::Status none = c->trace(plain.value.job_id(), [](const std::string&) {});
  CHECK(static_cast<SC>(none.code) == SC::NOT_FOUND);
  CHECK_THAT(none.message, Catch::Contains("has no trace"));
}

TEST_CASE(
    "a running task's output reaches its log before it ends, a crashed task's last words are kept, and a log "
    "stops at 64 MiB") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_tick", "tick").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_say_then_abort", "abort").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_flood", "flood").ok());
  // Live: "tick 1" is in the log while the task still sleeps.
  auto s = c->submit(say_job("tick", 3000));
  REQUIRE(s.ok());
  const uint64_t id = s.value.job_id();
  bool live = false;
  for (int i = 0; i < 250 && !live; ++i) {  // up to 2.5 s, the task sleeps 3 s
    live = log_of(*c, id).find("tick 1") != std::string::npos;
    if (!live) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto mid = c->result(id);
  REQUIRE(mid.ok());
  CHECK(live);
  CHECK(mid.value.state() == v1::RUNNING);
  // Following it: the stream ends with the job, both lines in it.
  std::string followed;
  REQUIRE(c->logs(
               id, [&](const std::string& chunk) { followed += chunk; }, true)
              .ok());
  CHECK_THAT(followed, Catch::Contains("tick 1\ntick 2\n"));
  // A crash: what it printed before is kept.
  auto crashed = c->run(say_job("abort", 0));
  REQUIRE(crashed.ok());
  CHECK(crashed.value.state() == v1::FAILED);
  CHECK_THAT(log_of(*c, crashed.value.job_id()), Catch::Contains("last words"));
  // 80 MiB printed: the log holds 64 MiB and says the rest was dropped.
  auto flood = c->run(say_job("flood", 80));
  REQUIRE(flood.ok());
  CHECK(flood.value.state() == v1::SUCCEEDED);
  const std::string path = d.dir() + "/state/logs/job-" + std::to_string(flood.value.job_id()) + ".log";
  const auto size = std::filesystem::file_size(path);
  CHECK(size >= (uint64_t(64) << 20));
  CHECK(size <= (uint64_t(64) << 20) + 200);
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(size) - 120);
  const std::string tail((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK_THAT(tail, Catch::Contains("reached its limit of 64 MiB; further output is dropped"));
}
