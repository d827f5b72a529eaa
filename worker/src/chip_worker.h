// ChipWorker: the L2 leaf inside a chip child (docs/worker.md, "Chip callables"). A chip callable
// is a kernel config: its libraries are loaded when the callable is
// installed; a run copies the task's tensors into the simulated chip's global
// memory, runs the orchestration on the PTO2 runtime, and copies the outputs
// back into the shared tensors. With CallConfig.enable_profiling and an
// output_prefix, the run's swimlane trace is written to <output_prefix>.json
// (Chrome/Perfetto format); with CallConfig.enable_dump_tensor, every task's
// tensors are written after it ran as <output_prefix>/task-<id>-<kernel>-arg<i>.npy.
// CallConfig.enable_pmu is refused: the simulated chip has no counters. The
// signature (the config's [[args]]) says which tensors are read and written
// and what shape and dtype each must have.
//
// Engines (a simulated chip and its runtime) are kept per (callable,
// block_dim, AICPU threads, profiling) for repeated runs, at most kMaxEngines
// of them, least recently used first out: an evicted engine is torn down
// (its threads joined, its memory unmapped), so a stream of jobs that sweeps
// the settings keeps the child's memory and thread count bounded.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pto/callable.h"
#include "pto/package/chip_package.h"
#include "pto/task_args.h"
#include "pto2/runtime.h"
#include "pto2/sim/loader.h"
#include "pto2/sim/package_chip.h"

namespace pto {

class ChipWorker {
 public:
  static constexpr size_t kMaxEngines = 4;

  ~ChipWorker();
  // The simulated chip this child is (WorkerConfig::platform). Before install().
  void set_platform(const std::string& platform) { platform_ = platform; }
  // A package that names another platform ([runtime] platform) is refused.
  Status install(const Digest& digest, const std::string& config_path);
  void remove(const Digest& digest);
  bool has(const Digest& digest) const { return prepared_.count(digest) != 0; }
  Status run(const Digest& digest, const TaskArgsView& args, const CallConfig& cfg);
  size_t engines() const { return engines_.size(); }
  // Where the L2 runtime's progress goes (a chip child's mailbox): the
  // final counts at the end of each run, and the live counts whenever
  // publish_progress() is called during one (from any thread). Writes happen
  // under one lock, so a live write never lands after the final one.
  void set_progress_sink(std::atomic<uint64_t>* submitted, std::atomic<uint64_t>* completed);
  void publish_progress() const;

 private:
  struct Engine {  // declaration order = destruction order reversed: runtime goes first
    std::unique_ptr<pto2::sim::SimChip> chip;
    std::unique_ptr<pto2::Runtime> runtime;
  };
  struct EngineKey {
    Digest digest;
    int block_dim, aicpu;
    bool profiling;
    bool operator==(const EngineKey&) const = default;
  };
  struct Prepared {
    pto::package::ChipConfig cfg;
    std::vector<pto2::sim::KernelLibrary> kernels;
    pto2::sim::OrchestrationLibrary orch;
  };
  std::string platform_ = "a2a3sim";
  Status engine_for(const Digest& digest, Prepared& p, int block_dim, int aicpu, bool profiling, Engine** out);
  static void tear_down(Engine& e);
  static Status check_args(const Digest& digest, const Prepared& p, const TaskArgsView& args);
  // The runtime's run of p's orchestration, its progress published meanwhile
  // and its final counts after.
  pto2::RunResult run_published(Engine& e, const Prepared& p, std::vector<uint64_t>& dev);
  std::map<Digest, std::unique_ptr<Prepared>> prepared_;
  std::list<std::pair<EngineKey, Engine>> engines_;  // most recently used first
  // The runtime running now, set and cleared around its run under the lock
  // (publish_progress never reads a destroyed one).
  mutable std::mutex progress_mu_;
  const pto2::Runtime* running_ = nullptr;
  std::atomic<uint64_t>* sink_submitted_ = nullptr;
  std::atomic<uint64_t>* sink_completed_ = nullptr;
};

}  // namespace pto
