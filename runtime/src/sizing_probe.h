// Sizing after a failure: what the whole run would need.
//
// When a run fails because a ring, pool or heap is too small for what its open
// scopes hold (codes 10..15), the tasks seen so far say too little: the rest
// of the open scope will hold more. So the run goes on listening. Later
// submits are not executed (they return the sticky error as before) but
// measured: their ring, their packed output bytes, the dependency-list entries
// and TensorMap entries they would take. When the orchestration returns, the
// recommendation covers every limit the whole run exceeds, and following it
// once makes the same run pass.
//
// The model: in each ring, the oldest task that an open scope still holds pins
// itself and every later task of that ring (rings retire in order). A ring of
// window W can allocate while fewer than W - 1 tasks are active, so it needs
// W >= pinned + 2. The heap needs twice the bytes pinned (an allocation never
// straddles the end, so up to one allocation's worth is skipped; twice the
// pinned bytes always leaves a contiguous piece). The dependency-list pool of
// a ring needs the entries its pinned tasks took plus the new task's; the
// TensorMap pool, shared by all rings, the entries of every pinned task.
//
// Orchestrator-private: no locking.
#pragma once

#include <cstdint>
#include <vector>

#include "pto2/config.h"
#include "pto2/errors.h"

namespace pto2 {

// The failures this sizing answers (codes 10..15).
inline bool is_sizing_failure(int32_t code) { return code >= kScopeExceedsWindow && code <= kHeapRequestTooLarge; }

class SizingProbe {
 public:
  static constexpr uint64_t kNoTask = ~0ull;

  // The minimum sizes the measured run needs (0 = no constraint measured).
  struct Needs {
    uint64_t task_window = 0;
    uint64_t heap_size = 0;
    uint64_t dep_pool_size = 0;
    uint64_t tensormap_pool_size = 0;
  };

  // Seeding, from the runtime's state at the failure: ring r's next seq and
  // the first seq an open scope holds in it (or kNoTask)...
  void seed_ring(uint32_t ring, uint64_t oldest_held, uint64_t next_seq);
  // ...what each live task from that oldest one on took...
  void seed_task(uint32_t ring, uint64_t heap_bytes, uint64_t dep_entries, uint64_t tensormap_entries);
  // ...and the open scopes, outermost first, with the first seq each holds.
  void seed_scope(uint64_t first_seq);

  // A task as a submit in the current scope would make it; returns its
  // (virtual) seq in `ring`.
  uint64_t submit(uint32_t ring, uint64_t heap_bytes, uint64_t dep_entries, uint64_t tensormap_entries);
  void scope_begin() { scopes_.push_back(kNoTask); }
  void scope_end() {
    if (scopes_.size() > 1) scopes_.pop_back();
  }

  uint64_t next_seq(uint32_t ring) const { return rings_[ring].next; }
  uint64_t measured_submits() const { return measured_; }
  const Needs& needs() const { return needs_; }

 private:
  struct Ring {
    uint64_t base = 0;  // seq of cum[0]
    uint64_t next = 0;
    // Prefix sums from `base`: element i covers seqs base .. base + i - 1.
    std::vector<uint64_t> heap{0}, dep{0}, tensormap{0};
  };
  uint64_t oldest_held(uint32_t ring) const;
  void account(uint32_t ring);

  Ring rings_[kMaxRings];
  std::vector<uint64_t> scopes_;  // per open scope, the first seq it holds (kNoTask: none yet)
  Needs needs_;
  uint64_t measured_ = 0;
};

}  // namespace pto2
