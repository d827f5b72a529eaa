// SimChip: what every simulated chip offers beyond pto2::Platform, so the
// tools that run a package (pto2-run, the Worker's chip children, the Python
// chip runner) drive a2a3sim and tx8sim alike: its simulated memory, kernel
// registration, names for its cores and what it adds to a run's summary and
// trace. create_sim_chip() builds the one a name selects.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pto2/errors.h"
#include "pto2/kernel_abi.h"
#include "pto2/platform.h"
#include "pto2/sim/device_memory.h"

namespace pto2::sim {

// A kernel as the simulator runs it: the kernel ABI's kernel_entry signature.
using KernelEntry = PTO2KernelEntryFn;

// A lane of a platform's own trace events (tx8sim: simulated time).
struct TraceEvent {
  std::string lane;                         // e.g. "tile (1,2)"
  std::string name;                         // after the kernel's name when kernel_id is set
  int32_t kernel_id = -2, worker_type = 0;  // -2: not a kernel's event
  uint64_t start_ns = 0, duration_ns = 0;
  std::string args_json;  // extra "args" members, already JSON ("" = none)
};

class SimChip : public Platform {
 public:
  virtual const char* platform_name() const = 0;
  virtual DeviceMemory& memory() = 0;
  // Registers the kernel for func_id on cores of one type. Before runs start.
  virtual void register_kernel(int32_t func_id, WorkerType type, KernelEntry entry) = 0;
  virtual int executor_threads() const = 0;
  // Scheduler OS threads a runtime on this chip should use.
  virtual int scheduler_threads() const = 0;
  // A person's name for a core ("AIV 7 (cluster 3)", "CT (1,2)").
  virtual std::string core_name(int core) const = 0;
  // The groups cores sit in, for traces and summaries: a2a3sim's clusters,
  // tx8sim's tiles.
  virtual int core_groups() const = 0;
  virtual int core_group(int core) const = 0;
  virtual std::string group_name(int group) const = 0;
  // The chip's shape in a run line ("block_dim 24", "mesh 4x4").
  virtual std::string shape() const = 0;
  // What the chip adds to the last run's summary, given the run's wall time
  // (tx8sim: simulated time beside it, per-tile utilisation, DDR and NoC
  // bytes); "" = nothing.
  virtual std::string run_summary(uint64_t wall_ns) const {
    (void)wall_ns;
    return {};
  }
  // Events of the last run on the chip's own clock, for a second trace
  // process (tx8sim: tasks and DMA/NoC transfers in simulated time).
  virtual std::vector<TraceEvent> trace_events() const { return {}; }
  virtual const char* trace_clock_name() const { return ""; }
};

// CPUs this process may run on (sched_getaffinity), at least 1.
int usable_cpus();
// Scheduler OS threads for a chip with aicpu_threads control threads:
// aicpu_threads - 1, capped so the orchestrator and the schedulers do not
// outnumber the usable CPUs.
int scheduler_threads_for(int aicpu_threads);
// Executor threads: `requested` when >= 0, else the CPUs left over (-1 = automatic).
int executor_threads_for(int requested, int aicpu_threads);

}  // namespace pto2::sim
