#include "pto/base/freed_memory.h"

#include <malloc.h>

#include <climits>
#include <string>

namespace pto {
namespace {
constexpr int kMmapThreshold = 32 << 20;  // glibc's largest on 64-bit
}  // namespace

// glibc maps a block of 128 KiB or more on its own until one is freed, then
// raises that threshold to the freed block's size and its trim threshold to
// twice it (at most 32 and 64 MiB), and gives an arena's free top back to the
// kernel once it passes the trim threshold. A stream of 1-4 MiB messages
// (read, parsed, copied, freed), several alive at once, keeps passing it: on
// a VM where a page fault is dear, a tensor's upload through gRPC read
// 0.31-0.77 GB/s with the pages given back and 1.44-1.90 GB/s kept
// (docs/daemon.md, "Memory ptod keeps").
Status keep_freed_memory(uint64_t bytes) {
  if (bytes == 0) return Status::Ok();
  if (bytes < kMinFreedMemoryKept || bytes > uint64_t{INT_MAX})
    return Status::Error(kWorkerInvalidArgument,
                         "keep_freed_memory: " + std::to_string(bytes) +
                             " bytes: must be 0 or in 67108864..2147483647 (64 MiB to mallopt's 2^31-1; less would "
                             "keep fewer pages than glibc's own thresholds)");
  // The mmap threshold first: glibc refuses one over its limit (and an
  // allocator that is not glibc's may refuse any), and a refusal must leave
  // glibc's adjusting on; the trim threshold it takes whatever its value.
  // glibc marks mallopt "MT-Unsafe init" (a first call may set malloc up); it
  // takes the main arena's lock, and malloc is up in every caller here.
  if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1)  // NOLINT(concurrency-mt-unsafe)
    return Status::Error(kWorkerInvalidArgument,
                         "keep_freed_memory: mallopt(M_MMAP_THRESHOLD, " + std::to_string(kMmapThreshold) +
                             ") was refused (an allocator that is not glibc's, such as AddressSanitizer's): "
                             "nothing changed");
  if (mallopt(M_TRIM_THRESHOLD, static_cast<int>(bytes)) != 1)  // NOLINT(concurrency-mt-unsafe): as above
    return Status::Error(kWorkerInvalidArgument,
                         "keep_freed_memory: mallopt(M_TRIM_THRESHOLD, " + std::to_string(bytes) + ") was refused");
  return Status::Ok();
}

bool give_back_freed_memory() { return malloc_trim(0) == 1; }

}  // namespace pto
