// A kernel package (its kernels.toml, docs/sim.md) loaded onto one simulated
// chip: the platform the package or the caller selects (a2a3sim or tx8sim),
// each kernel registered under its func_id and core type, and the
// orchestration library. What pto2-run, the Worker's chip children and the
// Python chip runner run; errors name the kernel or library.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pto/package/chip_package.h"
#include "pto2/sim/a2a3sim.h"
#include "pto2/sim/loader.h"
#include "pto2/sim/sim_chip.h"
#include "pto2/sim/tx8sim.h"

namespace pto2::sim {

// Which chip, with the settings of each kind; only the selected one is used.
struct SimChipOptions {
  std::string platform = "a2a3sim";  // "a2a3sim" | "tx8sim"
  A2A3SimConfig a2a3;
  Tx8SimConfig tx8;
  int scheduler_threads() const { return platform == "tx8sim" ? tx8.scheduler_threads() : a2a3.scheduler_threads(); }
};

// The platforms create_sim_chip() knows, for messages: "a2a3sim, tx8sim".
const char* known_platforms();

// The chip `o` selects; an unknown platform or a config that breaks its
// chip's rules is an error naming the value.
Status create_sim_chip(const SimChipOptions& o, std::unique_ptr<SimChip>* out);

// A package's chip: its [runtime] platform (a2a3sim when it names none, or
// `platform` when not empty: a command line's choice), block_dim and
// aicpu_thread_num, pipes and [tx8sim] settings.
SimChipOptions chip_options(const pto::package::ChipConfig& cfg, const std::string& platform = "");

struct PackageChip {
  SimChipOptions options;
  std::unique_ptr<SimChip> platform;
  std::vector<KernelLibrary> kernels;
  OrchestrationLibrary orchestration;
};

// The chip `o` describes, the package's kernels and orchestration loaded into `out`.
Status load_package_chip(const pto::package::ChipConfig& cfg, const SimChipOptions& o, PackageChip* out);

}  // namespace pto2::sim
