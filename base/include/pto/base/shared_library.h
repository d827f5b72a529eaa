// A shared library loaded with dlopen (RTLD_NOW | RTLD_LOCAL: unresolved
// symbols fail at open, and every library can export its own symbols of the
// same name). Opened from the path given; it stays loaded while the object
// lives. Every error names the file and the symbol.
#pragma once

#include <memory>
#include <string>

#include "pto/base/status.h"

namespace pto {

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

}  // namespace pto
