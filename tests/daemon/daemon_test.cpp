// ptod end to end: the real daemon binary as a subprocess on a temporary
// socket (and ephemeral TCP ports), driven with the client library and the
// real ptoctl. Golden checks compare computed outputs.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <regex>
#include <thread>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/base/cpu_set.h"
#include "pto/client.h"
#include "pto/version.h"
#include "sanitized.h"
#include "thread_switches.h"

using namespace pto_test;
using pto::client::Client;
namespace v1 = pto::v1;

namespace {

constexpr uint32_t N = 16384;
grpc::Status grpc_status_holder;

v1::SubmitRequest sleep_job(const std::string& callable, uint64_t ms) {
  v1::SubmitRequest req;
  req.mutable_callable()->set_name(callable);
  req.mutable_args()->add_scalars(ms);
  return req;
}

}  // namespace

TEST_CASE("ptoctl runs the vector and paged-attention examples through ptod") {
  DaemonProcess d;
  REQUIRE(d.up());
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  Output h = run_command({PTOCTL_PATH, "health"}, 30, env);
  CHECK(h.code == 0);
  CHECK(h.text == "SERVING\n");
  for (const char* cfg : {VECTOR_CONFIG, PAGED_ATTENTION_CONFIG}) {
    Output r = run_command({PTOCTL_PATH, "run-example", cfg, "--trace"}, 120, env);
    INFO(r.text << d.log());
    CHECK(r.code == 0);
    CHECK_THAT(r.text, Catch::Contains(": PASS ("));
    // The trace is fetched with ptoctl trace: no path on the daemon's host is shown.
    CHECK_THAT(r.text, Catch::Contains("trace: ptoctl trace ") && !Catch::Contains(d.dir() + "/state"));
  }
  Output w = run_command({PTOCTL_PATH, "--json", "workers"}, 30, env);
  CHECK(w.code == 0);
  CHECK_THAT(w.text, Catch::Contains("\"name\":\"chip 0\"") && Catch::Contains("\"name\":\"sub 1\""));
  Output jobs = run_command({PTOCTL_PATH, "jobs"}, 30, env);
  CHECK_THAT(jobs.text, Catch::Contains("SUCCEEDED"));
  // Unreachable daemon: exit 3.
  Output gone =
      run_command({PTOCTL_PATH, "--timeout", "2", "--address", "unix:" + d.dir() + "/nothing.sock", "version"}, 30);
  CHECK(gone.code == 3);
  CHECK(d.stop() == 0);
}

TEST_CASE("concurrent clients each get their own correct results") {
  DaemonProcess d({}, 2, 2);
  REQUIRE(d.up());
  auto admin = connect(d);
  auto reg = admin->register_chip(VECTOR_CONFIG, "vector");
  INFO(reg.status.message);
  REQUIRE(reg.ok());
  std::atomic<int> passed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      auto cl = connect(d);
      std::vector<float> a(N), b(N);
      std::mt19937 rng(c);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (uint32_t i = 0; i < N; ++i) a[i] = u(rng), b[i] = u(rng);
      bool ok = true;
      for (int round = 0; round < 3 && ok; ++round) {
        auto ta = cl->upload("", {N}, PTO_FLOAT32, a.data(), N * 4);
        auto tb = cl->upload("", {N}, PTO_FLOAT32, b.data(), N * 4);
        auto tf = cl->alloc("", {N}, PTO_FLOAT32);
        if (!ta.ok() || !tb.ok() || !tf.ok()) {
          ok = false;
          break;
        }
        v1::SubmitRequest req;
        req.mutable_callable()->set_name("vector");
        for (auto* t : {&ta.value, &tb.value, &tf.value})
          *req.mutable_args()->add_tensors()->mutable_tensor() = t->handle();
        req.mutable_args()->add_tags(v1::INPUT);
        req.mutable_args()->add_tags(v1::INPUT);
        req.mutable_args()->add_tags(v1::OUTPUT);
        req.mutable_args()->add_scalars(N);
        int events = 0;
        auto r = round == 0 ? cl->run(req, [&](const v1::JobEvent&) { ++events; }) : cl->run_async(req).get();
        ok = r.ok() && r.value.state() == v1::SUCCEEDED && (round != 0 || events >= 1);
        std::vector<uint8_t> got;
        ok = ok && cl->download(tf.value.handle(), &got).ok();
        for (uint32_t i = 0; ok && i < N; ++i) {
          float f;
          std::memcpy(&f, got.data() + 4 * i, 4);
          const float s = a[i] + b[i];
          ok = std::fabs(f - (s + 1) * (s + 2)) <= 1e-4f * std::max(1.f, std::fabs(f));
        }
        for (auto* t : {&ta.value, &tb.value, &tf.value}) (void)cl->free(t->handle());
      }
      if (ok) ++passed;
    });
  for (auto& t : clients) t.join();
  CHECK(passed == 4);
  auto jobs = admin->jobs(100);
  REQUIRE(jobs.ok());
  CHECK(jobs.value.jobs_size() == 12);
  // Unregistering deletes the uploaded bundle.
  auto bundles = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.dir() + "/state/callables"))
      n += e.path().filename().string().rfind("bundle-", 0) == 0;
    return n;
  };
  CHECK(bundles() == 1);
  v1::CallableRef ref;
  ref.set_name("vector");
  REQUIRE(admin->unregister(ref).ok());
  CHECK(bundles() == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("SIGTERM drains - the running job completes - new jobs are refused - exit 0") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto sub = c->submit(sleep_job("sleep", 3000));  // room for the watch, the signal and the refused submit
  REQUIRE(sub.ok());
  REQUIRE(eventually([&] { return c->result(sub.value.job_id()).value.state() == v1::RUNNING; }, 10000));
  v1::JobResult watched;
  // True at the stream's first event (the job's current state: the watcher is attached), false if it ends without one.
  std::promise<bool> attached;
  std::thread watcher([&] {
    bool first = true;
    auto r = c->watch(sub.value.job_id(), [&](const v1::JobEvent&) {
      if (first) attached.set_value(true);
      first = false;
    });
    if (first) attached.set_value(false);
    watched = r.value;
  });
  auto attached_f = attached.get_future();
  const bool watching = attached_f.wait_for(std::chrono::seconds(10)) == std::future_status::ready && attached_f.get();
  if (!watching) watcher.join();  // it ended, or ends with the 3 s job
  REQUIRE(watching);
  kill(d.pid(), SIGTERM);
  // While draining: refused, and health says NOT_SERVING.
  REQUIRE(eventually([&] { return c->health().value == "NOT_SERVING"; }, 5000));
  auto refused = c->submit(sleep_job("sleep", 1));
  CHECK(refused.status.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  CHECK_THAT(refused.status.message, Catch::Contains("draining"));
  watcher.join();
  CHECK(watched.state() == v1::SUCCEEDED);
  CHECK(d.stop(0) == 0);  // already stopping: just wait
  CHECK_THAT(d.log(), Catch::Contains("SIGTERM: draining") && Catch::Contains("stopped"));
}

TEST_CASE("a chip child killed mid-job fails the job clearly - the daemon stays healthy - the next job succeeds") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto sub = c->submit(sleep_job("sleep", 20000));
  REQUIRE(sub.ok());
  int chip_pid = 0;
  REQUIRE(eventually(
      [&] {
        auto w = c->workers();
        for (const auto& n : w.value.root().children())
          if (n.name() == "chip 0" && n.state() == "busy") chip_pid = n.pid();
        return chip_pid > 0;
      },
      10000));
  kill(chip_pid, SIGKILL);
  auto r = c->result(sub.value.job_id(), 10000);
  REQUIRE(r.ok());
  CHECK(r.value.state() == v1::FAILED);
  CHECK(r.value.first_failure().worker() == "chip 0");
  CHECK(r.value.first_failure().outcome() == v1::ENDPOINT_FAILURE);
  CHECK_THAT(r.value.message(), Catch::Contains("signal 9"));
  CHECK(c->health().value == "SERVING");
  auto next = c->run(sleep_job("sleep", 1));
  REQUIRE(next.ok());
  CHECK(next.value.state() == v1::SUCCEEDED);
  auto w = c->workers();
  for (const auto& n : w.value.root().children())
    if (n.name() == "chip 0") CHECK(n.restarts() == 1);
}

TEST_CASE("malformed and wrong requests get a status with a message and the daemon keeps serving") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  using SC = grpc::StatusCode;
  auto code = [](const pto::client::Status& s) { return static_cast<SC>(s.code); };
  // Registry
  v1::RegisterRequest bad_bundle;
  bad_bundle.mutable_chip()->set_config_toml("[orchestration]\nlibrary = \"x.so\"\n");
  (*bad_bundle.mutable_chip()->mutable_libraries())["../evil.so"] = "bytes";
  auto r1 = c->register_callable(bad_bundle);
  CHECK(code(r1.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(r1.status.message, Catch::Contains("../evil.so"));
  // A bundle whose config names a library outside the bundle.
  v1::RegisterRequest outside;
  outside.mutable_chip()->set_config_toml(
      "[orchestration]\nlibrary = \"/usr/lib/x86_64-linux-gnu/libc.so.6\"\n[[kernels]]\nfunc_id = 0\nlibrary = "
      "\"k.so\"\ncore_type = \"aiv\"\n[[args]]\nname = \"n\"\nrole = \"scalar\"\nvalue = 1\n");
  (*outside.mutable_chip()->mutable_libraries())["k.so"] = "not really a library";
  auto r0 = c->register_callable(outside);
  CHECK(code(r0.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(r0.status.message, Catch::Contains("not one of the bundle's files"));
  v1::RegisterRequest broken_config;
  broken_config.mutable_chip()->set_config_toml("this is not toml = = =");
  CHECK(code(c->register_callable(broken_config).status) == SC::INVALID_ARGUMENT);
  CHECK(code(c->register_callable(v1::RegisterRequest()).status) == SC::INVALID_ARGUMENT);
  CHECK(code(c->register_import("relative/lib.so", "f").status) == SC::INVALID_ARGUMENT);
  auto blob = c->register_blob(NATIVE_SUBS, "pto_test_noop");
  CHECK(code(blob.status) == SC::PERMISSION_DENIED);
  CHECK_THAT(blob.status.message, Catch::Contains("allow_native_blob"));
  v1::CallableRef short_digest;
  short_digest.set_digest("abc");
  CHECK(code(c->unregister(short_digest)) == SC::INVALID_ARGUMENT);
  // Tensors
  std::vector<float> data(10);
  auto u1 = c->upload("", {16}, PTO_FLOAT32, data.data(), 40);  // 40 bytes for a 64-byte shape
  CHECK(code(u1.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(u1.status.message, Catch::Contains("40 bytes received") && Catch::Contains("64"));
  CHECK(code(c->upload("", {0}, PTO_FLOAT32, data.data(), 0).status) == SC::INVALID_ARGUMENT);
  CHECK(code(c->upload("", {4}, 77, data.data(), 16).status) == SC::INVALID_ARGUMENT);
  CHECK(code(c->alloc("", {1u << 31, 1u << 31}, PTO_FLOAT32).status) == SC::INVALID_ARGUMENT);
  v1::TensorHandle nothing;
  nothing.set_name("nothing");
  std::vector<uint8_t> out;
  CHECK(code(c->download(nothing, &out).status) == SC::NOT_FOUND);
  CHECK(code(c->free(nothing)) == SC::NOT_FOUND);
  auto t = c->alloc("t", {16}, PTO_FLOAT32);
  REQUIRE(t.ok());
  CHECK(code(c->alloc("t", {16}, PTO_FLOAT32).status) == SC::ALREADY_EXISTS);  // name taken
  // Jobs
  v1::SubmitRequest unknown;
  unknown.mutable_callable()->set_name("nope");
  CHECK(code(c->submit(unknown).status) == SC::NOT_FOUND);
  REQUIRE(c->register_chip(VECTOR_CONFIG, "vector").ok());
  v1::SubmitRequest too_many_tags;
  too_many_tags.mutable_callable()->set_name("vector");
  too_many_tags.mutable_args()->add_tags(v1::INPUT);
  CHECK(code(c->submit(too_many_tags).status) == SC::INVALID_ARGUMENT);
  v1::SubmitRequest out_of_bounds;
  out_of_bounds.mutable_callable()->set_name("vector");
  auto* ref = out_of_bounds.mutable_args()->add_tensors();
  ref->mutable_tensor()->set_name("t");
  ref->set_offset_bytes(32);
  ref->add_shape(16);
  auto oob = c->submit(out_of_bounds);
  CHECK(code(oob.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(oob.status.message, Catch::Contains("exceeds tensor 't'"));
  // Names are bounded and free of control characters: no forged log line, no
  // later error past gRPC's metadata limit.
  for (const std::string& name : {std::string("evil\n[error] forged line"), std::string(1 << 20, 'n'),
                                  std::string("bell\a"), std::string("\xC2\x85next-line")}) {
    auto r = c->register_chip(VECTOR_CONFIG, name);
    CHECK(code(r.status) == SC::INVALID_ARGUMENT);
    CHECK_THAT(r.status.message, Catch::Contains("callable name"));
    CHECK(r.status.message.size() < 300);
    CHECK(code(c->alloc(name, {4}, PTO_FLOAT32).status) == SC::INVALID_ARGUMENT);
  }
  CHECK(c->alloc(std::string(256, 'x'), {4}, PTO_FLOAT32).ok());  // at the bound: fine
  auto digits = c->alloc("123", {4}, PTO_FLOAT32);                // a number names a tensor by its id
  CHECK(code(digits.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(digits.status.message, Catch::Contains("only digits"));
  CHECK_FALSE(Catch::Contains("forged line").match(d.log()));
  v1::SubmitRequest long_label;
  long_label.mutable_callable()->set_name("vector");
  long_label.set_label(std::string(257, 'l'));
  auto ll = c->submit(long_label);
  CHECK(code(ll.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(ll.status.message, Catch::Contains("label"));
  // An output_prefix would be ignored (ptod chooses where files go): refused.
  v1::SubmitRequest prefixed;
  prefixed.mutable_callable()->set_name("vector");
  prefixed.mutable_config()->set_output_prefix("/tmp/elsewhere");
  auto pre = c->submit(prefixed);
  CHECK(code(pre.status) == SC::INVALID_ARGUMENT);
  CHECK_THAT(pre.status.message, Catch::Contains("output_prefix"));
  // A job whose arguments do not match the chip's signature (its kernels.toml)
  // is refused at Submit, naming the argument in dtype names and shapes.
  REQUIRE(c->alloc("i", {N}, PTO_INT32).ok());
  REQUIRE(c->alloc("f", {N}, PTO_FLOAT32).ok());
  auto vector_job = [](std::vector<std::string> tensors, int scalars) {
    v1::SubmitRequest r;
    r.mutable_callable()->set_name("vector");
    for (const std::string& n : tensors) r.mutable_args()->add_tensors()->mutable_tensor()->set_name(n);
    for (int i = 0; i < scalars; ++i) r.mutable_args()->add_scalars(N);
    return r;
  };
  auto refused = [&](const v1::SubmitRequest& r, const std::string& says) {
    auto s = c->submit(r);
    INFO(s.status.message);
    CHECK(code(s.status) == SC::INVALID_ARGUMENT);
    CHECK_THAT(s.status.message, Catch::Contains(says));
  };
  refused(vector_job({"f", "f"}, 1), "'vector' takes 3 tensor arguments (a, b, f); the job gives 2");
  refused(vector_job({"f", "i", "f"}, 1),
          "argument 1 ('b') of 'vector' must be float32 [16384]; the job gives int32 [16384]");
  refused(vector_job({"f", "f", "t"}, 1),
          "argument 2 ('f') of 'vector' must be float32 [16384]; the job gives float32 [16]");
  refused(vector_job({"f", "f", "f"}, 3),
          "'vector' takes 1 scalar (or none, for its config's values); the job gives 3");
  CHECK(c->jobs(v1::ListJobsRequest()).value.jobs_size() == 0);  // nothing was queued
  // The tensors were pinned only while Submit looked at them.
  for (const char* name : {"t", "i", "f"}) {
    v1::TensorHandle h;
    h.set_name(name);
    CHECK(c->free(h).ok());
  }
  CHECK(code(c->result(999999).status) == SC::NOT_FOUND);
  CHECK(c->health().value == "SERVING");
  CHECK(d.stop() == 0);
}

TEST_CASE("cancel - a queued job never starts - a running one stops its running task") {
  // One job at a time, so the second one queues.
  const std::string dir = make_temp_dir("ptod-cancel");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nmax_running = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  auto running = c->submit(sleep_job("sleep", 20000));
  REQUIRE(running.ok());
  // Started before the second is submitted: until the daemon takes it from the
  // queue (late under load; seen with ASan) it is itself ahead of the second.
  REQUIRE(eventually([&] { return c->result(running.value.job_id()).value.state() == v1::RUNNING; }));
  auto queued = c->submit(sleep_job("sleep", 1));
  REQUIRE(queued.ok());
  CHECK(queued.value.queue_position() == 0);  // no job queued ahead of it; it waits for the running one
  CHECK(c->result(queued.value.job_id()).value.state() == v1::QUEUED);
  auto cq = c->cancel(queued.value.job_id());
  REQUIRE(cq.ok());
  CHECK(cq.value == v1::CANCELLED);
  REQUIRE(eventually([&] { return c->result(running.value.job_id()).value.tasks_submitted() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its task is on the chip
  const auto t0 = std::chrono::steady_clock::now();
  auto cr = c->cancel(running.value.job_id());
  REQUIRE(cr.ok());
  CHECK(cr.value == v1::CANCELLED);  // how it ended, not RUNNING
  auto r = c->result(running.value.job_id(), 10000);
  const auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO("the running job ended " << ms << " ms after Cancel: " << r.value.ShortDebugString());
  CHECK(r.value.state() == v1::CANCELLED);
  CHECK(r.value.tasks_stopped() == 1);  // the chip child running it was killed and replaced
  CHECK(ms < 1000);
  CHECK(c->result(queued.value.job_id()).value.state() == v1::CANCELLED);
  CHECK(c->result(queued.value.job_id()).value.tasks_submitted() == 0);  // never started
  // The replaced chip serves the next job.
  auto next = c->run(sleep_job("sleep", 1));
  REQUIRE(next.ok());
  CHECK(next.value.state() == v1::SUCCEEDED);
  CHECK(d.stop() == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("metrics are served in the Prometheus text format on loopback") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_CONFIG, "sleep").ok());
  REQUIRE(c->run(sleep_job("sleep", 1)).ok());
  const std::string m = http_get(d.metrics_port(), "/metrics");
  CHECK_THAT(m, Catch::StartsWith("HTTP/1.0 200 OK"));
  CHECK_THAT(m, Catch::Contains("ptod_jobs_total{state=\"succeeded\"} 1"));
  CHECK_THAT(m, Catch::Contains("ptod_tasks_total{outcome=\"succeeded\"} 1"));
  CHECK_THAT(m, Catch::Contains("ptod_task_latency_seconds_count 1"));
  CHECK_THAT(m, Catch::Contains("ptod_mailbox_round_trip_seconds_bucket{le=\"+Inf\"} 1"));
  CHECK_THAT(m, Catch::Contains("ptod_heap_ring_used_bytes{ring=\"0\"}"));
  CHECK_THAT(m, Catch::Contains("ptod_child_restarts_total 0"));
  CHECK_THAT(m, Catch::Contains("ptod_build_info{version=\"" PTO_VERSION "\",revision=\"" PTO_GIT_REVISION "\"} 1"));
  CHECK_THAT(m, Catch::Contains("ptod_jobs_submitted_total 1") && !Catch::Contains("state=\"submitted\""));
  CHECK_THAT(m, Catch::Contains("ptod_arena_size_bytes ") && Catch::Contains("ptod_arena_used_bytes "));
  CHECK_THAT(m, Catch::Contains("ptod_ready_tasks 0") && !Catch::Contains("ptod_queue_depth"));
  CHECK_THAT(m, Catch::Contains("process_cpu_seconds_total ") && Catch::Contains("process_resident_memory_bytes ") &&
                    Catch::Contains("process_open_fds ") && Catch::Contains("process_max_fds ") &&
                    Catch::Contains("process_start_time_seconds "));
  CHECK_THAT(http_get(d.metrics_port(), "/other"), Catch::StartsWith("HTTP/1.0 404"));
  // HEAD: the headers alone; other methods: 405 naming the allowed ones.
  const std::string head = http_request(d.metrics_port(), "HEAD", "/metrics");
  CHECK_THAT(head, Catch::StartsWith("HTTP/1.0 200 OK") && Catch::EndsWith("\r\n\r\n"));
  CHECK_THAT(http_request(d.metrics_port(), "POST", "/metrics"),
             Catch::StartsWith("HTTP/1.0 405") && Catch::Contains("Allow: GET, HEAD"));
  CHECK_THAT(d.log(), Catch::Contains("ptod " PTO_VERSION_STRING " serving on "));
  // Every metric the Grafana dashboard queries is one the daemon exports.
  {
    std::ifstream dash(GRAFANA_DASHBOARD);
    const std::string json((std::istreambuf_iterator<char>(dash)), std::istreambuf_iterator<char>());
    REQUIRE(!json.empty());
    const std::regex name(R"(\b(?:ptod|process)_[a-z_]+)");
    int names = 0;
    for (auto it = std::sregex_iterator(json.begin(), json.end(), name); it != std::sregex_iterator(); ++it, ++names) {
      std::string metric = it->str();
      for (const char* suffix : {"_bucket", "_count", "_sum"})
        if (metric.size() > strlen(suffix) && metric.ends_with(suffix)) metric.resize(metric.size() - strlen(suffix));
      if (metric.starts_with("ptod_peer_")) continue;  // level 4 only (remote_test has them)
      INFO("the dashboard queries " << it->str());
      CHECK_THAT(m, Catch::Contains("# TYPE " + metric + " "));
    }
    CHECK(names > 20);
  }
  // promtool (Debian's prometheus) accepts the exposition.
  if (access("/usr/bin/promtool", X_OK) == 0) {
    const std::string file = d.dir() + "/metrics.txt";
    std::ofstream(file) << m.substr(m.find("\r\n\r\n") + 4);
    Output check = run_command({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file}, 60);
    INFO(check.text);
    CHECK(check.code == 0);
  } else {
    WARN("promtool is not installed: the exposition was not checked with it");
  }
}

// Not under a sanitizer: its runtime needs descriptors of its own (UBSan's
// check of a dynamic type opens a pipe to probe memory), and out of them it
// reports an error where there is none.
#ifndef PTO_SANITIZED
TEST_CASE("the metrics endpoint accepts again after the daemon ran out of descriptors for a moment") {
  DaemonProcess d;
  REQUIRE(d.up());
  const int port = d.metrics_port();
  REQUIRE(port > 0);
  // ptod's descriptors now, and a limit a few above them.
  size_t open = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(d.pid()) + "/fd"))
    ++open;
  rlimit old{}, low{open + 6, 0};
  REQUIRE(prlimit(d.pid(), RLIMIT_NOFILE, nullptr, &old) == 0);
  low.rlim_max = old.rlim_max;
  REQUIRE(prlimit(d.pid(), RLIMIT_NOFILE, &low, nullptr) == 0);
  std::vector<int> conns;
  for (int i = 0; i < 40; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
      conns.push_back(fd);
    else
      ::close(fd);
  }
  CHECK(eventually([&] { return d.log().find("metrics: cannot accept a connection") != std::string::npos; }));
  for (int fd : conns) ::close(fd);
  REQUIRE(prlimit(d.pid(), RLIMIT_NOFILE, &old, nullptr) == 0);
  // Before: the endpoint stopped accepting for good (a scrape connected into the backlog and waited).
  CHECK(eventually([&] { return http_get(port, "/metrics").find("200 OK") != std::string::npos; }, 15000));
  CHECK(connect(d)->version().ok());
}
#endif

TEST_CASE("ptod and ptoctl say their version - ptod --check-config prints the effective configuration or names the fault") {
  Output v = run_command({PTOD_PATH, "--version"}, 30);
  CHECK(v.code == 0);
  CHECK_THAT(v.text, Catch::Contains("ptod " PTO_VERSION_STRING));
  v = run_command({PTOCTL_PATH, "--version"}, 30);
  CHECK(v.code == 0);
  CHECK_THAT(v.text, Catch::Contains("ptoctl " PTO_VERSION_STRING));
  // No daemon there: exit 3 and advice, not raw gRPC text alone.
  v = run_command({PTOCTL_PATH, "--address", "unix:/nonexistent/ptod.sock", "jobs"}, 30);
  CHECK(v.code == 3);
  CHECK_THAT(v.text, Catch::Contains("no daemon answered at unix:/nonexistent/ptod.sock. Is ptod running") &&
                         Catch::Contains("PTOD_ADDRESS") && Catch::Contains("the socket's group"));
  const std::string dir = make_temp_dir("ptod-check");
  std::ofstream(dir + "/good.toml") << "[jobs]\nmax_running = 3\n";
  Output good = run_command({PTOD_PATH, "--check-config", "--config", dir + "/good.toml", "--chips", "2"}, 30);
  INFO(good.text);
  CHECK(good.code == 0);
  CHECK_THAT(good.text, Catch::Contains("max_running = 3") && Catch::Contains("chips = 2"));
  std::ofstream(dir + "/bad.toml") << "[jobs]\nmax_running = 0\n";
  Output bad = run_command({PTOD_PATH, "--check-config", "--config", dir + "/bad.toml"}, 30);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.text, Catch::Contains("[jobs] max_running") && Catch::Contains("(got 0)"));
  // A log file the start could not open: named by the check too (before: the check passed, the start exited 1).
  std::ofstream(dir + "/a-file") << "x";
  std::ofstream(dir + "/log.toml") << "[daemon]\nlog_file = \"" << dir << "/a-file/sub/ptod.log\"\n";
  Output nolog = run_command({PTOD_PATH, "--check-config", "--config", dir + "/log.toml"}, 30);
  CHECK(nolog.code == 1);
  CHECK_THAT(nolog.text, Catch::Contains("[daemon] log_file") && Catch::Contains("is not a directory"));
  Output start = run_command({PTOD_PATH, "--config", dir + "/log.toml", "--state-dir", dir + "/state", "--socket",
                              dir + "/s.sock", "--metrics", "off"},
                             30);
  CHECK(start.code == 1);
  // One the start can create (its directories too) passes.
  std::ofstream(dir + "/log2.toml") << "[daemon]\nlog_file = \"" << dir << "/logs/ptod.log\"\n";
  CHECK(run_command({PTOD_PATH, "--check-config", "--config", dir + "/log2.toml"}, 30).code == 0);
  // A relative one too: under the working directory (before the review's mend: "'rel-logs' is not a directory").
  std::ofstream(dir + "/log3.toml") << "[daemon]\nlog_file = \"rel-logs-" << getpid() << "/ptod.log\"\n";
  Output rel = run_command({PTOD_PATH, "--check-config", "--config", dir + "/log3.toml"}, 30);
  INFO(rel.text);
  CHECK(rel.code == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a config error at startup names the key or value and exits 1") {
  const std::string dir = make_temp_dir("ptod-config");
  auto start = [&](const std::string& toml) {
    { std::ofstream(dir + "/ptod.toml") << toml; }
    return run_command({PTOD_PATH, "--config", dir + "/ptod.toml", "--state-dir", dir + "/state", "--socket",
                        dir + "/s.sock", "--metrics", "off"},
                       30);
  };
  Output a = start("[worker]\nchipz = 2\n");
  CHECK(a.code == 1);
  CHECK_THAT(a.text, Catch::Contains("unknown key 'chipz'"));
  Output b = start("[worker]\nchips = 999\n");
  CHECK(b.code == 1);
  CHECK_THAT(b.text, Catch::Contains("chips") && Catch::Contains("0..64") && Catch::Contains("999"));
  Output c = start("[daemon]\nlog_level = \"loud\"\n");
  CHECK(c.code == 1);
  CHECK_THAT(c.text, Catch::Contains("'loud'"));
  Output e = start("not toml [");
  CHECK(e.code == 1);
  Output f = run_command({PTOD_PATH, "--config", dir + "/missing.toml"}, 30);
  CHECK(f.code == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("placement - [daemon] cpus holds every thread of ptod, [worker] child_cpus every child's - jobs run") {
  const std::vector<int> mine = pto::allowed_cpus();
  REQUIRE(!mine.empty());
  if (mine.size() < 2) WARN("one CPU: placement cannot be told from inheritance here");
  const std::string first = std::to_string(mine.front()), last = std::to_string(mine.back());
  DaemonProcess d({"--cpus", first, "--child-cpus", last});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_noop", "noop").ok());
  v1::SubmitRequest job;
  job.mutable_callable()->set_name("noop");
  job.set_wait_ms(30000);
  for (int i = 0; i < 20; ++i) {  // gRPC's and the fd socket's threads have started
    auto r = c->submit(job);
    REQUIRE(r.ok());
    CHECK(r.value.result().state() == v1::SUCCEEDED);
  }
  const std::vector<std::string> own = thread_cpus(d.pid());
  CHECK(own.size() > 5);
  for (const std::string& t : own) CHECK(t == first);
  const std::vector<pid_t> kids = children_of(d.pid());
  CHECK(kids.size() == 3);  // one chip child, two sub children
  for (pid_t kid : kids) {
    INFO("child " << kid);
    const std::vector<std::string> cpus = thread_cpus(kid);
    CHECK(!cpus.empty());
    for (const std::string& t : cpus) CHECK(t == last);
  }
  CHECK_THAT(d.log(),
             Catch::Contains("ptod runs on CPUs " + first) && Catch::Contains("sub worker(s), on CPUs " + last));
  CHECK(d.stop() == 0);
  // Started with a narrower mask (as by taskset or systemd's CPUAffinity=):
  // ptod keeps it, its children still go where child_cpus says.
  REQUIRE(pto::run_on_cpus({mine.front()}).ok());
  DaemonProcess narrow({"--child-cpus", last});
  REQUIRE(pto::run_on_cpus(mine).ok());
  INFO(narrow.log());
  REQUIRE(narrow.up());
  for (const std::string& t : thread_cpus(narrow.pid())) CHECK(t == first);
  CHECK(children_of(narrow.pid()).size() == 3);
  for (pid_t kid : children_of(narrow.pid()))
    for (const std::string& t : thread_cpus(kid)) CHECK(t == last);
  CHECK(narrow.stop() == 0);
  // Not there: refused at start, named.
  const std::string dir = make_temp_dir("ptod-cpus");
  Output far = run_command({PTOD_PATH, "--state-dir", dir + "/state", "--socket", dir + "/s.sock", "--metrics", "off",
                            "--child-cpus", first + ",1023"},
                           30);
  CHECK(far.code == 1);
  CHECK_THAT(far.text, Catch::Contains("[worker] child_cpus = \"" + first + ",1023\": CPU 1023 not available here"));
  Output bad = run_command({PTOD_PATH, "--state-dir", dir + "/state", "--socket", dir + "/s.sock", "--cpus", "0-"}, 30);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.text, Catch::Contains("--cpus: CPU list \"0-\": '0-' is not a range"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a listener beyond loopback needs TLS and a token - requests without the token are refused") {
  DaemonProcess plain({"--listen", "0.0.0.0:0"});
  CHECK_FALSE(plain.up());
  CHECK(plain.exit_code() == 1);
  CHECK_THAT(plain.log(), Catch::Contains("0.0.0.0:0") && Catch::Contains("TLS"));
  DaemonProcess lookalike({"--listen", "127.evil.example:0"});  // a name, not a loopback address
  CHECK_FALSE(lookalike.up());
  CHECK(lookalike.exit_code() == 1);

  const std::string dir = make_temp_dir("ptod-tls");
  Output gen = run_command({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                            dir + "/key.pem", "-out", dir + "/cert.pem", "-days", "1", "-subj", "/CN=localhost",
                            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"},
                           60);
  REQUIRE(gen.code == 0);
  write_secret(dir + "/token", "0123456789abcdef-test-token\n");
  DaemonProcess tls({"--listen", "0.0.0.0:0", "--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem",
                     "--token-file", dir + "/token"});
  REQUIRE(tls.up());
  pto::client::ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(tls.grpc_port());  // an IP: no DNS resolver (c-ares leaks under LSan)
  o.tls = true;
  o.tls_ca = dir + "/cert.pem";
  o.timeout = std::chrono::seconds(10);
  Client anonymous(o);
  auto v = anonymous.version();
  CHECK(v.status.code == static_cast<int>(grpc::StatusCode::UNAUTHENTICATED));
  o.token = "0123456789abcdef-test-token";
  Client authed(o);
  auto v2 = authed.version();
  INFO(v2.status.message);
  CHECK(v2.ok());
  CHECK(v2.value.protocol() == "pto.v1");
  // The unix socket needs no token.
  CHECK(connect(tls)->version().ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("an L3 orchestration registered from a library runs chip and sub tasks on the daemon's Worker") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(VECTOR_CONFIG, "vector").ok());
  REQUIRE(c->register_import(NATIVE_SUBS, "pto_test_add_one", "add_one").ok());
  auto l3 = c->register_import(L3_ORCHESTRATION, "pto_test_l3_vector_plus_one", "l3", true);
  INFO(l3.status.message);
  REQUIRE(l3.ok());
  std::vector<float> a(N), b(N);
  for (uint32_t i = 0; i < N; ++i) a[i] = 0.001f * float(i % 113), b[i] = -0.5f + 0.002f * float(i % 71);
  auto ta = c->upload("a", {N}, PTO_FLOAT32, a.data(), N * 4);
  auto tb = c->upload("b", {N}, PTO_FLOAT32, b.data(), N * 4);
  auto tf = c->alloc("f", {N}, PTO_FLOAT32);
  REQUIRE((ta.ok() && tb.ok() && tf.ok()));
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  Output listed = run_command({PTOCTL_PATH, "callables"}, 30, env);
  CHECK_THAT(listed.text, Catch::Contains("ABI_ORCHESTRATION") && Catch::Contains("l3"));
  Output sub = run_command({PTOCTL_PATH, "submit", "l3", "a", "b", "f:out", "-s", std::to_string(N)}, 60, env);
  INFO(sub.text << d.log());
  REQUIRE(sub.code == 0);
  CHECK_THAT(sub.text, Catch::Contains("SUCCEEDED: 2 tasks"));
  Output dl = run_command({PTOCTL_PATH, "download", "f", "-o", d.dir() + "/f.npy"}, 60, env);
  REQUIRE(dl.code == 0);
  std::vector<uint8_t> got;
  REQUIRE(c->download(tf.value.handle(), &got).ok());
  for (uint32_t i = 0; i < N; i += 3) {
    float f;
    std::memcpy(&f, got.data() + 4 * i, 4);
    const float s = a[i] + b[i];
    REQUIRE(f == Approx((s + 1) * (s + 2) + 1).epsilon(1e-5));
  }
}

TEST_CASE("an oversized message is refused with RESOURCE_EXHAUSTED and the daemon keeps serving") {
  const std::string dir = make_temp_dir("ptod-small");
  std::ofstream(dir + "/ptod.toml") << "[server]\nmax_message_bytes = 65536\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  pto::client::ClientOptions o;
  o.address = d.address();
  o.fd_transfers = false;  // gRPC messages are what is limited (the fd socket carries no tensor bytes)
  auto c = std::make_unique<Client>(o);
  std::vector<uint8_t> big(1 << 20);
  auto r = c->upload("", {1u << 18}, PTO_FLOAT32, big.data(), big.size(), 256 << 10);  // 256 KiB chunks
  CHECK(r.status.code == static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  CHECK(c->health().value == "SERVING");
  CHECK(c->upload("", {1u << 18}, PTO_FLOAT32, big.data(), big.size(), 32 << 10).ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("systemd notification - READY after start - WATCHDOG when asked - STOPPING on drain") {
  const std::string dir = make_temp_dir("ptod-notify");
  const std::string path = dir + "/notify.sock";
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  struct timeval tv {
    0, 200000
  };
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string seen;
  auto drain = [&](int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    char buf[1024];
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n > 0) seen.append(buf, static_cast<size_t>(n)).append("\n");
    }
  };
  {
    DaemonProcess d({}, 1, 1, {"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=200000"});
    REQUIRE(d.up());
    drain(500);
    CHECK_THAT(seen, Catch::Contains("READY=1") && Catch::Contains("STATUS=serving on unix:"));
    CHECK_THAT(seen, Catch::Contains("WATCHDOG=1"));
    CHECK(seen.find("STOPPING=1") == std::string::npos);
    kill(d.pid(), SIGTERM);
    drain(300);
    CHECK(d.stop(0) == 0);
  }
  drain(100);  // what came after those 300 ms waits in the socket
  CHECK_THAT(seen, Catch::Contains("STOPPING=1"));
  close(fd);
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "server reflection lists the pto.v1 services and serves the health service's descriptors (what grpcurl uses)") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto channel = grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok = false;
  auto step = [&](void* t) {
    REQUIRE(cq.Next(&tag, &ok));
    REQUIRE(tag == t);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  REQUIRE(step(reinterpret_cast<void*>(1)));
  // One request on the stream and its reply, both as raw protobuf bytes.
  auto exchange = [&](const std::string& request, intptr_t t) {
    grpc::Slice slice(request.data(), request.size());
    grpc::ByteBuffer out(&slice, 1);
    call->Write(out, reinterpret_cast<void*>(t));
    REQUIRE(step(reinterpret_cast<void*>(t)));
    grpc::ByteBuffer in;
    call->Read(&in, reinterpret_cast<void*>(t + 1));
    REQUIRE(step(reinterpret_cast<void*>(t + 1)));
    std::vector<grpc::Slice> slices;
    REQUIRE(in.Dump(&slices).ok());
    std::string reply;
    for (const auto& s2 : slices) reply.append(reinterpret_cast<const char*>(s2.begin()), s2.size());
    return reply;
  };
  // ServerReflectionRequest { list_services = "" }: field 7, length-delimited, empty.
  const std::string reply = exchange(std::string{0x3A, 0x00}, 2);
  for (const char* svc : {"pto.v1.Registry", "pto.v1.Tensors", "pto.v1.Jobs", "pto.v1.Node", "grpc.health.v1.Health"})
    CHECK(reply.find(svc) != std::string::npos);
  // ServerReflectionRequest { file_containing_symbol = "grpc.health.v1.Health" } (field 4): the
  // health service's descriptors are served, so `grpcurl ... grpc.health.v1.Health/Check` works.
  const std::string symbol = "grpc.health.v1.Health";
  const std::string health = exchange(std::string{0x22, static_cast<char>(symbol.size())} + symbol, 5);
  CHECK(health.find("grpc/health/v1/health.proto") != std::string::npos);
  CHECK(health.find("HealthCheckRequest") != std::string::npos);
  ctx.TryCancel();
  call->Finish(&grpc_status_holder, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {}
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {}
}

TEST_CASE("mutual TLS - a client without a certificate the daemon's CA signed is refused") {
  const std::string dir = make_temp_dir("ptod-mtls");
  REQUIRE(make_test_pki(dir));  // a CA, a server certificate and a client certificate signed by it
  write_secret(dir + "/token", "0123456789abcdef-mtls-token\n");
  std::ofstream(dir + "/ptod.toml") << "[server]\nlisten = [\"0.0.0.0:0\"]\ntls_cert = \"" << dir
                                    << "/server.pem\"\ntls_key = \"" << dir << "/server.key\"\ntls_client_ca = \""
                                    << dir << "/ca.pem\"\ntoken_file = \"" << dir << "/token\"\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  INFO(d.log());
  REQUIRE(d.up());
  pto::client::ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(d.grpc_port());
  o.tls = true;
  o.tls_ca = dir + "/ca.pem";
  o.token = "0123456789abcdef-mtls-token";
  o.timeout = std::chrono::seconds(10);
  Client no_cert(o);
  CHECK_FALSE(no_cert.version().ok());
  o.tls_cert = dir + "/client.pem";
  o.tls_key = dir + "/client.key";
  Client with_cert(o);
  auto v = with_cert.version();
  INFO(v.status.message);
  CHECK(v.ok());
  // ptoctl with the same material.
  Output out = run_command({PTOCTL_PATH, "--address", o.address, "--tls", "--tls-ca", o.tls_ca, "--tls-cert",
                            o.tls_cert, "--tls-key", o.tls_key, "--token-file", dir + "/token", "version"},
                           30);
  CHECK(out.code == 0);
  CHECK_THAT(out.text, Catch::Contains("pto.v1"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("mutual TLS - a client certificate's principal is its subject's common name, not its subjectAltName") {
  const std::string dir = make_temp_dir("ptod-mtls-cn");
  // CN=alice, whose certificate names her laptop: the principal is alice (before: "alice-laptop.example", gRPC's
  // peer identity being the subjectAltName list when there is one, so [server] admins = ["alice"] did not apply).
  REQUIRE(make_test_pki(dir, "/O=Example/CN=alice", "DNS:alice-laptop.example"));
  std::ofstream(dir + "/ptod.toml") << "[server]\nlisten = [\"127.0.0.1:0\"]\ntls_cert = \"" << dir
                                    << "/server.pem\"\ntls_key = \"" << dir << "/server.key\"\ntls_client_ca = \""
                                    << dir << "/ca.pem\"\nadmins = [\"alice\"]\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  INFO(d.log());
  REQUIRE(d.up());
  pto::client::ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(d.grpc_port());
  o.tls = true;
  o.tls_ca = dir + "/ca.pem";
  o.tls_cert = dir + "/client.pem";
  o.tls_key = dir + "/client.key";
  o.timeout = std::chrono::seconds(10);
  Client alice(o);
  auto t = alice.alloc("mine", {4}, PTO_FLOAT32);
  INFO(t.status.message);
  REQUIRE(t.ok());
  CHECK(t.value.owner() == "alice");
  // Admin by [server] admins: alice sees a tensor the unix socket's user made.
  auto other = connect(d);
  REQUIRE(other->alloc("theirs", {4}, PTO_FLOAT32).ok());
  auto all = alice.tensors();
  REQUIRE(all.ok());
  CHECK(all.value.tensors_size() == 2);

  // A certificate whose subject has no common name names no principal: refused (not "anonymous").
  const std::string nocn = dir + "/nocn";
  std::filesystem::create_directory(nocn);
  REQUIRE(make_test_pki(nocn, "/O=Example", "DNS:somewhere.example"));
  std::ofstream(dir + "/ptod2.toml") << "[server]\nlisten = [\"127.0.0.1:0\"]\ntls_cert = \"" << nocn
                                     << "/server.pem\"\ntls_key = \"" << nocn << "/server.key\"\ntls_client_ca = \""
                                     << nocn << "/ca.pem\"\n";
  DaemonProcess d2({"--config", dir + "/ptod2.toml"});
  INFO(d2.log());
  REQUIRE(d2.up());
  o.address = "127.0.0.1:" + std::to_string(d2.grpc_port());
  o.tls_ca = nocn + "/ca.pem";
  o.tls_cert = nocn + "/client.pem";
  o.tls_key = nocn + "/client.key";
  Client nobody(o);
  auto refused = nobody.alloc("x", {4}, PTO_FLOAT32);
  CHECK(refused.status.code == static_cast<int>(grpc::StatusCode::UNAUTHENTICATED));
  CHECK_THAT(refused.status.message, Catch::Contains("no common name"));
  std::filesystem::remove_all(dir);
}

namespace {

// The vector example's config with absolute library paths and `extra` added
// to its [runtime] section, written as dir/kernels.toml.
std::string vector_config_with(const std::string& dir, const std::string& extra) {
  const std::filesystem::path src = VECTOR_CONFIG;
  std::ifstream in(src);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t at = 0; (at = text.find("library = \"", at)) != std::string::npos;) {
    at += 11;
    text.insert(at, src.parent_path().string() + "/");
  }
  text.replace(text.find("[runtime]"), 9, "[runtime]\n" + extra);
  const std::string path = dir + "/kernels.toml";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE(
    "rejected registrations leave no files - [runtime] is part of a bundle's identity - advice reaches ptoctl whole") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  const std::string tmp = make_temp_dir("pto-advice");
  const std::string small_window = vector_config_with(tmp, "task_window = 4");
  auto bundles = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(d.dir() + "/state/callables"))
      n += e.path().filename().string().rfind("bundle-", 0) == 0;
    return n;
  };
  // Ten rejected bundles (each names a library that is not in the bundle).
  for (int i = 0; i < 10; ++i) {
    v1::RegisterRequest outside;
    outside.mutable_chip()->set_config_toml(
        "[orchestration]\nlibrary = \"/usr/lib/x86_64-linux-gnu/libc.so.6\"\n[[kernels]]\nfunc_id = 0\nlibrary = "
        "\"k.so\"\ncore_type = \"aiv\"\n[[args]]\nname = \"n\"\nrole = \"scalar\"\nvalue = " +
        std::to_string(i) + "\n");
    (*outside.mutable_chip()->mutable_libraries())["k.so"] = std::string(1 << 20, 'k');
    CHECK_FALSE(c->register_callable(outside).ok());
  }
  CHECK(bundles() == 0);
  auto v = c->register_chip(VECTOR_CONFIG, "v");
  REQUIRE(v.ok());
  CHECK(bundles() == 1);
  // Another callable (only [runtime] differs) under a taken name: refused, nothing left.
  auto clash = c->register_chip(small_window, "v");
  CHECK_FALSE(clash.ok());
  CHECK_THAT(clash.status.message, Catch::Contains("taken"));
  CHECK(bundles() == 1);
  // Under its own name it is a second callable, its settings kept.
  auto small = c->register_chip(small_window, "v4");
  REQUIRE(small.ok());
  CHECK_FALSE(small.value.existed());
  CHECK(small.value.identity().digest() != v.value.identity().digest());
  CHECK(bundles() == 2);
  // Its job fails for the small window; the advice is whole in ptoctl's output and in --json.
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  Output r = run_command({PTOCTL_PATH, "run-example", small_window}, 120, env);
  INFO(r.text);
  CHECK(r.code != 0);
  CHECK_THAT(r.text, Catch::Contains("Solution: PTO2_RING_TASK_WINDOW >= 8") && Catch::Contains("or split the scope."));
  Output j = run_command({PTOCTL_PATH, "--json", "result", "1"}, 30, env);
  INFO(j.text);
  // (JSON writes '>' as \u003e.)
  CHECK_THAT(j.text,
             Catch::Contains("Solution: PTO2_RING_TASK_WINDOW \\u003e= 8") && Catch::Contains("or split the scope."));
  std::filesystem::remove_all(tmp);
  CHECK(d.stop() == 0);
}
