// CRC-32C (Castagnoli, the iSCSI / ext4 / gRPC checksum): what a client sends
// at the end of a tensor upload and the daemon at the end of a download
// (docs/proto.md). The SSE 4.2 instruction in three interleaved chains when
// the CPU has it (~12 GB/s here; one chain ran at ~6.8), a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pto {

// Extends `crc` (0 to start) over n bytes; crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace pto
