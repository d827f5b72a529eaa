// The engine's one fork(): the shared-region list is held across it (a child
// must not inherit it locked), buffered output is flushed first (or it is
// written twice), and the process's ForkHooks run around it.
#pragma once

#include <sys/types.h>

namespace pto {

pid_t engine_fork();

}  // namespace pto
