// SHA-256 (OpenSSL) of bytes and of files, and digests as hex: how callables
// and bundles are named by their content.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "pto/base/status.h"

namespace pto {

using Digest = std::array<uint8_t, 32>;
std::string to_hex(const Digest& d);
Digest sha256(const void* data, size_t bytes);
// The file's digest; an error names the file when it cannot be read.
Status file_sha256(const std::string& path, Digest* out);

}  // namespace pto
