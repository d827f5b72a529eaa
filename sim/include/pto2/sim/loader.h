// Loading user code from shared libraries with dlopen (docs/sim.md): kernels
// (`kernel_entry`) and orchestrations (`aicpu_orchestration_config`,
// `aicpu_orchestration_entry`). Libraries are opened from the path given —
// nothing is copied to a temporary file. Every error names the file and the
// problem. A loaded library stays open as long as its SharedLibrary lives.
#pragma once

#include <memory>
#include <string>

#include "pto/base/shared_library.h"
#include "pto2/errors.h"
#include "pto2/kernel_abi.h"
#include "pto2/orchestration_api.h"

namespace pto2::sim {

using pto::SharedLibrary;

struct KernelLibrary {
  std::unique_ptr<SharedLibrary> library;
  PTO2KernelEntryFn entry = nullptr;
};
Status load_kernel(const std::string& path, KernelLibrary* out);

struct OrchestrationLibrary {
  std::unique_ptr<SharedLibrary> library;
  PTO2OrchestrationConfigFn config = nullptr;
  PTO2OrchestrationEntryFn entry = nullptr;
};
Status load_orchestration(const std::string& path, OrchestrationLibrary* out);

}  // namespace pto2::sim
