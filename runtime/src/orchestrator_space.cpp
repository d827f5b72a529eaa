// The Orchestrator's waits for ring space (docs/runtime.md §4 and §8): a
// task slot, the heap for a task's packed outputs, dependency-list entries.
// submit_one and a replay call these only when the fast path found the ring
// full; each waits with wait_for's spin, park, BLOCKED warnings and deadlock
// diagnosis, and on failure publishes the slot as a no-op and fails the run.
#include <fmt/format.h>

#include "orchestrator_wait.h"

namespace pto2 {

bool Orchestrator::alloc_slot(uint32_t ring, uint64_t* seq) {
  TaskRing& tr = s_.rings[ring];
  if (tr.try_alloc(seq)) return true;
  return wait_for([&] { return tr.try_alloc(seq); }, [&] { return diagnose_task_ring(ring); },
                  [&] {
                    const uint64_t active = tr.next_seq() - tr.last_alive();
                    return fmt::format(
                        "[TaskRing] BLOCKED (Flow Control): ring={} current={}, last_alive={}, "
                        "active={}/{} ({:.1f}%)",
                        ring, tr.next_seq(), tr.last_alive(), active, tr.window(),
                        100.0 * double(active) / double(tr.window()));
                  });
}

bool Orchestrator::alloc_outputs(uint32_t ring, uint64_t seq, uint64_t bytes, uint64_t* base) {
  HeapRing& heap = heaps_[ring];
  if (heap.try_alloc(bytes, base) == HeapRing::Alloc::kOk) return true;
  if (bytes > heap.size()) {
    publish_as_noop(ring, seq);
    fail(kHeapRequestTooLarge, fmt::format("task needs {} bytes of packed outputs but heap ring {} has {} bytes in "
                                           "all.",
                                           bytes, ring, heap.size()));
    return false;
  }
  TaskRing& tr = s_.rings[ring];
  const bool ok =
      wait_for([&] { return heap.try_alloc(bytes, base) == HeapRing::Alloc::kOk; },
               [&]() -> Status {
                 if (!ring_blocked_by_scope(ring, seq)) return Status::Ok();
                 return Status::Error(
                     kHeapRingDeadlock,
                     fmt::format("FATAL: Heap ring {} deadlock: requesting {} bytes, used {} of {} (top={}, tail={}); "
                                 "the oldest live task {} is held by an open scope, so nothing can be reclaimed.",
                                 ring, bytes, heap.used(), heap.size(), heap.top(), heap.tail(),
                                 make_task_id(ring, tr.last_alive())));
               },
               [&] {
                 return fmt::format("[HeapRing] BLOCKED: ring={} requesting {} bytes, used={}/{}, top={}, tail={}",
                                    ring, bytes, heap.used(), heap.size(), heap.top(), heap.tail());
               });
  if (!ok) publish_as_noop(ring, seq);
  return ok;
}

bool Orchestrator::reserve_deps(uint32_t ring, uint64_t seq, uint64_t needed) {
  DepPool& deps = deps_[ring];
  if (deps.can_reserve(needed)) return true;
  if (needed > deps.size()) {
    publish_as_noop(ring, seq);
    fail(kDepPoolDeadlock, fmt::format("task needs {} dependency-list entries (two per producer), but the pool of "
                                       "ring {} has {}.",
                                       needed, ring, deps.size()));
    return false;
  }
  const bool ok = wait_for([&] { return deps.can_reserve(needed); },
                           [&]() -> Status {
                             if (!ring_blocked_by_scope(ring, seq)) return Status::Ok();
                             return Status::Error(
                                 kDepPoolDeadlock,
                                 fmt::format("FATAL: Dependency list pool of ring {} deadlock: task needs {} entries, "
                                             "{} of {} in use by tasks that cannot retire while their scope is open.",
                                             ring, needed, deps.used(), deps.size()));
                           },
                           [&] {
                             return fmt::format("[DepPool] BLOCKED: ring={} requesting {} entries, used={}/{}", ring,
                                                needed, deps.used(), deps.size());
                           });
  if (!ok) publish_as_noop(ring, seq);
  return ok;
}

}  // namespace pto2
