// Threads and processes seen through /proc: context switches, for tests and
// benches that count wake-ups; children; where threads may run.
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
//
// thread_cpus(pid): each thread's Cpus_allowed_list, for tests of placement.
//
// process_cpu_ns(pid): the CPU time (user and system) `pid`'s threads have
// used so far, in clock ticks' resolution (10 ms at 100 Hz) - a daemon's own
// work per job, which this VM's swings of speed move less than a rate.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

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

// The processes whose parent is `pid`, found by their parent pid (see above).
inline std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
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
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

inline uint64_t process_tree_switches(pid_t pid) {
  uint64_t total = task_switches(std::to_string(pid), true);
  for (pid_t child : children_of(pid)) total += task_switches(std::to_string(child), true);
  return total;
}

inline uint64_t process_cpu_ns(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  // After the comm's ')': fields 3 on; utime and stime are fields 14 and 15.
  const size_t close = stat.rfind(')');
  unsigned long long utime = 0, stime = 0;
  if (close == std::string::npos ||
      std::sscanf(stat.c_str() + close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
          2)
    return 0;
  return (utime + stime) * (1'000'000'000ULL / static_cast<unsigned long long>(sysconf(_SC_CLK_TCK)));
}

// The CPUs each thread of `pid` may run on, as /proc writes them ("0-1").
inline std::vector<std::string> thread_cpus(pid_t pid) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream f(e.path() / "status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line.substr(line.find_first_not_of(" \t", 18)));
  }
  return out;
}

}  // namespace pto_test
