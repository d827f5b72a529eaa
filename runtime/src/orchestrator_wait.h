// Orchestrator::wait_for, the one back-pressure loop of every submit-side
// wait (docs/runtime.md §4.5): try, spin briefly, then park in slices, with
// BLOCKED warnings, a deadlock diagnosis and the stall timeout. Included by
// the files of the Orchestrator that wait.
#pragma once

#include <fmt/format.h>

#include "log.h"
#include "orchestrator.h"

namespace pto2 {

inline constexpr uint64_t kParkSliceNs = 1000000;  // 1 ms between liveness checks while parked

template <typename Try, typename Diagnose, typename Describe>
bool Orchestrator::wait_for(Try&& try_once, Diagnose&& diagnose, Describe&& describe) {
  if (try_once()) return true;
  ++blocked_waits_;
  const uint64_t start = now_ns();
  uint64_t last_warn = start, last_progress = start;
  uint64_t seen = s_.completed_count.load(std::memory_order_acquire);
  const uint64_t warn_ns = uint64_t(s_.config.blocked_warn_ms) * 1000000;
  const uint64_t stall_ns = uint64_t(s_.config.stall_timeout_ms) * 1000000;
  const uint64_t spin_ns = uint64_t(s_.config.spin_before_park_us) * 1000;

  // Returns 1 when the wait is over (try_once succeeded), -1 when the run
  // failed, 0 to keep waiting. A diagnosis reads last_task_alive before it
  // decides; only a retry that still fails after it proves the deadlock
  // (tasks may have retired between the failed try and the diagnosis).
  auto check = [&]() -> int {
    if (Status st = diagnose(); !st.ok()) {
      if (try_once()) return 1;
      fail(st.code, st.message);
      return -1;
    }
    const uint64_t now = now_ns();
    const uint64_t c = s_.completed_count.load(std::memory_order_acquire);
    if (c != seen) {
      seen = c;
      last_progress = now;
    } else if (stall_ns != 0 && now - last_progress >= stall_ns) {
      fail(kStalled, fmt::format("{}: no task completed for {} ms", describe(), s_.config.stall_timeout_ms));
      return -1;
    }
    if (now - last_warn >= warn_ns) {
      component_logger("orchestrator")->warn("{}, waited={}ms", describe(), (now - start) / 1000000);
      last_warn = now;
    }
    return 0;
  };

  if (int r = check(); r != 0) return r > 0;
  for (uint32_t i = 1;; ++i) {  // spin briefly: the scheduler usually frees space within microseconds
    cpu_relax();
    if (try_once()) return true;
    if ((i & 63) == 0 && now_ns() - start >= spin_ns) break;
  }
  for (;;) {  // then park, re-checking liveness and deadlock every slice
    const uint32_t key = s_.orch_ec.prepare_wait();
    if (try_once()) {
      s_.orch_ec.cancel_wait();
      return true;
    }
    s_.orch_ec.commit_wait(key, kParkSliceNs);
    if (try_once()) return true;
    if (int r = check(); r != 0) return r > 0;
  }
}

}  // namespace pto2
