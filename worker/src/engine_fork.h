// The engine's one fork(): the shared-region list is held across it (a child
// must not inherit it locked), buffered output is flushed first (or it is
// written twice), and the process's ForkHooks run around it. The child
// unmaps every confined mapping (another runner's channel) but `keep`: a
// process runs one tenant's code and must not reach another's channel. The
// heap's free pages are given back first (malloc_trim), so that they are not
// shared copy-on-write with the child (docs/worker.md, "Free heap pages stay
// out of the child").
#pragma once

#include <sys/types.h>

namespace pto {

pid_t engine_fork(const void* keep = nullptr);

}  // namespace pto
