// tx8sim: a spatial tile-mesh accelerator (the TX8 model, docs/tx8sim.md), as
// a pto2::Platform beside a2a3sim.
//
// Chip model:
//   * mesh_x x mesh_y tiles (4 x 4 by default) joined by a NoC. Tile t sits
//     at (t % mesh_x, t / mesh_x). Each tile has two compute engines that the
//     runtime sees as cores: the neural engine NE (cube-type tasks; core t)
//     and the CGRA tensor unit CT (vector-type tasks; core tiles + t). Its
//     LSU (DMA) and NoC port are what the kernels' data movement uses.
//   * Per tile a scratch-pad memory (SPM) of spm_bytes; each engine's tasks
//     use one half of it (NE the lower, CT the upper), since both engines of
//     a tile may run at once here. A task's SPM allocations start afresh.
//   * DDR is the device memory (allocated on demand, ddr_bytes of capacity).
//   * Kernels keep the entry ABI; their context carries a PTO2TileContext
//     (kernel_abi.h): mesh place, SPM, and DMA/NoC movers whose every call is
//     bounds-checked (SPM side in the engine's share or the peer tile's SPM;
//     DDR side inside the task's own tensor views, stores only into
//     OUTPUT/INOUT ones) and charged in simulated time.
//   * Threads as a2a3sim: bounded by the CPUs, inline on the scheduler
//     threads when there is no spare CPU, executors that spin then park.
//   * No clusters and no pipes (cluster_count() is 0: the runtime refuses
//     function groups on this chip).
//
// Simulated time (the cost model, docs/tx8sim.md): each engine has a clock; a
// task starts when its engine is free and the data it reads was written (and
// what it writes was last read); DMA costs latency + bytes / the chip's
// shared DDR bandwidth, NoC costs hops x hop latency + bytes / link
// bandwidth; compute costs the kernel's own host time times compute_scale.
// A kernel that moves no data itself is charged as loading its inputs at its
// start and storing its outputs at its end (a block of an SPMD call: its
// share of them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pto2/errors.h"
#include "pto2/kernel_abi.h"
#include "pto2/platform.h"
#include "pto2/sim/device_memory.h"
#include "pto2/sim/sim_chip.h"

namespace pto2::sim {

class ExecutorPool;
class KernelTable;
class DdrChannel;
class RegionClocks;

struct Tx8SimConfig {
  int mesh_x = 4, mesh_y = 4;
  uint64_t spm_bytes = 4ull << 20;   // per tile; each engine's tasks get half
  uint64_t ddr_bytes = 64ull << 30;  // simulated DDR capacity (allocated on demand)
  // Control threads: 1 orchestrator + (aicpu_threads - 1) schedulers, as a2a3sim.
  int aicpu_threads = 4;
  int executor_threads = -1;  // -1: the spare CPUs (0 on a 2-CPU machine)
  uint32_t spin_before_park_us = 50;
  bool record_core_times = false;  // wall start/end of each kernel, for profiling
  bool record_events = false;      // every task and transfer in simulated time, for the trace
  // The cost model (docs/tx8sim.md, "Cost model").
  double ddr_gbytes_per_s = 200.0;  // the chip's DDR bandwidth, shared by its tiles
  uint32_t ddr_latency_ns = 100;
  double noc_gbytes_per_s = 128.0;  // one NoC stream
  uint32_t hop_ns = 4;              // per mesh hop
  double compute_scale = 1.0;       // simulated compute = kernel host time (outside the movers) x this

  Status validate() const;
  int tiles() const { return mesh_x * mesh_y; }
  int scheduler_threads() const;
  int resolved_executor_threads() const;
};

// What the last run did, in simulated time.
struct Tx8RunStats {
  uint64_t sim_ns = 0;  // the last task's end
  uint64_t tasks = 0;
  uint64_t ddr_bytes = 0, noc_bytes = 0, dma_transfers = 0, noc_transfers = 0;
  std::vector<uint64_t> tile_busy_ns;  // per tile, NE and CT together
  // Busy time over (tiles x 2 engines x sim_ns), in %.
  double utilisation() const;
};

class Tx8SimPlatform : public SimChip {
 public:
  static std::unique_ptr<Tx8SimPlatform> create(const Tx8SimConfig& config, Status* error);
  ~Tx8SimPlatform() override;

  const Tx8SimConfig& config() const { return config_; }
  int tiles() const { return config_.tiles(); }
  int tile_of(int core) const { return core % tiles(); }
  // The simulated-time figures of the last run (complete once it returned).
  Tx8RunStats run_stats() const;
  // Mesh hops between two tiles (Manhattan distance).
  int hops(int tile_a, int tile_b) const;

  // SimChip
  const char* platform_name() const override { return "tx8sim"; }
  DeviceMemory& memory() override { return memory_; }
  void register_kernel(int32_t func_id, WorkerType type, KernelEntry entry) override;
  int executor_threads() const override;
  int scheduler_threads() const override { return config_.scheduler_threads(); }
  std::string core_name(int core) const override;
  std::string shape() const override;
  int core_groups() const override { return tiles(); }
  int core_group(int core) const override { return tile_of(core); }
  std::string group_name(int group) const override;
  std::string run_summary(uint64_t wall_ns) const override;
  std::vector<TraceEvent> trace_events() const override;
  const char* trace_clock_name() const override { return "tx8sim simulated time"; }

  // Platform
  int core_count() const override { return 2 * tiles(); }
  WorkerType core_type(int core) const override { return core < tiles() ? WorkerType::kCube : WorkerType::kVector; }
  bool passes_block_index() const override { return true; }
  void run_starting() override;
  bool resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) override;
  void dispatch(int core, const DispatchPayload& payload) override;
  bool poll_finished(int core, uint64_t* task_id) override;
  void set_wakeup(Wakeup* wakeup) override { wakeup_.set(wakeup); }
  bool core_times(int core, uint64_t* start_ns, uint64_t* end_ns) override;

 private:
  struct Core;
  explicit Tx8SimPlatform(const Tx8SimConfig& config);
  void run_core(int core);
  // The movers a kernel reaches through PTO2TileOps (impl = its Core).
  static void* spm_alloc(void* impl, uint64_t bytes);
  static int32_t dma(void* impl, int32_t kind, void* dst, uint64_t dst_stride, const void* src, uint64_t src_stride,
                     uint64_t row_bytes, uint64_t rows);
  static int32_t noc(void* impl, int32_t put, int32_t tile, uint64_t remote_offset, void* local, uint64_t bytes);
  // A mover's misuse fails the run with a message naming the task and sizes.
  int32_t refuse(Core& c, int32_t code, const std::string& what);
  // Advances c's simulated clock by the compute since the last mark.
  void charge_compute(Core& c);
  // Whether [p, p+bytes) lies in one of the task's tensor views (for a
  // store: an OUTPUT/INOUT one), each taken from its first to its last byte.
  bool in_task_views(const Core& c, const void* p, uint64_t bytes, bool store) const;

  Tx8SimConfig config_;
  DeviceMemory memory_;
  std::unique_ptr<uint8_t[]> spm_;  // tiles x spm_bytes, committed as touched
  std::vector<std::unique_ptr<Core>> cores_;
  std::unique_ptr<KernelTable> kernels_;
  std::unique_ptr<DdrChannel> ddr_;
  std::unique_ptr<RegionClocks> regions_;
  std::unique_ptr<ExecutorPool> executors_;  // null: cores run inline on the scheduler threads
  WakeupSlot wakeup_;
};

}  // namespace pto2::sim
