// engine_fork(): free heap pages are not shared copy-on-write with the child.
// (Shared, the parent's next mallocs wrote to them - a fault and a TLB
// shootdown per page - and a run thread's first malloc after a fork took up
// to 170 ms on a busy 2-vCPU VM: worker/src/engine_fork.cpp.)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine_fork.h"

namespace {

// kB of this process's pages that another process maps too (a forked child:
// copy-on-write until either writes), from /proc/self/smaps_rollup.
[[maybe_unused]] uint64_t shared_dirty_kb() {  // unused under the sanitizers
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Shared_Dirty:", 0) == 0) return std::stoull(line.substr(13));
  return 0;
}

}  // namespace

TEST_CASE("engine_fork leaves the parent's free heap pages out of the child") {
#if defined(PTO_UNDER_ASAN) || defined(PTO_UNDER_TSAN)
  // A sanitizer's allocator is not glibc's: malloc_trim has nothing of it to
  // give back (and ASan's quarantine keeps freed blocks resident anyway).
  WARN("not checked under a sanitizer: its allocator is not glibc's");
#else
  // 32 MiB of heap blocks (below the mmap threshold), written, then freed;
  // a block allocated after them keeps them off the top of the heap, where
  // free() would give them back by itself.
  constexpr size_t kBlock = 64 * 1024, kBlocks = 512;
  std::vector<char*> blocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    char* b = static_cast<char*>(std::malloc(kBlock));
    if (b) std::memset(b, 1, kBlock);
    blocks.push_back(b);
  }
  char* fence = static_cast<char*>(std::malloc(kBlock));
  REQUIRE(fence != nullptr);
  REQUIRE(std::find(blocks.begin(), blocks.end(), nullptr) == blocks.end());
  for (char* b : blocks) std::free(b);

  const uint64_t before = shared_dirty_kb();
  const pid_t pid = pto::engine_fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(20);  // bounded, should the parent not kill it
    for (;;) pause();
  }
  const uint64_t shared = shared_dirty_kb() - before;
  kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  std::free(fence);
  INFO(shared << " kB of this process's pages shared with the child after the fork");
  // Without the trim the 32 MiB freed stayed resident and shared (33,444 kB
  // in all); with it what is shared is what is in use (the binary's data,
  // the heap's live blocks, the stack): 596-992 kB.
  CHECK(shared < 16 * 1024);
#endif
}
