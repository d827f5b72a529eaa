#include "pto2/sim/loader.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace pto2::sim {

Status load_kernel(const std::string& path, KernelLibrary* out) {
  Status st;
  out->library = SharedLibrary::open(path, &st);
  if (!out->library) return st;
  out->entry = reinterpret_cast<PTO2KernelEntryFn>(out->library->symbol(PTO2_KERNEL_ENTRY_SYMBOL, &st));
  return st;
}

Status load_orchestration(const std::string& path, OrchestrationLibrary* out) {
  Status st;
  out->library = SharedLibrary::open(path, &st);
  if (!out->library) return st;
  out->config =
      reinterpret_cast<PTO2OrchestrationConfigFn>(out->library->symbol(PTO2_ORCHESTRATION_CONFIG_SYMBOL, &st));
  if (!st.ok()) return st;
  out->entry = reinterpret_cast<PTO2OrchestrationEntryFn>(out->library->symbol(PTO2_ORCHESTRATION_ENTRY_SYMBOL, &st));
  return st;
}

}  // namespace pto2::sim
