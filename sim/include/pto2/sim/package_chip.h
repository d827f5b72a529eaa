// A kernel package (its kernels.toml, docs/sim.md) loaded onto one simulated
// a2a3 chip: the platform, each kernel registered under its func_id and core
// type, and the orchestration library. What pto2-run and the Python chip
// runner (pto.chip) run; errors name the kernel or library.
#pragma once

#include <memory>
#include <vector>

#include "pto/package/chip_package.h"
#include "pto2/sim/a2a3sim.h"
#include "pto2/sim/loader.h"

namespace pto2::sim {

struct PackageChip {
  A2A3SimConfig config;
  std::unique_ptr<A2A3SimPlatform> platform;
  std::vector<KernelLibrary> kernels;
  OrchestrationLibrary orchestration;
};

// `sc` as given (block_dim, threads, profiling), the package's kernels and
// orchestration loaded into `out`.
Status load_package_chip(const pto::package::ChipConfig& cfg, const A2A3SimConfig& sc, PackageChip* out);

}  // namespace pto2::sim
