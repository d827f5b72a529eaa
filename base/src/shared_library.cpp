#include "pto/base/shared_library.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace pto {

std::unique_ptr<SharedLibrary> SharedLibrary::open(const std::string& path, Status* error) {
  // dlerror's state is per thread in glibc; clearing it first makes the
  // message below this call's.
  dlerror();  // NOLINT(concurrency-mt-unsafe)
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe): per-thread state
    if (error) *error = Status::Error(kInvalidArgument, fmt::format("cannot load '{}': {}", path, why ? why : "?"));
    return nullptr;
  }
  if (error) *error = Status::Ok();
  return std::unique_ptr<SharedLibrary>(new SharedLibrary(path, handle));
}

SharedLibrary::~SharedLibrary() { dlclose(handle_); }

void* SharedLibrary::symbol(const char* name, Status* error) const {
  dlerror();  // NOLINT(concurrency-mt-unsafe): per-thread state
  void* p = dlsym(handle_, name);
  if (p == nullptr) {
    if (error) *error = Status::Error(kInvalidArgument, fmt::format("'{}' does not export '{}'", path_, name));
    return nullptr;
  }
  if (error) *error = Status::Ok();
  return p;
}

}  // namespace pto
