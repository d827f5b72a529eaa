// other_threads_switches(): voluntary context switches of every thread of
// this process but the caller, summed from /proc/self/task. A thread that
// parks and is woken counts one; a spinner's sched_yield or a preemption
// counts none (those are involuntary). Tests of "no wake-up per task" compare
// it before and after the work.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace pto_test {

inline uint64_t other_threads_switches() {
  uint64_t total = 0;
  const std::string self = std::to_string(gettid());
  std::error_code ec;  // a thread that ends during the walk is skipped
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    if (e.path().filename() == self) continue;
    std::ifstream f(e.path() / "status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) total += std::stoull(line.substr(24));
  }
  return total;
}

}  // namespace pto_test
