// Progress that shows the chip's work (docs/daemon.md "Jobs"): the L2
// runtime's task counts reach Watch while a chip job runs, a queued job says
// how many start before it, and Ctrl-C on ptoctl leaves the job running (and
// says how to follow or cancel it) or cancels it with --cancel-on-interrupt.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon_client.h"
#include "daemon_process.h"
#include "eventually.h"
#include "pto/client.h"
#include "pto/v1/ptod.grpc.pb.h"

using namespace pto_test;
namespace v1 = pto::v1;

namespace {

// `count` chip tasks of `ms` each on the chip's two AIV cores.
v1::SubmitRequest many(uint64_t ms, uint64_t count) {
  v1::SubmitRequest r;
  r.mutable_callable()->set_name("many");
  r.mutable_args()->add_scalars(ms);
  r.mutable_args()->add_scalars(count);
  return r;
}

// A command started in the background, its stdout and stderr in a pipe.
struct Background {
  pid_t pid = -1;
  int out = -1;
  Background(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    out = spawn_command(argv, env, &pid);
    REQUIRE(out >= 0);
  }
  // Waits (at most 30 s) for it to end: its exit status (128 + signal), and its output.
  int finish(std::string* text) {
    int status = 0;
    for (int i = 0; i < 3000 && waitpid(pid, &status, WNOHANG) != pid; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (kill(pid, 0) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(out, buf, sizeof buf)) > 0) text->append(buf, static_cast<size_t>(n));
    close(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

bool running(pto::client::Client& c, uint64_t id) {
  auto r = c.result(id);
  return r.ok() && r.value.state() == v1::RUNNING;
}

}  // namespace

TEST_CASE("a chip job's own tasks show in its progress while it runs, and in its result") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_MANY_CONFIG, "many").ok());
  std::vector<v1::JobEvent> events;
  auto r = c->run(many(25, 40), [&](const v1::JobEvent& e) { events.push_back(e); });
  REQUIRE(r.ok());
  REQUIRE(r.value.state() == v1::SUCCEEDED);
  CHECK(r.value.chip_tasks_submitted() == 40);
  CHECK(r.value.chip_tasks_completed() == 40);
  bool partway = false;
  for (const auto& e : events)
    partway |= e.state() == v1::RUNNING && e.chip_tasks_done() > 0 && e.chip_tasks_done() < 40 &&
               e.chip_tasks_total() >= e.chip_tasks_done();
  INFO(events.size() << " events");
  CHECK(partway);
  REQUIRE(!events.empty());
  CHECK(events.back().chip_tasks_done() == 40);
  CHECK(events.back().chip_tasks_total() == 40);
}

TEST_CASE("a queued job's events say how many jobs start before it") {
  const std::string dir = make_temp_dir("ptod-queue");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nmax_running = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_MANY_CONFIG, "many").ok());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    auto s = c->submit(many(50, 20));
    REQUIRE(s.ok());
    ids.push_back(s.value.job_id());
  }
  // Job 0 started (one run at a time): the count is then of job 1 alone.
  // (Looked at before job 0's run thread took it, job 2 reads 2.)
  REQUIRE(eventually([&] { return running(*c, ids[0]); }));
  uint32_t first_position = 99;
  auto w = c->watch(ids[2], [&](const v1::JobEvent& e) {
    if (first_position == 99 && e.state() == v1::QUEUED) first_position = e.queue_position();
  });
  REQUIRE(w.ok());
  CHECK(first_position == 1);  // job 2 was queued behind job 1 (job 0 running)
  std::filesystem::remove_all(dir);
}

TEST_CASE("a Submit's queue position counts the jobs that start before it - a HIGH job goes ahead of LOW ones") {
  const std::string dir = make_temp_dir("ptod-queue");
  std::ofstream(dir + "/ptod.toml") << "[jobs]\nmax_running = 1\n";
  DaemonProcess d({"--config", dir + "/ptod.toml"});
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_MANY_CONFIG, "many").ok());
  auto first = c->submit(many(50, 100));  // 5 s: the others stay queued behind it
  REQUIRE(first.ok());
  REQUIRE(eventually([&] { return running(*c, first.value.job_id()); }));
  auto submit = [&](v1::Priority p) {
    v1::SubmitRequest r = many(1, 1);
    r.set_priority(p);
    auto s = c->submit(r);
    REQUIRE(s.ok());
    return s.value;
  };
  // What the reply says is what Watch says at once (its first event).
  auto stub = v1::Jobs::NewStub(grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  auto watched_position = [&](uint64_t id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::WatchRequest wr;
    wr.set_job_id(id);
    auto r = stub->Watch(&ctx, wr);
    v1::JobEvent e;
    const bool got = r->Read(&e);
    ctx.TryCancel();
    (void)r->Finish();
    return got && e.state() == v1::QUEUED ? e.queue_position() : 99u;
  };
  std::vector<std::pair<v1::Priority, uint32_t>> order = {{v1::PRIORITY_LOW, 0},    {v1::PRIORITY_LOW, 1},
                                                          {v1::PRIORITY_LOW, 2},    {v1::PRIORITY_HIGH, 0},
                                                          {v1::PRIORITY_NORMAL, 1}, {v1::PRIORITY_LOW, 5}};
  for (size_t i = 0; i < order.size(); ++i) {
    INFO("job " << i << ", " << v1::Priority_Name(order[i].first));
    auto s = submit(order[i].first);
    CHECK(s.queue_position() == order[i].second);  // the HIGH job's reply said 3
    if (i == 3) CHECK(watched_position(s.job_id()) == 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("Ctrl-C on ptoctl submit: the job goes on and ptoctl says how to follow it - or it is cancelled") {
  DaemonProcess d;
  REQUIRE(d.up());
  auto c = connect(d);
  REQUIRE(c->register_chip(SLEEP_MANY_CONFIG, "many").ok());
  const std::vector<std::string> env = {"PTOD_ADDRESS=" + d.address()};
  for (bool cancel : {false, true}) {
    std::vector<std::string> argv = {PTOCTL_PATH, "submit", "many", "-s", "50", "-s", "40"};
    if (cancel) argv.push_back("--cancel-on-interrupt");
    Background p(argv, env);
    // The job the command submitted: the newest one, once it runs.
    uint64_t id = 0;
    CHECK(eventually(
        [&] {
          auto l = c->jobs(1);
          if (!l.ok() || l.value.jobs_size() == 0) return false;
          id = l.value.jobs(0).job_id();
          return running(*c, id);
        },
        20000));
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // ptoctl follows it by now (the job takes 2 s)
    kill(p.pid, SIGINT);
    std::string text;
    const int rc = p.finish(&text);
    INFO(text);
    CHECK(rc == 130);
    auto end = c->result(id, 30000);
    REQUIRE(end.ok());
    if (cancel) {
      CHECK_THAT(text, Catch::Contains("job " + std::to_string(id) + " cancelled"));
      CHECK(end.value.state() == v1::CANCELLED);
    } else {
      CHECK_THAT(text, Catch::Contains("job " + std::to_string(id) + " goes on in the daemon: 'ptoctl watch " +
                                       std::to_string(id) + "' follows it, 'ptoctl cancel " + std::to_string(id)));
      CHECK(end.value.state() == v1::SUCCEEDED);
    }
  }
}
