#include "pto2/sim/sim_chip.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace pto2::sim {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, CPU_COUNT(&set));
}

int scheduler_threads_for(int aicpu_threads) { return std::max(1, std::min(aicpu_threads - 1, usable_cpus() - 1)); }

int executor_threads_for(int requested, int aicpu_threads) {
  if (requested >= 0) return requested;
  return std::max(0, usable_cpus() - 1 - scheduler_threads_for(aicpu_threads));
}

}  // namespace pto2::sim
