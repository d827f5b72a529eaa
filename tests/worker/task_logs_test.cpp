// What a child's tasks print (docs/worker.md "Logs"): a task of a run with a
// log file writes into that file, and only its own lines. A child keeps its
// streams on its capture between back-to-back captured tasks and puts them
// back before it parks or runs an uncaptured task; these tests hold the child
// hot (it spins 100 ms for its next request) so that the tasks meet it so.
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "worker_support.h"

using namespace pto;
using namespace pto_test;

namespace {

// Prints its tag to both streams; with scalars[1] set it also leaves a
// thread behind that prints "stray <tag>" 5 ms after the task has ended.
int say(const TaskArgsView& a, std::string&) {
  const auto tag = static_cast<unsigned long long>(a.scalars[0]);
  std::printf("say %llu to stdout\n", tag);
  std::fprintf(stderr, "say %llu on stderr\n", tag);
  if (a.scalar_count > 1 && a.scalars[1])
    std::thread([tag] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::fprintf(stderr, "stray %llu\n", tag);
    }).detach();
  return 0;
}

constexpr int kRuns = 40;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Where the process's fd 1 points (a memfd reads "/memfd:<name> (deleted)").
std::string stdout_of(int pid) {
  char buf[PATH_MAX] = {};
  const std::string link = "/proc/" + std::to_string(pid) + "/fd/1";
  const ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "(readlink " + link + ": " + std::strerror(errno) + ")";
}

}  // namespace

TEST_CASE(
    "back-to-back captured tasks on a hot child write only their own logs - what comes between tasks and an "
    "uncaptured task's output reach the child's own stderr") {
  std::string dir = (std::filesystem::temp_directory_path() / "pto-task-logs-XXXXXX").string();
  REQUIRE(mkdtemp(dir.data()));
  // The child's stderr is a file of ours: it inherits fd 2 when it is forked.
  const int saved_err = dup(2);
  const int err_file = open((dir + "/stderr").c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE((saved_err >= 0 && err_file >= 0));
  REQUIRE(dup2(err_file, 2) == 2);
  {
    Worker w({.level = 3, .num_sub_workers = 1, .spin_us = 100000});
    const CallableHandle h = w.register_callable(NativeCallable::function("say", say));
    const Status up = w.init();
    dup2(saved_err, 2);  // ours again; the child keeps the file
    REQUIRE(up.ok());
    auto submit = [&](uint64_t tag, bool stray, const std::string& log) {
      RunOptions o;
      o.log_file = log;
      return w.submit_function(
          [=](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
            TaskArgs a;
            a.add_scalar(tag).add_scalar(stray ? 1 : 0);
            return orch.submit_sub(h, a).ok() ? 0 : 1;
          },
          {}, {}, nullptr, o);
    };
    std::vector<RunHandle> runs;
    for (int i = 0; i < kRuns; ++i)
      runs.push_back(submit(uint64_t(i), i == kRuns - 1, dir + "/run-" + std::to_string(i) + ".log"));
    for (RunHandle& r : runs) {
      REQUIRE(r.wait(std::chrono::seconds(30)));
      REQUIRE(r.result().ok());
    }
    // Hot after a captured task: its streams are still the capture's.
    const std::vector<ChildInfo> children = w.children();
    const ChildInfo* c = child(children, ChildKind::SUB, 0);
    REQUIRE(c);
    CHECK_THAT(stdout_of(c->pid), Catch::Contains("memfd:pto-task-output"));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the last task's thread prints "stray"
    // An uncaptured task: the child's own streams, with the stray line first.
    RunHandle plain = submit(99, false, "");
    REQUIRE(plain.wait(std::chrono::seconds(30)));
    REQUIRE(plain.result().ok());
    CHECK_THAT(stdout_of(c->pid), !Catch::Contains("memfd:"));
    REQUIRE(w.close().ok());
  }
  ::close(saved_err);
  ::close(err_file);
  for (int i = 0; i < kRuns; ++i) {
    const std::string log = slurp(dir + "/run-" + std::to_string(i) + ".log");
    INFO("run " << i << "'s log: " << log);
    CHECK(log == "say " + std::to_string(i) + " to stdout\nsay " + std::to_string(i) + " on stderr\n");
  }
  const std::string err = slurp(dir + "/stderr");
  INFO("the child's stderr: " << err);
  const auto stray = err.find("stray 39"), plain = err.find("say 99 on stderr");
  CHECK(stray != std::string::npos);
  CHECK(plain != std::string::npos);
  CHECK(stray < plain);
  CHECK(err.find("say 0 ") == std::string::npos);
  std::filesystem::remove_all(dir);
}
