#include "engine_fork.h"

#include <malloc.h>
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
  // Free heap pages go back before the fork, so that they are not shared
  // copy-on-write with the child. Otherwise the parent's next mallocs, which
  // sort the freed chunks into bins, write to those shared pages: a
  // copy-on-write fault each, each a TLB shootdown across the CPUs. On a
  // 2-vCPU VM beside two busy loops one such malloc - a new run thread's
  // first - took 40-170 ms (perf: do_wp_page under _int_malloc), in 12 of
  // 180 runs' starts; with the trim none of 140 passed 11 ms. The trim costs
  // about what the fork does (0.06-1.9 ms against 0.6-1.1 ms in runs_test).
  malloc_trim(0);
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
