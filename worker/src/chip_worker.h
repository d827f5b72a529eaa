// ChipWorker: the L2 leaf inside a chip child (seed 001 §5). A chip callable
// is a kernel config: its libraries are loaded when the callable is
// installed; a run copies the task's tensors into the simulated chip's global
// memory, runs the orchestration on the PTO2 runtime, and copies the outputs
// back into the shared tensors. With CallConfig.enable_profiling and an
// output_prefix, the run's swimlane trace is written to <output_prefix>.json
// (Chrome/Perfetto format). The signature (the config's [[args]]) says
// which tensors are outputs and what shape and dtype each must have.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pto/callable.h"
#include "pto/task_args.h"
#include "pto2/runtime.h"
#include "pto2/sim/a2a3sim.h"
#include "pto2/sim/chip_config.h"
#include "pto2/sim/loader.h"

namespace pto {

class ChipWorker {
 public:
  Status install(const Digest& digest, const std::string& config_path);
  void remove(const Digest& digest) { prepared_.erase(digest); }
  bool has(const Digest& digest) const { return prepared_.count(digest) != 0; }
  Status run(const Digest& digest, const TaskArgsView& args, const CallConfig& cfg);

 private:
  struct Engine {  // declaration order = destruction order reversed: runtime goes first
    std::unique_ptr<pto2::sim::A2A3SimPlatform> chip;
    std::unique_ptr<pto2::Runtime> runtime;
  };
  struct Prepared {
    pto2::sim::ChipConfig cfg;
    std::vector<pto2::sim::KernelLibrary> kernels;
    pto2::sim::OrchestrationLibrary orch;
    std::map<std::tuple<int, int, bool>, Engine> engines;  // (block_dim, aicpu threads, profiling)
  };
  Status engine_for(Prepared& p, int block_dim, int aicpu, bool profiling, Engine** out);
  std::map<Digest, std::unique_ptr<Prepared>> prepared_;
};

}  // namespace pto
