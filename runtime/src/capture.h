// Captured regions (docs/runtime.md §16): the task graph a PTO2_CAPTURE region
// submitted on its first execution — kernels, parameters, edges, scopes and
// output allocations — kept so that later executions replay it without
// running the region's code or the TensorMap, its bindings' addresses rebound.
//
// A recorded task names each tensor by where its buffer comes from: one of
// the region's bindings (the caller's tensors, rebound on every replay), the
// task's own packed outputs, or the packed outputs of an earlier task of the
// region (both allocated afresh on every replay). Edges are indices into the
// region. Accesses of bindings are ordered against the world outside the
// region by two dependency-only tasks a replay adds, an entry and an exit
// (see finalize()).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "pto2/orchestration_api.h"

namespace pto2 {

struct CaptureStats {
  uint64_t regions_recorded = 0;
  uint64_t regions_replayed = 0;
  uint64_t tasks_replayed = 0;
  uint64_t mismatches = 0;  // a recorded region no longer matched its bindings or code: recorded again
  uint64_t unreplayable = 0;  // a replay could never fit the rings: the region's code ran as plain submission
};

enum class CaptureSource : uint8_t {
  kBinding,    // ref: binding index
  kOwnOutput,  // offset into this task's packed outputs
  kInternal,   // ref: the producing task's index in the region; offset into its packed outputs
};

struct CapturedParam {
  uint8_t kind = 0;  // PTOParamType
  CaptureSource source = CaptureSource::kBinding;
  uint32_t ref = 0;
  uint64_t offset = 0;
  uint64_t scalar = 0;
  Tensor view{};  // as recorded; a replay rebinds addr and owner
};

struct CapturedTask {
  int32_t kernel_id = 0;
  int32_t worker_type = 0;   // as stored in the descriptor (dependency-only: kWorkerDummy)
  int32_t kernel_slot = -1;  // index into CapturedRegion::kernels; -1: no kernel
  int32_t num_params = 0;
  int32_t block_dim = 1;
  int32_t block_base = 0;
  int32_t block_num = 1;
  uint64_t out_bytes = 0;  // the packed output allocation
  uint32_t first_param = 0;
  uint32_t first_producer = 0;
  uint32_t num_producers = 0;
  uint32_t num_consumers = 0;  // later tasks of the region that name it as a producer
  bool touches_binding = false;
  bool after_entry = false;  // waits for the replay's entry task
};

struct ScopeEvent {
  uint32_t before_task;  // happens before the region's task of this index
  bool begin;
};

struct CapturedRegion {
  uint64_t key = 0;
  std::vector<Tensor> bindings;          // the recording's bindings (addr and owner are not compared)
  std::vector<uint8_t> binding_written;  // per binding: some task writes it
  std::vector<uint8_t> overlaps;         // n x n: the bindings' buffers overlap
  std::vector<int64_t> deltas;           // n x n: for an overlapping pair, how far apart their bases are
  struct Kernel {
    int32_t id;
    int32_t worker_type;
  };
  std::vector<Kernel> kernels;  // distinct kernels, resolved once per replay
  std::vector<CapturedTask> tasks;
  std::vector<CapturedParam> params;
  std::vector<uint32_t> producers;
  std::vector<uint32_t> exit_deps;  // tasks the replay's exit task waits for
  std::vector<ScopeEvent> scopes;

  // What a replay takes of a ring at once, at most (finalize()). A replayed
  // task holds its slot, its output bytes and its dependency entries until
  // its last consumer in the region has been submitted (it is counted in
  // its references from the start), where plain submission let it retire
  // with its scope; and a ring frees in order. So when a task is allocated,
  // everything of its ring from the oldest task still held on is live: if
  // that exceeds the ring, the replay can never finish.
  struct RingNeed {
    uint64_t slots = 0, bytes = 0, deps = 0;
    uint32_t held = 0;  // tasks held for later consumers then
  };
  // By relative scope depth (1: the region's own scope), each depth in a ring
  // of its own; merged[m]: one ring taking every depth >= m (deep scopes
  // share the last ring).
  std::vector<RingNeed> separate;
  std::vector<RingNeed> merged;
  bool warned_unreplayable = false;

  // While recording: task id -> index, each task's packed output base, and
  // the accesses of the region's tasks per binding (byte spans from the
  // binding's base) and per buffer the region allocated (by the index of
  // the task whose packed outputs it is; spans from their base), from
  // which binding_edges() and internal_edges() order them.
  std::unordered_map<uint64_t, uint32_t> index_of;
  std::vector<uint64_t> packed_base;
  struct Access {
    uint32_t task;
    uint64_t lo, hi;
    bool writer;
  };
  std::vector<std::vector<Access>> accesses;
  std::unordered_map<uint32_t, std::vector<Access>> internal_accesses;

  // A new recording with these bindings (validated by the caller).
  CapturedRegion(uint64_t k, Tensor* const* b, int32_t n);

  // Empty when bindings can be replayed into this recording, else why not.
  std::string mismatch(Tensor* const* b, int32_t n) const;
  // After the region's code ran: the entry and exit edges, and the
  // recording-only state dropped.
  void finalize();
  // separate and merged, from the edges and scopes (finalize()).
  void measure_ring_needs();
  // The first difference between two recordings of one key ("" if none).
  std::string first_difference(const CapturedRegion& other) const;
  int32_t kernel_slot(int32_t id, int32_t worker_type);
  // Task `task` accesses binding `binding` through `view`: appends to
  // *producers the earlier tasks of the region whose accesses of that
  // binding conflict with it (a writer with anything, a reader with
  // writers; byte spans overlapping), then records the access. The
  // TensorMap's answer is not enough while recording: it forgets a task
  // that has retired (one of an inner scope that has ended, say), and on a
  // replay that task may still be running. A writer's access drops the
  // older accesses it covers: later ones are ordered through it.
  // Bindings that overlap (at the distance mismatch() holds a replay to)
  // are ordered against each other's accesses too.
  void binding_edges(uint32_t binding, uint32_t task, const Tensor& view, bool writer,
                     std::vector<uint32_t>* producers);
  // The same for a buffer the region allocated: the packed outputs of its
  // task `owner`, which `view` starts `offset` bytes into.
  void internal_edges(uint32_t owner, uint32_t task, uint64_t offset, const Tensor& view, bool writer,
                      std::vector<uint32_t>* producers);
};

// Whether two buffers' byte extents overlap.
bool buffers_overlap(const Tensor& a, const Tensor& b);

// The recorded regions by key, least recently used evicted first once they
// hold more than a budget of tasks.
class CaptureCache {
 public:
  void set_budget(uint64_t tasks) { budget_ = tasks; }
  uint64_t budget() const { return budget_; }
  CapturedRegion* find(uint64_t key);
  // False when the region alone exceeds the budget (it is dropped).
  bool insert(std::unique_ptr<CapturedRegion> region);
  void erase(uint64_t key);
  uint64_t tasks_held() const { return held_; }
  size_t size() const { return map_.size(); }

 private:
  using List = std::list<std::unique_ptr<CapturedRegion>>;
  List lru_;  // most recently used first
  std::unordered_map<uint64_t, List::iterator> map_;
  uint64_t held_ = 0;
  uint64_t budget_ = 1u << 20;
};

}  // namespace pto2
