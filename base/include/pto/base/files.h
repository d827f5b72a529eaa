// Files named by their content (a library's digest, a bundle's directory):
// a file that exists already has the bytes its name promises, so it is never
// rewritten — it may be loaded in this very process; a new one is written to
// a temporary name (0600), fsynced and renamed into place, so nobody ever
// reads a half-written file, and a stored file survives a power loss.
#pragma once

#include <string>

#include "pto/base/status.h"

namespace pto {

// kStorageError naming the path when it cannot be written.
Status write_file_once(const std::string& path, const std::string& bytes);
// The whole file; kStorageError naming the path when it cannot be read.
Status read_file(const std::string& path, std::string* bytes);

}  // namespace pto
