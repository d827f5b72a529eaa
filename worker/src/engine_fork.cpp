#include "engine_fork.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <utility>
#include <vector>

#include "pto/fork_hooks.h"
#include "shared_memory.h"

namespace pto {

namespace {
std::atomic<void (*)()> g_prepare{nullptr}, g_parent{nullptr}, g_child{nullptr};
}  // namespace

void set_fork_hooks(const ForkHooks& hooks) {
  g_prepare = hooks.prepare;
  g_parent = hooks.parent;
  g_child = hooks.child;
}

pid_t engine_fork(const void* keep) {
  std::fflush(nullptr);
  // The hooks run outside the region lock: an interpreter's prepare may wait
  // for its own lock, whose holder never waits for the engine's.
  if (auto f = g_prepare.load()) f();
  pid_t pid;
  std::vector<std::pair<uint64_t, uint64_t>> others;
  {
    auto regions = lock_shared_regions();
    others = confined_regions_but(regions, keep);
    pid = fork();
  }
  if (pid == 0) {
    for (const auto& [base, bytes] : others) (void)munmap(reinterpret_cast<void*>(base), bytes);
    if (auto f = g_child.load()) f();
  } else if (auto f = g_parent.load()) {
    f();
  }
  return pid;
}

}  // namespace pto
