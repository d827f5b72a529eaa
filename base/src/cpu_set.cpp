#include "pto/base/cpu_set.h"

#include <fmt/format.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iterator>

namespace pto {
namespace {

Status bad(const std::string& text, const std::string& why) {
  return Status::Error(kInvalidConfig, fmt::format("CPU list \"{}\": {}", text, why));
}

// A CPU number: digits only, below CPU_SETSIZE (the most a mask holds).
bool cpu_number(const std::string& s, int* out) {
  if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  *out = std::stoi(s);
  return *out < CPU_SETSIZE;
}

}  // namespace

Status parse_cpu_list(const std::string& text, std::vector<int>* cpus) {
  std::vector<int> out;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find_first_of(", ", at), text.size());
    const std::string piece = text.substr(at, end - at);
    at = end + 1;
    if (piece.empty()) continue;  // separators side by side: "0-3, 8"
    const size_t dash = piece.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!cpu_number(piece, &lo))
        return bad(text, fmt::format("'{}' is not a CPU number from 0 to {}", piece, CPU_SETSIZE - 1));
      hi = lo;
    } else if (!cpu_number(piece.substr(0, dash), &lo) || !cpu_number(piece.substr(dash + 1), &hi)) {
      return bad(text, fmt::format("'{}' is not a range of CPU numbers from 0 to {} (\"first-last\")", piece,
                                   CPU_SETSIZE - 1));
    } else if (hi < lo) {
      return bad(text, fmt::format("the range '{}' runs backwards", piece));
    }
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  if (out.empty()) return bad(text, "no CPU in it (write e.g. \"1\", \"0-3\" or \"0,2-3\")");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  *cpus = std::move(out);
  return Status::Ok();
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

namespace {
std::vector<int> cpus_in(const cpu_set_t& set) {
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}
}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {};
  return cpus_in(set);
}

std::vector<int> available_cpus() {
  cpu_set_t before, all;
  if (sched_getaffinity(0, sizeof before, &before) != 0) return {};
  // Asked for every CPU, the kernel grants those of the cpuset that are
  // online; the mask is put back at once.
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  if (sched_setaffinity(0, sizeof all, &all) != 0) return cpus_in(before);
  std::vector<int> out = allowed_cpus();
  (void)sched_setaffinity(0, sizeof before, &before);
  return out;
}

Status run_on_cpus(const std::vector<int>& wanted) {
  std::vector<int> cpus = wanted;
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  if (cpus.empty()) return Status::Error(kInvalidConfig, "an empty CPU list: no CPU to run on");
  cpu_set_t set, before;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE)
      return Status::Error(kInvalidConfig, fmt::format("CPU {} is not a CPU number from 0 to {}", c, CPU_SETSIZE - 1));
    CPU_SET(c, &set);
  }
  const std::string want = format_cpu_list(cpus);
  if (sched_getaffinity(0, sizeof before, &before) != 0 || sched_setaffinity(0, sizeof set, &set) != 0) {
    const int err = errno;
    return Status::Error(kInvalidConfig, fmt::format("cannot run on CPUs {}: {} (CPUs available here: {})", want,
                                                     errno_text(err), format_cpu_list(available_cpus())));
  }
  // The kernel keeps, silently, only the CPUs of the process's cpuset that
  // are online: what it granted is read back, and anything less undone.
  if (const std::vector<int> got = allowed_cpus(); got != cpus) {
    std::vector<int> missing;
    std::set_difference(cpus.begin(), cpus.end(), got.begin(), got.end(), std::back_inserter(missing));
    (void)sched_setaffinity(0, sizeof before, &before);
    return Status::Error(kInvalidConfig,
                         fmt::format("cannot run on CPUs {}: CPU {} not available here (offline, or outside the "
                                     "cpuset; CPUs available here: {})",
                                     want, format_cpu_list(missing), format_cpu_list(available_cpus())));
  }
  return Status::Ok();
}

Status run_process_on_cpus(const std::vector<int>& cpus) {
  if (Status s = run_on_cpus(cpus); !s.ok()) return s;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return Status::Ok();
  const std::string self = std::to_string(syscall(SYS_gettid));
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  // increment(ec): no exception, in a child just forked either
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string tid = it->path().filename();
    if (tid == self || tid.find_first_not_of("0123456789") != std::string::npos) continue;
    // A thread that ended meanwhile (ESRCH) has nothing to move.
    if (sched_setaffinity(static_cast<pid_t>(std::stol(tid)), sizeof set, &set) != 0 && errno != ESRCH) {
      const int err = errno;
      return Status::Error(kInvalidConfig, fmt::format("cannot move thread {} to CPUs {}: {}", tid,
                                                       format_cpu_list(cpus_in(set)), errno_text(err)));
    }
  }
  if (ec) return Status::Error(kInvalidConfig, "cannot list this process's threads: " + ec.message());
  return Status::Ok();
}

}  // namespace pto
