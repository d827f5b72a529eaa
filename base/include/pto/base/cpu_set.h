// Sets of CPUs, written as the kernel and taskset write them ("0-3,8"), and
// placing a thread on them: ptod's [daemon] cpus, a Worker's child_cpus.
#pragma once

#include <string>
#include <vector>

#include "pto/base/status.h"

namespace pto {

// "0-3,8" -> {0, 1, 2, 3, 8}: comma- or space-separated CPU numbers and
// inclusive ranges; sorted, without duplicates, never empty. The error names
// the piece that breaks the rule.
Status parse_cpu_list(const std::string& text, std::vector<int>* cpus);
// {0, 1, 2, 3, 8} -> "0-3,8"; {} -> "".
std::string format_cpu_list(const std::vector<int>& cpus);
// The CPUs the calling thread may run on now (its affinity mask), ascending.
std::vector<int> allowed_cpus();
// The CPUs it could be placed on: online and in the process's cpuset, which a
// narrower mask (taskset, systemd's CPUAffinity=) does not limit. Found by
// asking the kernel for every CPU and putting the mask back: call it where
// the calling thread may move for a moment.
std::vector<int> available_cpus();
// Restricts the calling thread — and every thread and process it starts
// afterwards, which inherit the mask — to `cpus`. An error (kInvalidConfig)
// that names the CPUs when the kernel does not grant exactly those (a CPU
// offline, outside the process's cpuset, or beyond the machine); the mask is
// then left as it was.
Status run_on_cpus(const std::vector<int>& cpus);
// run_on_cpus, then every other thread the process has now goes there too
// (one started by a fork handler, a sanitizer's, a runtime's): a process
// placed whole, whatever ran before the call.
Status run_process_on_cpus(const std::vector<int>& cpus);

}  // namespace pto
