// Waiting across processes: spin briefly, then park on a process-shared futex.
//
// std::atomic::wait uses FUTEX_WAIT_PRIVATE, whose wake-ups never reach
// another process, so the mailbox uses the shared futex operations on words
// inside MAP_SHARED memory. Every park has a timeout, so callers re-check
// liveness (is the peer still there?) at least that often.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <ctime>

#include "pto/base/clock.h"

namespace pto {

// Sleeps while *word == expected, at most timeout_ns (spurious returns allowed).
inline void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull), static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_shared(std::atomic<uint32_t>* word, int count = 1) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

// A wake-up word that many processes ring and one waiter parks on (the
// parent's "something finished" doorbell). Eventcount protocol: the waiter
// reads the key, announces itself, re-checks its condition, then parks unless
// the key moved; a ringer bumps the key, then wakes only if someone is parked.
struct alignas(64) SharedDoorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> parked{0};
  // A helper (a thread driving the parent's Worker besides its scheduler
  // thread) is awake and polling: it sees a child's answer without a ring.
  std::atomic<uint32_t> watched{0};

  void ring() {
    seq.fetch_add(1, std::memory_order_seq_cst);
    if (parked.load(std::memory_order_seq_cst) != 0) futex_wake_shared(&seq, 1 << 30);
  }
  // A child's answer: as ring(), but it wakes nobody while a helper polls —
  // the scheduler thread, parked, would only stand aside again; the helper
  // wakes it when it stops driving with work left. A helper about to park
  // clears `watched` before prepare() (the same eventcount order, so no
  // answer is missed).
  void ring_answer() {
    seq.fetch_add(1, std::memory_order_seq_cst);
    if (parked.load(std::memory_order_seq_cst) != 0 && watched.load(std::memory_order_seq_cst) == 0)
      futex_wake_shared(&seq, 1 << 30);
  }
  uint32_t prepare() {
    parked.fetch_add(1, std::memory_order_seq_cst);
    return seq.load(std::memory_order_seq_cst);
  }
  void cancel() { parked.fetch_sub(1, std::memory_order_seq_cst); }
  // Parks unless the key moved; true when it moved (someone rang), false
  // when the park ended for its timeout (or spuriously) with nothing rung.
  bool commit(uint32_t key, uint64_t timeout_ns) {
    if (seq.load(std::memory_order_seq_cst) == key) futex_wait_shared(&seq, key, timeout_ns);
    parked.fetch_sub(1, std::memory_order_seq_cst);
    return seq.load(std::memory_order_seq_cst) != key;
  }
};

}  // namespace pto
