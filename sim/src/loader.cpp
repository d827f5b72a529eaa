#include "pto2/sim/loader.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace pto2::sim {

std::unique_ptr<SharedLibrary> SharedLibrary::open(const std::string& path, Status* error) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    if (error) *error = Status::Error(kInvalidArgument, fmt::format("cannot load '{}': {}", path, why ? why : "?"));
    return nullptr;
  }
  if (error) *error = Status::Ok();
  return std::unique_ptr<SharedLibrary>(new SharedLibrary(path, handle));
}

SharedLibrary::~SharedLibrary() { dlclose(handle_); }

void* SharedLibrary::symbol(const char* name, Status* error) const {
  dlerror();
  void* p = dlsym(handle_, name);
  if (p == nullptr) {
    if (error) *error = Status::Error(kInvalidArgument, fmt::format("'{}' does not export '{}'", path_, name));
    return nullptr;
  }
  if (error) *error = Status::Ok();
  return p;
}

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
