// Context switches from /proc, for tests and benches that count wake-ups.
//
// other_threads_switches(): voluntary context switches of every thread of
// this process but the caller, summed from /proc/self/task. A thread that
// parks and is woken counts one; a spinner's sched_yield or a preemption
// counts none (those are involuntary). Tests of "no wake-up per task" compare
// it before and after the work.
//
// process_tree_switches(pid): voluntary and involuntary context switches of
// every thread of `pid` and of its direct children (found by their parent
// pid: /proc/<pid>/task/<tid>/children is not built into every kernel) — a
// daemon and its workers, seen from a bench.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace pto_test {

// The switches of the threads under /proc/<process>/task, all but `skip_tid`;
// with `involuntary`, preemptions too. A thread or process that ends during
// the walk is skipped.
inline uint64_t task_switches(const std::string& process, bool involuntary, const std::string& skip_tid = "") {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + process + "/task", ec)) {
    if (e.path().filename() == skip_tid) continue;
    std::ifstream f(e.path() / "status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 ||
          (involuntary && line.rfind("nonvoluntary_ctxt_switches:", 0) == 0))
        total += std::stoull(line.substr(line.find(':') + 1));
  }
  return total;
}

inline uint64_t other_threads_switches() { return task_switches("self", false, std::to_string(gettid())); }

inline uint64_t process_tree_switches(pid_t pid) {
  uint64_t total = task_switches(std::to_string(pid), true);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string stat;
    std::getline(f, stat);
    // pid (comm) state ppid ...: the comm may hold spaces, so after its ')'.
    const size_t close = stat.rfind(')');
    char state = 0;
    long ppid = 0;
    if (close != std::string::npos && std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) == 2 &&
        ppid == pid)
      total += task_switches(name, true);
  }
  return total;
}

}  // namespace pto_test
