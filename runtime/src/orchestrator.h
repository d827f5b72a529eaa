// Orchestrator (docs/runtime.md §6): runs on the thread that calls Runtime::run and
// turns pto2_rt_submit_task calls into published tasks.
//
// Submit steps (docs/runtime.md §6), reordered so that every wait happens before the
// task takes references on other tasks (a task that holds a reference while
// waiting for space could keep that space from ever being freed):
//   0  sync TensorMap (batch cleanup of retired tasks' entries), every 8th submit
//   1  allocate a task slot (back-pressure), 1b reset its state
//   2  fill the descriptor, copy parameters
//   3  TensorMap lookups -> producer list (no references taken yet)
//   5  heap allocation of the packed outputs (back-pressure)
//      reserve dep-list and TensorMap entries (back-pressure)
//   4  link producers with the fanout-lock protocol (docs/runtime.md §6);
//      a producer already completed is not linked unless it owns a buffer
//      the task names
//   6  insert this task's writes/reads into the TensorMap
//   7  finalize fanin; early-ready tasks go to the orchestrator ready queue
//   8  publish current_task_index (release)
//
// A wait that cannot end (the space it needs is held by tasks whose scope is
// still open, so only this thread could free it) is diagnosed at once and
// fails the run with a numeric error and a recommended size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capture.h"
#include "heap_ring.h"
#include "pto2/errors.h"
#include "pto2/orchestration_api.h"
#include "runtime_state.h"
#include "sizing_probe.h"
#include "tensor_map.h"

namespace pto2 {

class Orchestrator {
 public:
  explicit Orchestrator(RuntimeState& state);

  // Opens the run's implicit outermost scope (depth 0 -> ring 0).
  void begin_run();
  // Closes scopes the orchestration left open and marks orchestration done.
  void end_run();

  int64_t submit(int32_t kernel_id, int32_t worker_type, PTOParam* params, int32_t num_params,
                 const int64_t* extra_deps, int32_t num_extra_deps);
  // Every submit of the programming model (docs/runtime.md §15): pinned,
  // block_incore (batch descriptor, or expanded when config.block_mode says
  // so), a block of an expanded call.
  int64_t submit(const PTO2TaskSpec& spec);
  int32_t allocate_cluster();
  void free_cluster(int32_t cluster_id);
  void scope_begin();
  void scope_end();
  void orchestration_done();
  // pto2_rt_orchestration_done from the orchestration (refused in a captured region).
  void api_orchestration_done();
  int32_t read_tensor(const Tensor* t, void* dst, uint64_t dst_bytes);
  // Captured regions (docs/runtime.md §16, orchestrator_capture.cpp): 1 when
  // the caller must run the region's code (recording, or capture off), 0
  // when the region was replayed (or the run has failed) and its code is skipped.
  int32_t capture_begin(uint64_t key, Tensor* const* bindings, int32_t num_bindings);
  // completed = false: the code left the region early; its recording is dropped.
  void capture_end(bool completed);

  // Sticky error of the current run.
  const Status& error() const { return error_; }
  void fail(int32_t code, std::string message);

  uint64_t tasks_submitted() const { return submitted_; }
  // Slots of failed submits, published as no-ops: they complete, but are not tasks of the run.
  uint64_t noop_slots() const { return noops_; }
  uint64_t blocked_waits() const { return blocked_waits_; }
  const CaptureStats& capture_stats() const { return capture_stats_; }
  int scope_depth() const { return static_cast<int>(scope_begin_.size()) - 1; }

  PTO2Runtime* api() { return &api_; }
  // Called before the run's first task is published: the scheduler threads
  // join a run only when it has work, so a run that submits nothing wakes
  // no thread (docs/runtime.md §9).
  void set_run_starter(std::function<void()> start) { run_starter_ = std::move(start); }
  bool run_started() const { return run_started_; }
  // False when the TensorMap's entry pool could not be mapped.
  bool valid() const { return tensor_map_->valid(); }

 private:
  int current_ring() const;
  void close_innermost_scope();
  bool validate_params(int32_t worker_type, const PTOParam* params, int32_t n);
  // The spec's cluster, block and pipe fields (orchestrator_clusters.cpp).
  bool validate_placement(const PTO2TaskSpec& spec);
  int64_t submit_one(const PTO2TaskSpec& spec);
  // The baseline SPMD expansion: block_dim tasks and a join, their slots
  // reserved at once (block-aware flow control).
  int64_t submit_expanded(const PTO2TaskSpec& spec);
  bool reserve_slots(uint32_t ring, uint64_t n);
  // Releases the clusters the innermost scope allocated and did not free.
  void release_scope_clusters();
  Status diagnose_clusters() const;
  bool resolve_kernel(int32_t kernel_id, int32_t worker_type, uint64_t* addr);
  // Waits until try_once() succeeds; diagnose() returning a non-OK status
  // (a deadlock) ends the wait at once with that error.
  template <typename Try, typename Diagnose, typename Describe>
  bool wait_for(Try&& try_once, Diagnose&& diagnose, Describe&& describe);
  // Why ring r cannot free anything: its oldest live task is held by an open
  // scope (or nothing older than `below` is live). Empty if it can progress.
  bool ring_blocked_by_scope(uint32_t ring, uint64_t below) const;
  Status diagnose_task_ring(uint32_t ring);
  void publish_as_noop(uint32_t ring, uint64_t seq);
  // Takes a fanout reference on producer unless it is already consumed.
  bool take_fanout_ref(uint64_t producer);
  // How the consumer's reference on its producer is taken: kTake unless the
  // producer is already consumed; kHeld, an open scope holds the producer so
  // it cannot be consumed meanwhile; kCounted, the producer's refs already
  // count this consumer (a replay sets them when it fills the producer's slot).
  enum class ProducerRef : uint8_t { kTake, kHeld, kCounted };
  // Call link_bound first.
  void add_producer(uint64_t consumer, uint64_t producer, int32_t* edges, ProducerRef ref = ProducerRef::kTake);
  // Before linking at most max_edges producers to the task at (ring, seq).
  void link_bound(uint32_t ring, uint64_t seq, int32_t max_edges);
  // Keeps producer alive (not retired) until consumer completes, without
  // making consumer wait for it.
  void add_lifetime_ref(uint64_t consumer, uint64_t producer);
  // True when producer has completed and owns no buffer the task names: the
  // task has nothing to wait for and nothing to keep, so it is not linked.
  bool producer_settled(uint64_t producer) const;
  void dedup_producers();
  // tensor_map: also the TensorMap entries the next submit inserts (a replay inserts none).
  void prefetch_next(uint32_t ring, uint64_t seq, bool tensor_map = true);

  void ensure_run_started() {
    if (run_started_) return;
    run_started_ = true;
    if (run_starter_) run_starter_();
  }

  // Submit steps shared by submit_one and a replay. Each failing helper has
  // published the slot as a no-op and failed the run.
  bool alloc_slot(uint32_t ring, uint64_t* seq);
  void reset_slot(TaskSlotState& st, uint32_t blocks) {
    st.state.store(kSlotInitial, std::memory_order_relaxed);
    st.fanin_pending.store(1, std::memory_order_relaxed);  // submit in progress
    st.refs.store(2, std::memory_order_relaxed);           // owning scope + own completion
    st.fanout_head = 0;
    st.fanout_count = 0;
    st.completed = false;
    st.scan_id.store(TaskSlotState::kNoScanId, std::memory_order_relaxed);
    st.next_block = 0;
    st.blocks_left.store(blocks, std::memory_order_relaxed);
  }
  bool alloc_outputs(uint32_t ring, uint64_t seq, uint64_t bytes, uint64_t* base);
  bool reserve_deps(uint32_t ring, uint64_t seq, uint64_t needed);
  // Scope registration, step 7 (fanin: edges of the link_bound's max_edges
  // became edges) and step 8 (publish).
  void finish_task(uint32_t ring, uint64_t seq, int32_t edges, int32_t max_edges, int32_t cluster_id);

  // Capture (orchestrator_capture.cpp).
  // Fails the run when a captured region is open: what cannot be replayed.
  bool refuse_in_capture(const char* what);
  void record_task(const PTO2TaskSpec& spec, uint64_t id);
  bool replay(CapturedRegion& region, Tensor* const* bindings);
  // Empty when a replay of `region` from the current scope depth fits the
  // rings it would use, else which ring it overflows and by what.
  std::string replay_misfit(const CapturedRegion& region) const;
  bool replay_task(const CapturedRegion& region, uint32_t index, const uint64_t* function_addr);
  // Publishes the batch of replayed tasks filled so far (replay_task).
  void publish_replayed();
  // A replayed task's parameters, its buffers rebound; its producers linked.
  void fill_replayed_params(const CapturedRegion& region, const CapturedTask& t, uint64_t id, uint64_t base,
                            TaskDescriptor& d);
  int32_t link_replayed(const CapturedRegion& region, const CapturedTask& t, uint64_t id, bool entry,
                        TaskDescriptor& d, TaskSlotState& st, bool* deferred);
  // After task `failed` of a replay could not be published: drops the
  // references its producers hold for consumers that will now never be linked.
  void release_unlinked(const CapturedRegion& region, uint32_t failed);
  // The whole-buffer views of the bindings a replay's entry and exit tasks name.
  void binding_params(const CapturedRegion& region, Tensor* const* bindings, Tensor* views, PTOParam* params);

  // After a failure: sizing failures start measuring the rest of the run
  // (SizingProbe); every later submit is measured instead of run.
  int64_t submit_failed(PTOParam* params, int32_t n, const int64_t* extra_deps, int32_t num_extra_deps);
  void start_probe();
  int64_t probe_submit(PTOParam* params, int32_t n, const int64_t* extra_deps, int32_t num_extra_deps);
  std::string sizing_solution(bool final) const;
  void finish_probe();

  RuntimeState& s_;
  PTO2Runtime api_;
  HeapRing heaps_[kMaxRings];
  DepPool deps_[kMaxRings];
  std::unique_ptr<TensorMap> tensor_map_;
  std::vector<uint8_t> scope_held_[kMaxRings];  // per slot: owning scope still open
  std::vector<uint64_t> scope_tasks_;           // tasks of all open scopes, innermost last
  std::vector<size_t> scope_begin_;             // index into scope_tasks_ per open scope
  std::vector<uint64_t> producers_;             // scratch for one submit
  std::vector<uint64_t> owners_;                // of producers_, the owners of buffers the task names
  std::vector<uint64_t> kernel_addr_cache_[kNumWorkerTypes];
  Status error_;
  bool done_ = false;
  uint64_t submitted_ = 0;
  static constexpr uint64_t kSyncEvery = 8;  // submits between TensorMap syncs (step 0)
  uint64_t noops_ = 0;
  uint64_t blocked_waits_ = 0;
  uint64_t heap_begin_ = 0, heap_end_ = 0;                  // the heap rings' addresses
  std::unique_ptr<SizingProbe> probe_;                      // set after a sizing failure, for the rest of the run
  std::unique_ptr<TensorMap> probe_map_;                    // the measured tasks' accesses
  std::atomic<uint64_t> probe_last_alive_[kMaxRings] = {};  // nothing measured ever retires
  uint64_t probe_addr_ = 0;                                 // next address for a measured output
  std::string sizing_diagnosis_;                            // the failure's message without its solution

  // Clusters (docs/runtime.md §15): which this orchestration holds, the group
  // each allocation started, and per open scope the ones it allocated.
  std::vector<uint8_t> cluster_held_;
  std::vector<int32_t> cluster_group_;
  std::vector<std::vector<int32_t>> scope_clusters_;
  int32_t next_group_ = 0;
  // The expansion in progress: blocks after the first reuse its producers
  // (producers_ as the first block left it) and keep it alive instead of
  // waiting for it (they are one logical task).
  bool sibling_ = false;
  bool saw_pipe_ = false;  // the last validate_params met a PIPE_IN / PIPE_OUT parameter
  uint64_t first_block_ = 0;
  bool first_block_owns_ = false;
  std::vector<int64_t> block_ids_;

  std::function<void()> run_starter_;
  bool run_started_ = false;

  // Captured regions (docs/runtime.md §16): the recorded graphs by key, the
  // one being recorded, and the open region's state.
  CaptureCache captures_;
  std::unique_ptr<CapturedRegion> recording_;
  bool in_capture_ = false;
  std::vector<uint32_t> region_producers_;  // scratch of record_task: the task's producers in the region
  size_t capture_depth_ = 0;           // scope depth the open region's scope sits at
  std::vector<uint64_t> replay_ids_;   // per task of the region being replayed: its id and
  std::vector<uint64_t> replay_base_;  // its packed output buffer
  int64_t replay_entry_ = -1;          // the replay's entry task (-1: the region has no bindings)
  std::vector<uint64_t> replay_addr_;  // the replayed region's kernels, resolved by capture_begin
  // The batch of replayed tasks filled but not yet published: its first task
  // (region index), ring and last seq, and its tasks whose fanin keeps a +1
  // until it is published (id, what to subtract then).
  bool pending_ = false;
  uint32_t batch_first_ = 0;
  uint32_t pending_ring_ = 0;
  uint64_t pending_seq_ = 0;
  std::vector<std::pair<uint64_t, int32_t>> deferred_;
  uint64_t bind_addr_[PTO2_MAX_PARAMS] = {};
  uint64_t bind_owner_[PTO2_MAX_PARAMS] = {};
  CaptureStats capture_stats_;
};

}  // namespace pto2
