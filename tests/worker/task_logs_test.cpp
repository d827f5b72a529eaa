// What a child's tasks print (docs/worker.md "Logs"): a task of a run with a
// log file writes into that file, and only its own lines. A child keeps its
// streams on its capture between back-to-back captured tasks and puts them
// back before it parks or runs an uncaptured task, and after a task that
// pointed them elsewhere; these tests hold the child hot (it spins 100 ms for
// its next request) so that the tasks meet it so.
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

// Prints its tag to both streams. scalars[1]: 1 leaves a thread behind that
// prints "stray <tag>" 5 ms after the task has ended; 2 then points the
// task's stdout at /dev/null (a task that redirects its own streams); 3
// then moves its stdout's offset past 1 GiB (what a child's capture reaches
// after 1 GiB of output, without writing it).
int say(const TaskArgsView& a, std::string&) {
  const auto tag = static_cast<unsigned long long>(a.scalars[0]);
  const uint64_t what = a.scalar_count > 1 ? a.scalars[1] : 0;
  std::printf("say %llu to stdout\n", tag);
  std::fprintf(stderr, "say %llu on stderr\n", tag);
  if (what == 1)
    std::thread([tag] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::fprintf(stderr, "stray %llu\n", tag);
    }).detach();
  if (what == 3) {
    std::fflush(stdout);
    std::fflush(stderr);
    (void)lseek(1, (off_t(1) << 30) + 1, SEEK_SET);
  }
  if (what == 2) {
    std::fflush(stdout);
    const int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    dup2(null, 1);
    close(null);
  }
  return 0;
}

// A run of one `say` task (scalars tag, what) whose log file is `log`.
RunHandle submit_say(Worker& w, CallableHandle h, uint64_t tag, uint64_t what, const std::string& log) {
  RunOptions o;
  o.log_file = log;
  return w.submit_function(
      [=](Orchestrator& orch, const TaskArgsView&, const CallConfig&) {
        TaskArgs a;
        a.add_scalar(tag).add_scalar(what);
        return orch.submit_sub(h, a).ok() ? 0 : 1;
      },
      {}, {}, nullptr, o);
}

constexpr int kRuns = 40;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The offset of the process's fd 1 (/proc/<pid>/fdinfo/1), -1 if unknown.
long long stdout_pos(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/fdinfo/1");
  std::string key;
  long long pos = -1;
  while (f >> key)
    if (key == "pos:" && (f >> pos)) break;
  return pos;
}

// Where the process's fd 1 points (a memfd reads "/memfd:<name> (deleted)").
std::string stdout_of(int pid) {
  char buf[PATH_MAX] = {};
  const std::string link = "/proc/" + std::to_string(pid) + "/fd/1";
  const ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "(readlink " + link + ": " + std::strerror(errno) + ")";
}

// This process's fd 2 pointed at a file while the Worker forks its child
// (which keeps it), and back on every way out of the test.
struct StderrToFile {
  explicit StderrToFile(const std::string& path)
      : saved(dup(2)), file(open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600)) {
    ok = saved >= 0 && file >= 0 && dup2(file, 2) == 2;
  }
  void restore() {
    if (saved >= 0) dup2(saved, 2);
  }
  ~StderrToFile() {
    restore();
    for (int fd : {saved, file})
      if (fd >= 0) close(fd);
  }
  int saved, file;
  bool ok = false;
};

struct TempDir {
  TempDir() : path((std::filesystem::temp_directory_path() / "pto-task-logs-XXXXXX").string()) {
    if (!mkdtemp(path.data())) path.clear();
  }
  ~TempDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
  std::string path;
};

}  // namespace

TEST_CASE(
    "back-to-back captured tasks on a hot child write only their own logs - what comes between tasks and an "
    "uncaptured task's output reach the child's own stderr - a task that moves its stdout takes no later "
    "task's output") {
  TempDir tmp;
  REQUIRE(!tmp.path.empty());
  const std::string dir = tmp.path;
  auto log_of = [&](int i) { return dir + "/run-" + std::to_string(i) + ".log"; };
  {
    StderrToFile err(dir + "/stderr");
    REQUIRE(err.ok);
    // One run at a time: the tasks reach the child in submission order.
    Worker w({.level = 3, .num_sub_workers = 1, .spin_us = 100000, .max_concurrent_runs = 1});
    const CallableHandle h = w.register_callable(NativeCallable::function("say", say));
    const Status up = w.init();
    err.restore();  // ours again; the child keeps the file
    REQUIRE(up.ok());
    auto submit = [&](uint64_t tag, uint64_t what, const std::string& log) { return submit_say(w, h, tag, what, log); };
    std::vector<RunHandle> runs;
    for (int i = 0; i < kRuns; ++i) runs.push_back(submit(uint64_t(i), i == kRuns - 1 ? 1 : 0, log_of(i)));
    for (RunHandle& r : runs) {
      REQUIRE(r.wait(std::chrono::seconds(30)));
      REQUIRE(r.result().ok());
    }
    const auto ended = std::chrono::steady_clock::now();
    // Hot after a captured task: its streams are still the capture's (if
    // this thread looks within the child's 100 ms of spinning).
    const std::vector<ChildInfo> children = w.children();
    const ChildInfo* c = child(children, ChildKind::SUB, 0);
    REQUIRE(c);
    const std::string hot = stdout_of(c->pid);
    if (std::chrono::steady_clock::now() - ended < std::chrono::milliseconds(60))
      CHECK_THAT(hot, Catch::Contains("memfd:pto-task-output"));
    else
      WARN("looked too late to see the hot child's streams: " << hot);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the last task's thread prints "stray"
    // An uncaptured task: the child's own streams, with the stray line first.
    RunHandle plain = submit(99, 0, "");
    REQUIRE(plain.wait(std::chrono::seconds(30)));
    REQUIRE(plain.result().ok());
    CHECK_THAT(stdout_of(c->pid), !Catch::Contains("memfd:"));
    // A captured task that points its stdout at /dev/null, then one more
    // right behind it: the second one's stdout is its log again.
    RunHandle moves = submit(100, 2, log_of(100));
    RunHandle after = submit(101, 0, log_of(101));
    REQUIRE((moves.wait(std::chrono::seconds(30)) && after.wait(std::chrono::seconds(30))));
    REQUIRE((moves.result().ok() && after.result().ok()));
    REQUIRE(w.close().ok());
  }
  for (int i = 0; i < kRuns; ++i) {
    const std::string log = slurp(log_of(i));
    INFO("run " << i << "'s log: " << log);
    CHECK(log == "say " + std::to_string(i) + " to stdout\nsay " + std::to_string(i) + " on stderr\n");
  }
  CHECK(slurp(log_of(100)) == "say 100 to stdout\nsay 100 on stderr\n");
  CHECK(slurp(log_of(101)) == "say 101 to stdout\nsay 101 on stderr\n");
  const std::string err = slurp(dir + "/stderr");
  INFO("the child's stderr: " << err);
  const auto stray = err.find("stray 39"), plain = err.find("say 99 on stderr");
  CHECK(stray != std::string::npos);
  CHECK(plain != std::string::npos);
  CHECK(stray < plain);
  CHECK(err.find("say 0 ") == std::string::npos);
}

TEST_CASE("a hot child's capture starts again from 0 once its offset passes 1 GiB - the next task's log is its own") {
  TempDir tmp;
  REQUIRE(!tmp.path.empty());
  const std::string dir = tmp.path;
  Worker w({.level = 3, .num_sub_workers = 1, .spin_us = 100000, .max_concurrent_runs = 1});
  const CallableHandle h = w.register_callable(NativeCallable::function("say", say));
  REQUIRE(w.init().ok());
  auto submit = [&](uint64_t tag, uint64_t what, const std::string& log) { return submit_say(w, h, tag, what, log); };
  RunHandle far = submit(1, 3, dir + "/far.log");
  RunHandle next = submit(2, 0, dir + "/next.log");  // queued behind it: reaches the child hot
  REQUIRE((far.wait(std::chrono::seconds(30)) && next.wait(std::chrono::seconds(30))));
  REQUIRE((far.result().ok() && next.result().ok()));
  const std::vector<ChildInfo> children = w.children();
  const ChildInfo* c = child(children, ChildKind::SUB, 0);
  REQUIRE(c);
  // Back at the start: without the rewind a hot child's offset would be past
  // 1 GiB (a child that parked in between started again from 0 anyway).
  const long long pos = stdout_pos(c->pid);
  CHECK(pos >= 0);
  CHECK(pos < 4096);
  REQUIRE(w.close().ok());
  CHECK(slurp(dir + "/next.log") == "say 2 to stdout\nsay 2 on stderr\n");
  // The far task's log: its lines, then the hole it skipped as zeros, up to the cap.
  const std::string far_log = slurp(dir + "/far.log");
  CHECK(far_log.rfind("say 1 to stdout\nsay 1 on stderr\n", 0) == 0);
  CHECK(far_log.size() <= (uint64_t(64) << 20) + 4096);
}

TEST_CASE("a run's result says whether its tasks wrote to its log - a silent run's log was never created") {
  TempDir tmp;
  REQUIRE(!tmp.path.empty());
  const std::string dir = tmp.path;
  Worker w({.level = 3, .num_sub_workers = 1, .max_concurrent_runs = 1});
  const CallableHandle say_h = w.register_callable(NativeCallable::function("say", say));
  const CallableHandle quiet_h =
      w.register_callable(NativeCallable::function("quiet", [](const TaskArgsView&, std::string&) { return 0; }));
  REQUIRE(w.init().ok());
  RunHandle loud = submit_say(w, say_h, 1, 0, dir + "/loud.log");
  RunHandle quiet = submit_say(w, quiet_h, 2, 0, dir + "/quiet.log");
  RunOptions o;
  o.log_file = dir + "/none.log";
  RunHandle none =
      w.submit_function([](Orchestrator&, const TaskArgsView&, const CallConfig&) { return 0; }, {}, {}, nullptr, o);
  for (RunHandle* r : {&loud, &quiet, &none}) {
    REQUIRE(r->wait(std::chrono::seconds(30)));
    REQUIRE(r->result().ok());
  }
  CHECK(loud.result().log_written);
  CHECK(std::filesystem::exists(dir + "/loud.log"));
  CHECK_FALSE(quiet.result().log_written);
  CHECK_FALSE(std::filesystem::exists(dir + "/quiet.log"));
  CHECK_FALSE(none.result().log_written);  // no task at all
  REQUIRE(w.close().ok());
}
