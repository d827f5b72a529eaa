// The clock and the spin hint every wait of the project uses.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>

namespace pto {

// steady_clock in nanoseconds.
inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// The CPU's spin-wait hint (one ~24 ns pause on x86).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// One step of a spin loop: a pause, and every 1024th step (~25 us) a yield,
// so that on a machine with fewer CPUs than spinners the thread or process
// being waited for can run.
inline void spin_step(uint32_t& i) {
  cpu_relax();
  if ((++i & 1023) == 0) sched_yield();
}

}  // namespace pto
