// TensorMap (docs/runtime.md §5): which submitted-but-not-retired tasks touch which
// regions of which buffers, so a new task can find what it must wait for.
//
// * Key: the buffer's base address (Tensor::addr). Views of one buffer hash to
//   the same bucket and are compared per dimension (hyper-rectangles over the
//   buffer's raw_shape); views with different raw shapes fall back to byte ranges.
// * Writers (OUTPUT/INOUT) and readers (INPUT) are both recorded, so the
//   runtime orders read-after-write, write-after-write and write-after-read.
//   A reader looks up writers; a writer looks up writers and readers.
// * Chains: each bucket has one chain per (ring, kind). Inserts prepend, so a
//   chain is newest-first and, within one ring, in descending seq. An entry is
//   stale once its task's seq < last_task_alive of its ring.
// * Stale-entry defence (docs/runtime.md §5):
//     1. lookup truncates a chain at its first stale entry (the rest is older);
//     2. cleanup_retired() frees every entry of tasks retired since the last
//        cleanup through per-task entry chains (every cleanup_interval tasks,
//        and before a slot is reused);
//     3. reserve() fails when the pool is exhausted even after cleanup, and the
//        orchestrator waits (back-pressure) or diagnoses a deadlock.
// * A writer that COVERS an older entry removes it from its chain: the writer
//   depends on it, so later tasks reach it transitively through the writer.
// * Any two tensors whose bytes overlap are ordered, whatever their base
//   addresses: external buffers are also registered in ExternalBases, and a
//   lookup of an external tensor walks the chains of every other external base
//   whose extent overlaps its own, comparing absolute byte ranges there (never
//   unlinking: coverage is only decided within one base). Runtime-allocated
//   buffers never overlap one another while alive, and an external tensor may
//   not lie inside the heap rings (the orchestrator refuses it).
//
// Orchestrator-private: no locking.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "external_bases.h"
#include "pto2/config.h"
#include "pto2/orchestration_api.h"

namespace pto2 {

enum class Overlap { kNone, kCovered, kOther };

// Overlap of two views of the same buffer: kCovered when `outer` contains all
// of `inner`, kOther for a partial overlap.
Overlap view_overlap(const Tensor& outer, const Tensor& inner);

class TensorMap {
 public:
  enum Kind : uint8_t { kWriter = 0, kReader = 1 };

  // last_alive[r] points at ring r's last_task_alive; window is the per-ring
  // task window (per-task chains are indexed by slot).
  TensorMap(uint64_t pool_size, uint64_t num_buckets, uint64_t window, std::atomic<uint64_t>* const* last_alive);
  ~TensorMap();
  TensorMap(const TensorMap&) = delete;
  TensorMap& operator=(const TensorMap&) = delete;
  // False when the entry pool could not be mapped.
  bool valid() const { return pool_ != nullptr; }

  // Appends to *tasks the ids of live tasks whose entries overlap t: writers
  // only when as_writer is false, writers and readers when true. A writer
  // lookup also removes the entries t covers (see above). task_id is the task
  // being submitted: an external t's base is registered for it.
  void lookup(const Tensor& t, bool as_writer, uint64_t task_id, std::vector<uint64_t>* tasks);

  // True when n entries can be inserted; runs cleanup first if needed.
  bool reserve(uint64_t n);
  // Records task as writer/reader of t. Requires a prior successful reserve().
  void insert(const Tensor& t, uint64_t task_id, Kind kind);

  // Layer 2: frees entries of tasks retired since the last cleanup.
  // force=false only acts every cleanup_interval retired tasks.
  void sync(bool force);
  // Before a slot of `ring` is reused: frees the previous occupant's entries.
  void before_slot_reuse(uint32_t ring, uint64_t seq);

  // The entries the next inserts will write, and the per-task chain head of
  // the next task (ring, seq).
  void prefetch_next(uint32_t ring, uint64_t seq) const;

  // Between runs (no task alive): forgets the external bases.
  void begin_run() { bases_.clear(); }

  void set_cleanup_interval(uint32_t n) { cleanup_interval_ = n; }
  // External bases currently registered (for tests).
  uint32_t external_bases() const { return bases_.live(); }
  uint64_t pool_size() const { return pool_size_; }
  uint64_t free_entries() const { return free_list_.size() + (pool_size_ - bump_); }
  uint64_t entries_in_use(uint32_t ring) const { return in_use_[ring]; }
  // Entries currently linked in bucket chains (for tests).
  uint64_t linked_entries() const { return linked_; }

 private:
  // Two cache lines. The first holds what every chain walk reads — the base
  // address, the view's byte span, the task and the links — so walking past
  // entries whose spans miss the query touches one line each; the full view
  // (second line) is read only when the spans intersect.
  struct alignas(64) Entry {
    uint64_t addr;
    uint64_t span_lo, span_hi;  // bytes of the buffer the view's elements span
    uint64_t task_id;
    int32_t next_in_chain;
    int32_t prev_in_chain;  // -1: this entry is the chain head
    int32_t next_in_task;
    uint32_t bucket;
    uint8_t ring;
    uint8_t kind;
    bool in_chain;
    Tensor view;  // from byte 56: the hot fields above stay within the first line
  };
  static_assert(sizeof(Entry) == 128, "two cache lines");
  static_assert(offsetof(Entry, in_chain) < 64, "the fields a walk reads share the first line");
  static constexpr int kChains = 2 * kMaxRings;  // per bucket: [kind][ring]

  uint32_t bucket_of(uint64_t addr) const;
  int32_t& head(uint32_t bucket, int kind, int ring) { return heads_[bucket * kChains + kind * kMaxRings + ring]; }
  bool stale(const Entry& e) const;
  void unlink(int32_t idx);
  // Walks the live entries of `addr`'s bucket chains (writers; readers too
  // when with_readers), truncating stale tails; visit(entry index) may unlink.
  template <typename Visit>
  void walk(uint64_t addr, bool with_readers, Visit&& visit);
  void cleanup_ring(uint32_t ring, uint64_t upto);

  // Entries are handed out by a bump pointer and then a free list, so the
  // pool is an untouched mapping committed page by page as it is first used:
  // a large pool costs address space, not start-up time.
  Entry* pool_ = nullptr;
  uint64_t pool_size_ = 0;
  uint64_t bump_ = 0;
  std::vector<int32_t> free_list_;
  std::vector<int32_t> heads_;
  uint64_t bucket_shift_ = 0;
  uint64_t window_mask_ = 0;
  std::vector<int32_t> task_entry_head_[kMaxRings];  // per slot
  uint64_t cleaned_upto_[kMaxRings] = {};            // every seq below was cleaned
  uint64_t last_alive_snapshot_[kMaxRings] = {};
  std::atomic<uint64_t>* last_alive_[kMaxRings] = {};
  uint64_t in_use_[kMaxRings] = {};
  uint64_t linked_ = 0;
  uint32_t cleanup_interval_ = 64;
  ExternalBases bases_;
};

}  // namespace pto2
