// pto2::Runtime — one chip's PTO2 ring-buffer runtime (tensormap_and_ringbuffer).
//
// A Runtime owns the shared region (header, task descriptors, dep-list pool),
// the heap rings, the TensorMap and a set of scheduler threads that stay parked
// between runs. run() executes one orchestration on the calling thread while the
// scheduler threads dispatch its tasks to the platform's cores; it returns when
// every submitted task has completed and retired, or with the error that
// stopped the run. One run at a time per Runtime. The Platform must outlive it.
// After a run fails with STALLED (a kernel did not finish in time) the Runtime
// refuses further runs; destroying it then detaches its threads and leaks its
// memory rather than wait for the kernel — keep the Platform alive.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pto2/config.h"
#include "pto2/errors.h"
#include "pto2/orchestration_api.h"
#include "pto2/platform.h"

namespace pto2 {

class RuntimeImpl;

struct RunStats {
  uint64_t tasks_submitted = 0;
  uint64_t tasks_completed = 0;
  uint64_t orchestrator_ns = 0;  // wall time inside the orchestration function
  uint64_t wall_ns = 0;          // whole run
  uint64_t blocked_waits = 0;    // times the orchestrator waited on a full ring/pool
  // Captured regions (docs/runtime.md §16): recorded, replayed, the tasks the
  // replays published (their entry and exit tasks not counted), and regions
  // whose recording no longer matched (recorded again; in verify mode, found different).
  uint64_t regions_recorded = 0;
  uint64_t regions_replayed = 0;
  uint64_t tasks_replayed = 0;
  uint64_t capture_mismatches = 0;
  // Executions of a recorded region whose replay could never fit the rings
  // (its tasks hold their slots for consumers submitted later): run as plain submission.
  uint64_t capture_unreplayable = 0;
};

// One task's life, when RuntimeConfig::profiling is on. Times are
// steady_clock nanoseconds; a stage a task skipped (a dependency-only task
// has no core) repeats the previous stage's time.
struct TaskRecord {
  uint64_t task_id = 0;
  int32_t kernel_id = 0;
  int32_t core = -1;            // platform core id, -1 for dependency-only tasks
  int32_t cluster = -1;         // cluster of that core (-1: none, or a platform without clusters)
  int32_t pinned_cluster = -1;  // the cluster the task was pinned to (-1: unpinned)
  int32_t group = -1;           // its function group (-1: none)
  int32_t block_idx = 0;        // the logical block this record is of
  int32_t block_num = 1;        // the task's logical blocks (one record per block)
  int32_t scheduler = 0;        // scheduler thread that dispatched and completed it
  int32_t worker_type = 0;      // PTO2_WORKER_CUBE / VECTOR, 2 = dependency-only
  uint64_t submit_ns = 0;       // orchestrator published it
  uint64_t ready_ns = 0;        // its last producer completed (or it was found ready)
  uint64_t dispatch_ns = 0;
  uint64_t start_ns = 0;     // the core started the kernel (platform's clock)
  uint64_t end_ns = 0;       // the kernel returned
  uint64_t complete_ns = 0;  // the scheduler saw FIN and released consumers
};

struct RunResult {
  Status status;
  RunStats stats;
  uint64_t start_ns = 0;              // run() entered
  uint64_t orchestration_end_ns = 0;  // the orchestration function returned
  std::vector<TaskRecord> records;    // profiling only, in completion order per scheduler
  bool ok() const { return status.ok(); }
};

// Sees each task right after its kernel returned and before its consumers are
// released, so the task's tensors hold exactly what it wrote (debug tooling:
// the tensor dump). Called on scheduler threads, possibly concurrently for
// different tasks; it slows the run by what it does. Dependency-only tasks
// are not reported.
class TaskObserver {
 public:
  virtual ~TaskObserver() = default;
  // tensors[i] is parameter i's tensor, or null for a scalar parameter.
  virtual void task_finished(uint64_t task_id, int32_t kernel_id, int32_t worker_type, const Tensor* const* tensors,
                             int32_t num_params) = 0;
};

// Signature of an orchestration run through the C++ API; the int return is the
// orchestration's own verdict (non-zero fails the run).
using OrchestrationFn = std::function<int(PTO2Runtime* rt)>;

class Runtime {
 public:
  // Validates config, maps the shared region and heap, starts the scheduler
  // threads (parked). Returns nullptr and fills *error on failure.
  static std::unique_ptr<Runtime> create(const RuntimeConfig& config, Platform& platform, Status* error);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  RunResult run(const OrchestrationFn& orchestration);
  // The exported-symbol form (docs/runtime.md §11): checks arg_count against config.
  RunResult run(PTO2OrchestrationConfigFn config_fn, PTO2OrchestrationEntryFn entry, uint64_t* args, int arg_count);

  // Installs (or with nullptr removes) an observer for the following runs.
  // Between runs only; the observer must outlive them.
  void set_task_observer(TaskObserver* observer);

  const RuntimeConfig& config() const;
  // True after a run stalled with kernels still running: the Runtime refuses
  // runs, and its Platform must outlive whatever is still executing.
  bool broken() const;
  // The run in progress, read from any thread while run() executes (relaxed:
  // a progress display, not a synchronisation): tasks submitted so far and
  // task slots completed so far (a failed submit's no-op slot counts).
  struct Progress {
    uint64_t submitted = 0, completed = 0;
  };
  Progress progress() const;
  // Bytes of the shared region for this config (header + descriptors + pools).
  uint64_t shared_region_bytes() const;

 private:
  explicit Runtime(std::unique_ptr<RuntimeImpl> impl);
  std::unique_ptr<RuntimeImpl> impl_;
};

}  // namespace pto2
