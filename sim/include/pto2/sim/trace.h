// Profiling output for people: a Chrome/Perfetto JSON swimlane trace of a
// run (one lane per core, plus orchestrator and scheduler lanes; open it at
// ui.perfetto.dev or chrome://tracing) and a short text summary.
#pragma once

#include <functional>
#include <string>

#include "pto2/errors.h"
#include "pto2/runtime.h"
#include "pto2/sim/sim_chip.h"

namespace pto2::sim {

using KernelNamer = std::function<std::string(int32_t kernel_id, int32_t worker_type)>;

// run must come from a Runtime with profiling on.
Status write_chrome_trace(const std::string& path, const RunResult& run, const SimChip& chip, int scheduler_threads,
                          const KernelNamer& name_of);

// Tasks, wall time, per-core-type utilisation, scheduler overhead per task.
std::string summarize(const RunResult& run, const SimChip& chip);

}  // namespace pto2::sim
