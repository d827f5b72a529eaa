// Loading user code from shared libraries with dlopen (seed 000 §10): kernels
// (`kernel_entry`) and orchestrations (`aicpu_orchestration_config`,
// `aicpu_orchestration_entry`). Libraries are opened from the path given —
// nothing is copied to a temporary file. Every error names the file and the
// problem. A loaded library stays open as long as its SharedLibrary lives.
#pragma once

#include <memory>
#include <string>

#include "pto2/errors.h"
#include "pto2/kernel_abi.h"
#include "pto2/orchestration_api.h"

namespace pto2::sim {

class SharedLibrary {
 public:
  // RTLD_NOW | RTLD_LOCAL: unresolved symbols fail here, and every kernel
  // library can export its own `kernel_entry`.
  static std::unique_ptr<SharedLibrary> open(const std::string& path, Status* error);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The symbol's address, or nullptr with *error naming the file and symbol.
  void* symbol(const char* name, Status* error) const;
  const std::string& path() const { return path_; }

 private:
  SharedLibrary(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}
  std::string path_;
  void* handle_;
};

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
