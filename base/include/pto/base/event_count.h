// Spin-then-park waiting for threads of one process.
//
// The machine this runs on may have fewer CPUs than threads, so no wait spins
// forever: a waiter spins for a short budget (comparable to the ~20 us cost of
// a cross-CPU wake-up), then parks on a futex with a timeout. notify() costs
// one atomic load when nobody is parked, so producers can call it on every
// state change.
#pragma once

#include <atomic>
#include <cstdint>

#include "pto/base/clock.h"

namespace pto {

class EventCount {
 public:
  // Waiter protocol: key = prepare_wait(); re-check the condition; then either
  // cancel_wait() or commit_wait(key, timeout). A notify() between
  // prepare_wait() and commit_wait() makes commit_wait() return at once.
  uint32_t prepare_wait() {
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    return epoch_.load(std::memory_order_seq_cst);
  }
  void cancel_wait() { waiters_.fetch_sub(1, std::memory_order_seq_cst); }
  // Parks until notified or timeout_ns passes (spurious returns are allowed).
  void commit_wait(uint32_t key, uint64_t timeout_ns);

  void notify() {
#if defined(PTO_UNDER_TSAN)
    // ThreadSanitizer does not model fences. An RMW on waiters_ orders the
    // same way: a waiter whose increment comes later in waiters_'s
    // modification order reads from this release and sees our state change.
    if (waiters_.fetch_add(0, std::memory_order_acq_rel) > 0) wake_all();
#else
    // The seq_cst fence pairs with the waiter's seq_cst increment: either the
    // waiter's re-check sees the producer's state change, or we see the
    // waiter. A fence plus a load keeps waiters_'s line shared among the many
    // notifiers, where an RMW would bounce it on every call.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_relaxed) > 0) wake_all();
#endif
  }

 private:
  void wake_all();
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int32_t> waiters_{0};
};

// Waits until cond() is true: spins for spin_ns, then parks on ec in slices of
// at most park_slice_ns, calling on_slice() after each slice (liveness checks,
// BLOCKED warnings). on_slice returning false aborts the wait.
// Returns true when cond() became true.
template <typename Cond, typename OnSlice>
bool spin_then_park(EventCount& ec, uint64_t spin_ns, uint64_t park_slice_ns, Cond&& cond, OnSlice&& on_slice) {
  if (cond()) return true;
  const uint64_t spin_start = now_ns();
  for (uint32_t i = 1;; ++i) {
    cpu_relax();
    if (cond()) return true;
    if ((i & 63) == 0 && now_ns() - spin_start >= spin_ns) break;
  }
  for (;;) {
    uint32_t key = ec.prepare_wait();
    if (cond()) {
      ec.cancel_wait();
      return true;
    }
    ec.commit_wait(key, park_slice_ns);
    if (cond()) return true;
    if (!on_slice()) return false;
  }
}

}  // namespace pto
