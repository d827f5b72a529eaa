// How much freed memory a process's allocator keeps for its next
// allocations: ptod's [daemon] malloc_keep_bytes, ptoctl, the benchmarks.
#pragma once

#include <cstdint>

#include "pto/base/status.h"

namespace pto {

// The least that keeps more than glibc's own thresholds would (its trim
// threshold grows up to 64 MiB by itself).
inline constexpr uint64_t kMinFreedMemoryKept = uint64_t{64} << 20;

// Keeps up to `bytes` (0, or kMinFreedMemoryKept..2^31-1) of freed memory at
// the top of each of glibc's arenas instead of giving it back to the kernel,
// and serves blocks of up to 32 MiB (glibc's largest) from the arenas instead
// of mapping each on its own. For a program that moves large messages (a
// tensor's chunks through gRPC), where pages faulted in afresh for each
// message cost more than the copy. Process-wide and for good, inherited by
// children forked without exec: call it once, early. The cost: each arena
// (up to 8 per CPU) may hold that much free, and free blocks under a live
// one stay too. 0 leaves glibc's own thresholds. An error (a value out of
// range, an allocator that refuses mallopt, as AddressSanitizer's does)
// changes nothing. An allocator preloaded in glibc's place (jemalloc,
// tcmalloc) accepts and ignores it.
Status keep_freed_memory(uint64_t bytes);

// Gives every arena's free pages back to the kernel now (glibc's
// malloc_trim(0): the free top of each arena, and whole free pages under
// live blocks); true when some were. For a process that kept freed memory
// and has gone idle: the next messages fault their pages in again. Takes
// each arena's lock in turn; false, and nothing done, under an allocator
// that is not glibc's.
bool give_back_freed_memory();

}  // namespace pto
