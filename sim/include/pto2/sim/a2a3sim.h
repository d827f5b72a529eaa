// a2a3sim: the simulated Ascend a2a3 chip, as a pto2::Platform.
//
// Chip model (docs/sim.md):
//   * block_dim clusters (at most PLATFORM_MAX_BLOCKDIM = 24), each one AIC
//     (cube) core and two AIV (vector) cores. Core ids: AICs 0..block_dim-1,
//     then AIVs block_dim..3*block_dim-1 (cluster c owns AIC c and AIVs
//     block_dim+2c, block_dim+2c+1).
//   * Per core a Handshake (the dispatch payload) and two registers:
//       DATA_MAIN_BASE  AICPU -> AICore: task_id + 1 dispatches; kExitSignal stops
//       COND            AICore -> AICPU: bit 31 = state (0 ACK, 1 FIN),
//                       bits 30..0 = low 31 bits of the task id
//     A core polls DATA_MAIN_BASE, reads the payload, writes ACK, runs the
//     kernel, writes FIN. The scheduler learns of completion only through COND.
//   * Bounded threads: the logical cores (up to 72) run on executor_threads OS
//     threads, never one thread per core. With 0 executors a core's work runs
//     on the scheduler thread that dispatches it (the right choice when the
//     process has no spare CPU); otherwise a dispatch rings a doorbell and a
//     parked executor picks the core up. Every wait spins briefly, then parks.
//   * Pipes: per cluster PTO2_PIPES_PER_CLUSTER bounded FIFOs (pipe_bytes
//     each) that its kernels push to and pop from (kernel_abi.h). A task that
//     names a pipe runs on a thread of its core's own, started the first time
//     (it waits for its peer, so it must not hold up a shared thread); a wait
//     longer than pipe_timeout_ms fails the run STALLED with a diagnosis.
//
// docs/sim.md has the register protocol step by step.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pto2/errors.h"
#include "pto2/kernel_abi.h"
#include "pto2/platform.h"
#include "pto2/sim/device_memory.h"
#include "pto2/sim/sim_chip.h"

namespace pto2::sim {

class ClusterPipes;
class CoreThreads;
class ExecutorPool;
class KernelTable;

inline constexpr int PLATFORM_MAX_BLOCKDIM = 24;
inline constexpr int PLATFORM_AIV_PER_CLUSTER = 2;
inline constexpr int PLATFORM_MAX_AICPU_THREADS = 4;
inline constexpr uint32_t kCondFin = 1u << 31;
inline constexpr uint32_t kCondTaskMask = kCondFin - 1;
inline constexpr uint64_t kExitSignal = ~0ull;

struct A2A3SimConfig {
  int block_dim = PLATFORM_MAX_BLOCKDIM;
  // AICPU threads of the chip: 1 orchestrator + (aicpu_threads - 1) schedulers.
  int aicpu_threads = PLATFORM_MAX_AICPU_THREADS;
  // OS threads that run AICore work; -1 = the CPUs this process may use minus
  // the AICPU threads that get a CPU (so 0, inline, on a 2-CPU machine).
  int executor_threads = -1;
  uint64_t gm_bytes = 4ull << 30;  // simulated global memory capacity
  uint32_t spin_before_park_us = 50;
  bool record_core_times = false;  // start/end of each kernel, for profiling (two clock reads per task)
  uint64_t pipe_bytes = 32768;     // capacity of each cluster pipe
  uint32_t pipe_timeout_ms = 5000;  // a push or pop that waits longer fails the run STALLED

  Status validate() const;
  // Scheduler OS threads for the runtime: aicpu_threads - 1, capped so the
  // orchestrator and the schedulers do not outnumber the usable CPUs.
  int scheduler_threads() const;
  int resolved_executor_threads() const;
};

class A2A3SimPlatform : public SimChip {
 public:
  // Use create(): the config is validated first.
  static std::unique_ptr<A2A3SimPlatform> create(const A2A3SimConfig& config, Status* error);
  ~A2A3SimPlatform() override;

  // Registers the kernel for func_id on cores of one type (the reference design's
  // upload_kernel_binary + func_id_to_addr). Before runs start.
  void register_kernel(int32_t func_id, WorkerType type, KernelEntry entry) override;

  DeviceMemory& memory() override { return memory_; }
  const A2A3SimConfig& config() const { return config_; }
  int executor_threads() const override;

  // SimChip
  const char* platform_name() const override { return "a2a3sim"; }
  int scheduler_threads() const override { return config_.scheduler_threads(); }
  std::string core_name(int core) const override;
  std::string shape() const override;
  int core_groups() const override { return config_.block_dim; }
  int core_group(int core) const override { return cluster_of(core); }
  std::string group_name(int group) const override;

  // Register views for tests and tracing.
  uint64_t data_main_base(int core) const { return cores_[core]->data_main_base.load(std::memory_order_acquire); }
  uint32_t cond(int core) const { return cores_[core]->cond.load(std::memory_order_acquire); }
  uint64_t tasks_executed(int core) const { return cores_[core]->executed.load(std::memory_order_relaxed); }
  int cluster_of(int core) const;
  // Threads started for cores that ran pipe tasks (tests).
  int pipe_core_threads() const;

  // Platform
  int core_count() const override { return static_cast<int>(cores_.size()); }
  WorkerType core_type(int core) const override { return cores_[core]->type; }
  int cluster_count() const override { return config_.block_dim; }
  int core_cluster(int core) const override { return cluster_of(core); }
  bool passes_block_index() const override { return true; }
  void run_starting() override;
  void cluster_claimed(int cluster) override;
  bool resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) override;
  void dispatch(int core, const DispatchPayload& payload) override;
  bool poll_finished(int core, uint64_t* task_id) override;
  void set_wakeup(Wakeup* wakeup) override { wakeup_.set(wakeup); }
  bool core_times(int core, uint64_t* start_ns, uint64_t* end_ns) override;

 private:
  // What a kernel's pipe calls reach (PTO2KernelContext::pipe_impl).
  struct PipeLink {
    A2A3SimPlatform* chip;
    int core;
  };
  struct alignas(64) Core {
    WorkerType type = WorkerType::kCube;
    // Handshake (docs/sim.md): the payload the AICPU prepared for this core.
    DispatchPayload task;
    PTO2KernelContext context{};  // handed to the kernel in args[num_args]
    // The kernel's own argument array: the payload's arguments, then the
    // context. A batch descriptor's blocks run on several cores at once, each
    // with its own context, so the descriptor's array cannot carry it.
    int64_t args[PTO2_MAX_PARAMS + 1] = {};
    PipeLink pipe_link{};
    std::atomic<uint64_t> data_main_base{0};
    std::atomic<uint32_t> cond{0};
    std::atomic<uint64_t> executed{0};
    uint64_t start_ns = 0, end_ns = 0;  // written before FIN, read after it
  };
  explicit A2A3SimPlatform(const A2A3SimConfig& config);
  // The AICore side: take the dispatched task, ACK, run, FIN.
  void run_core(int core);
  template <typename Op>
  static int32_t pipe_call(void* impl, Op&& op);
  static int32_t pipe_push(void* impl, const Tensor* pipe, const void* src, uint64_t bytes);
  static int32_t pipe_pop(void* impl, const Tensor* pipe, void* dst, uint64_t bytes);

  A2A3SimConfig config_;
  DeviceMemory memory_;
  std::vector<std::unique_ptr<Core>> cores_;
  std::unique_ptr<KernelTable> kernels_;
  std::unique_ptr<ExecutorPool> executors_;  // null: cores run inline on the scheduler threads
  std::unique_ptr<ClusterPipes> pipes_;
  std::unique_ptr<CoreThreads> pipe_cores_;
  WakeupSlot wakeup_;
};

}  // namespace pto2::sim
