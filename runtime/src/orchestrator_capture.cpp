// The Orchestrator's captured regions (docs/runtime.md §16): recording a
// PTO2_CAPTURE region's tasks as plain submission runs them, and replaying
// them later without the region's code, the TensorMap or validation — only
// the ring allocations, the descriptors with rebound addresses, the recorded
// edges and publication.
#include <algorithm>

#include <fmt/format.h>

#include "log.h"
#include "orchestrator.h"

namespace pto2 {

namespace {
// How many tasks ahead a replay prefetches descriptors: a replayed task takes
// ~40 ns, a descriptor line from memory several times that, and a locked
// instruction waits for every pending store (docs/runtime.md §16).
constexpr uint64_t kReplayPrefetch = 6;
// Tasks filled before they are published together (publish_replayed): the
// edges among them need no locked instruction; the first of a batch may wait
// this many fills before it can start.
constexpr uint32_t kReplayBatch = 32;
}  // namespace

bool Orchestrator::refuse_in_capture(const char* what) {
  if (!in_capture_) return true;
  fail(kInvalidArgument,
       fmt::format("{} inside a captured region (PTO2_CAPTURE): a replay skips the region's code, so it cannot be "
                   "replayed; move it out of the region",
                   what));
  recording_.reset();
  return false;
}

int32_t Orchestrator::capture_begin(uint64_t key, Tensor* const* bindings, int32_t n) {
  if (in_capture_) {
    fail(kInvalidArgument,
         fmt::format("captured region {:#x} opened inside another: PTO2_CAPTURE regions do not nest", key));
    return 0;
  }
  if (error_.ok() && done_) {
    fail(kOrchestrationDone, fmt::format("captured region {:#x} opened after pto2_rt_orchestration_done", key));
    return 0;
  }
  if (!error_.ok()) {
    // Nothing more is submitted: skip the code, unless a sizing probe is
    // measuring the rest of the run (then the code runs, unrecorded).
    if (!probe_) return 0;
    in_capture_ = true;
    scope_begin();
    capture_depth_ = scope_begin_.size();
    return 1;
  }
  if (n < 0 || n > PTO2_MAX_PARAMS || (n > 0 && bindings == nullptr)) {
    fail(kInvalidArgument, fmt::format("captured region {:#x}: {} bindings; a region has 0..{}, in a non-null array",
                                       key, n, PTO2_MAX_PARAMS));
    return 0;
  }
  for (int32_t i = 0; i < n; ++i) {
    const Tensor* t = bindings[i];
    std::string why;
    if (t == nullptr)
      why = "is null";
    else if (t->addr == 0)
      why = "has no storage (addr 0): a binding is a buffer that exists before the region";
    else if (t->ndim < 1 || t->ndim > PTO2_MAX_DIMS || pto2_dtype_size(t->dtype) == 0)
      why = fmt::format("has ndim {} / dtype {}", t->ndim, t->dtype);
    else if (pto2_is_pipe_tensor(t))
      why = "is a pipe";
    for (int32_t j = 0; j < i && why.empty(); ++j)
      if (bindings[j]->addr == t->addr) why = fmt::format("names the same buffer as binding {}", j);
    if (!why.empty()) {
      fail(kInvalidArgument, fmt::format("captured region {:#x}: binding {} {}", key, i, why));
      return 0;
    }
  }
  in_capture_ = true;
  const CaptureMode mode = s_.config.capture_mode;
  if (mode == CaptureMode::kReplay) {
    if (CapturedRegion* r = captures_.find(key)) {
      std::string why = r->mismatch(bindings, n);
      replay_addr_.resize(r->kernels.size());  // resolved here, once, for the replay
      for (size_t k = 0; k < r->kernels.size() && why.empty(); ++k) {
        if (!resolve_kernel(r->kernels[k].id, r->kernels[k].worker_type, &replay_addr_[k]))
          why = fmt::format("kernel {} is no longer registered", r->kernels[k].id);
      }
      if (why.empty()) {
        if (std::string misfit = replay_misfit(*r); !misfit.empty()) {
          // Not a changed region: recording it again records the same. Its
          // code runs as plain submission, unrecorded.
          ++capture_stats_.unreplayable;
          if (!r->warned_unreplayable)
            component_logger("orchestrator")
                ->warn("captured region {:#x} runs as plain submission: a replay could never finish: {}", key, misfit);
          r->warned_unreplayable = true;
          scope_begin();
          capture_depth_ = scope_begin_.size();
          return 1;
        }
        replay(*r, bindings);
        in_capture_ = false;
        return 0;
      }
      ++capture_stats_.mismatches;
      component_logger("orchestrator")->info("captured region {:#x} recorded again: {}", key, why);
      captures_.erase(key);
    }
  }
  if (mode != CaptureMode::kOff) recording_ = std::make_unique<CapturedRegion>(key, bindings, n);
  scope_begin();
  capture_depth_ = scope_begin_.size();
  return 1;
}

void Orchestrator::capture_end(bool completed) {
  if (!in_capture_) {
    fail(kInvalidArgument, "pto2_rt_capture_end without an open captured region");
    return;
  }
  // The region's code may have left inner scopes open (an early return).
  while (scope_begin_.size() > capture_depth_) close_innermost_scope();
  close_innermost_scope();  // the region's own scope
  in_capture_ = false;
  if (!recording_ || !error_.ok() || !completed) {
    recording_.reset();
    return;
  }
  std::unique_ptr<CapturedRegion> r = std::move(recording_);
  r->finalize();
  ++capture_stats_.regions_recorded;
  if (s_.config.capture_mode == CaptureMode::kVerify) {
    if (const CapturedRegion* old = captures_.find(r->key)) {
      std::string diff = old->first_difference(*r);
      if (!diff.empty()) {
        ++capture_stats_.mismatches;
        component_logger("orchestrator")
            ->warn("captured region {:#x} differs from its recording, so a replay would be wrong: {}", r->key, diff);
      }
    }
  }
  const uint64_t key = r->key, tasks = r->tasks.size();
  if (!captures_.insert(std::move(r)))
    component_logger("orchestrator")
        ->warn(
            "captured region {:#x} has {} tasks, more than the capture cache holds ({}, PTO2_CAPTURE_CACHE_TASKS): "
            "it will run as plain submission",
            key, tasks, captures_.budget());
}

void Orchestrator::record_task(const PTO2TaskSpec& spec, uint64_t id) {
  CapturedRegion& r = *recording_;
  const TaskDescriptor& d = s_.descriptor_of(id);
  CapturedTask t;
  t.kernel_id = d.kernel_id;
  t.worker_type = d.worker_type;
  t.kernel_slot = d.worker_type == kWorkerDummy ? -1 : r.kernel_slot(d.kernel_id, d.worker_type);
  t.num_params = d.num_params;
  t.block_dim = d.block_dim;
  t.block_base = d.block_base;
  t.block_num = d.block_num;
  t.out_bytes = d.packed_buffer_end - d.packed_buffer_base;
  t.first_param = static_cast<uint32_t>(r.params.size());
  region_producers_.clear();
  const uint32_t index = static_cast<uint32_t>(r.tasks.size());
  auto refuse = [&](std::string why) {
    fail(kInvalidArgument, fmt::format("captured region {:#x}, its task {}: {}", r.key, index, why));
    recording_.reset();
  };
  for (int32_t i = 0; i < d.num_params; ++i) {
    CapturedParam p;
    p.kind = d.param_kind[i];
    if (p.kind == PTO_PARAM_SCALAR) {
      p.scalar = static_cast<uint64_t>(d.args[i]);
      r.params.push_back(p);
      continue;
    }
    p.view = d.tensors[i];
    const uint64_t owner = p.view.owner;
    // The TensorMap's edges are not enough while recording: it forgets a
    // task that has retired (one of an inner scope that has ended, say),
    // and on a replay that task may still be running. Every access of a
    // buffer the region allocated, or of a binding, is ordered here too.
    if (owner == owner_from_task(id)) {
      p.source = CaptureSource::kOwnOutput;
      p.offset = p.view.addr - d.packed_buffer_base;
      r.internal_edges(index, index, p.offset, p.view, p.kind != PTO_PARAM_INPUT, &region_producers_);
    } else if (auto it = owner != 0 ? r.index_of.find(task_from_owner(owner)) : r.index_of.end();
               it != r.index_of.end()) {
      p.source = CaptureSource::kInternal;
      p.ref = it->second;
      p.offset = p.view.addr - r.packed_base[it->second];
      r.internal_edges(p.ref, index, p.offset, p.view, p.kind != PTO_PARAM_INPUT, &region_producers_);
    } else {
      size_t k = 0;
      while (k < r.bindings.size() && r.bindings[k].addr != p.view.addr) ++k;
      if (k == r.bindings.size())
        return refuse(
            fmt::format("param {} names a buffer at {:#x} that is neither one of the region's bindings nor "
                        "allocated inside it; pass its tensor among the bindings so a replay can rebind it",
                        i, p.view.addr));
      if (pto2_tensor_buffer_bytes(&p.view) > pto2_tensor_buffer_bytes(&r.bindings[k]))
        return refuse(fmt::format("param {} views the buffer of binding {} as {} bytes, more than the binding's {}; "
                                  "the binding must cover every byte the region touches",
                                  i, k, pto2_tensor_buffer_bytes(&p.view), pto2_tensor_buffer_bytes(&r.bindings[k])));
      p.source = CaptureSource::kBinding;
      p.ref = static_cast<uint32_t>(k);
      r.binding_edges(p.ref, index, p.view, p.kind != PTO_PARAM_INPUT, &region_producers_);
      t.touches_binding = true;
      if (p.kind != PTO_PARAM_INPUT) r.binding_written[k] = 1;
    }
    r.params.push_back(p);
  }
  for (int32_t i = 0; i < spec.num_deps; ++i) {
    if (r.index_of.count(static_cast<uint64_t>(spec.deps[i])) == 0)
      return refuse(
          fmt::format("explicit dependency {} is a task outside the region; a replay cannot name it", spec.deps[i]));
  }
  // Producers outside the region came from its bindings: the entry task
  // stands for them on a replay.
  t.first_producer = static_cast<uint32_t>(r.producers.size());
  for (uint64_t p : producers_) {
    auto it = r.index_of.find(p);
    if (it != r.index_of.end()) region_producers_.push_back(it->second);
  }
  std::sort(region_producers_.begin(), region_producers_.end());
  region_producers_.erase(std::unique(region_producers_.begin(), region_producers_.end()), region_producers_.end());
  r.producers.insert(r.producers.end(), region_producers_.begin(), region_producers_.end());
  t.num_producers = static_cast<uint32_t>(r.producers.size()) - t.first_producer;
  r.index_of.emplace(id, index);
  r.packed_base.push_back(d.packed_buffer_base);
  r.tasks.push_back(t);
}

void Orchestrator::binding_params(const CapturedRegion& region, Tensor* const* bindings, Tensor* views,
                                  PTOParam* params) {
  const auto n = static_cast<int32_t>(region.bindings.size());
  for (int32_t k = 0; k < n; ++k) {
    views[k] = *bindings[k];
    for (int32_t dd = 0; dd < PTO2_MAX_DIMS; ++dd) {
      views[k].offsets[dd] = 0;
      views[k].shapes[dd] = dd < views[k].ndim ? views[k].raw_shape[dd] : 0;
    }
    params[k] = region.binding_written[k] ? make_inout_param(views[k]) : make_input_param(views[k]);
  }
}

std::string Orchestrator::replay_misfit(const CapturedRegion& region) const {
  // replay() opens a scope, then the region's recorded ones: its tasks at
  // relative depth d go to ring base + d, the deepest ones sharing the last.
  const int base = scope_depth() + 1;
  const int last = kMaxRings - 1;
  const auto depths = static_cast<int>(region.separate.size());
  const int merge_from = std::max(0, last - base);
  auto check = [&](const CapturedRegion::RingNeed& need, int ring) -> std::string {
    const TaskRing& tr = s_.rings[ring];
    if (need.slots > tr.window() - 1)
      return fmt::format(
          "ring {} would need {} task slots at once (task window {}, one kept free): {} replayed tasks "
          "hold theirs for consumers the region submits later (plain submission lets them retire with "
          "their scope)",
          ring, need.slots, tr.window(), need.held);
    if (need.bytes > heaps_[ring].size())
      return fmt::format(
          "ring {} would need {} bytes of packed outputs at once (heap {}): replayed tasks hold "
          "theirs for consumers the region submits later",
          ring, need.bytes, heaps_[ring].size());
    if (need.deps > deps_[ring].size())
      return fmt::format(
          "ring {} would need {} dependency-list entries at once (pool {}): replayed tasks hold "
          "theirs for consumers the region submits later",
          ring, need.deps, deps_[ring].size());
    return {};
  };
  for (int d = 0; d < std::min(merge_from, depths); ++d)
    if (std::string why = check(region.separate[d], base + d); !why.empty()) return why;
  if (merge_from < depths) return check(region.merged[merge_from], last);
  return {};
}

bool Orchestrator::replay(CapturedRegion& region, Tensor* const* bindings) {
  const size_t n = region.tasks.size();
  const auto nb = static_cast<int32_t>(region.bindings.size());
  for (int32_t k = 0; k < nb; ++k) {
    bind_addr_[k] = bindings[k]->addr;
    bind_owner_[k] = bindings[k]->owner;
  }
  replay_ids_.resize(n);
  replay_base_.resize(n);

  scope_begin();
  const size_t depth = scope_begin_.size();
  Tensor views[PTO2_MAX_PARAMS];
  PTOParam params[PTO2_MAX_PARAMS];
  replay_entry_ = -1;
  bool ok = true;
  if (nb > 0) {
    // Entry: waits for every task outside the region that touched a binding
    // (as the TensorMap finds them), and validates the bindings as any submit.
    binding_params(region, bindings, views, params);
    replay_entry_ = submit(PTO2_KERNEL_DUMMY, PTO2_WORKER_VECTOR, params, nb, nullptr, 0);
    ok = replay_entry_ >= 0;
  }
  // Replayed tasks insert nothing into the TensorMap: one cleanup of retired
  // tasks' entries suffices (each slot's reuse still frees its old entries).
  tensor_map_->sync(/*force=*/false);
  size_t ev = 0;
  pending_ = false;
  deferred_.clear();
  for (uint32_t i = 0; ok && i < n; ++i) {
    if (ev < region.scopes.size() && region.scopes[ev].before_task == i) publish_replayed();
    for (; ev < region.scopes.size() && region.scopes[ev].before_task == i; ++ev)
      region.scopes[ev].begin ? scope_begin() : close_innermost_scope();
    ok = replay_task(region, i, replay_addr_.data());
    if (!ok) release_unlinked(region, i);
  }
  publish_replayed();
  for (; ok && ev < region.scopes.size(); ++ev) region.scopes[ev].begin ? scope_begin() : close_innermost_scope();
  if (ok && nb > 0) {
    // Exit: what comes after the region finds it in the TensorMap as the
    // accessor of every binding; it completes after the region's accesses.
    std::vector<int64_t> deps;
    deps.reserve(region.exit_deps.size());
    for (uint32_t i : region.exit_deps) deps.push_back(static_cast<int64_t>(replay_ids_[i]));
    binding_params(region, bindings, views, params);
    ok = submit(PTO2_KERNEL_DUMMY, PTO2_WORKER_VECTOR, params, nb, deps.data(), static_cast<int32_t>(deps.size())) >= 0;
  }
  while (scope_begin_.size() > depth) close_innermost_scope();
  close_innermost_scope();
  if (ok) {
    ++capture_stats_.regions_replayed;
    capture_stats_.tasks_replayed += n;
  }
  return ok;
}

void Orchestrator::release_unlinked(const CapturedRegion& region, uint32_t failed) {
  for (size_t k = failed; k < region.tasks.size(); ++k) {
    const CapturedTask& t = region.tasks[k];
    for (uint32_t j = 0; j < t.num_producers; ++j) {
      const uint32_t p = region.producers[t.first_producer + j];
      if (p < failed) s_.release(replay_ids_[p]);
    }
  }
}

void Orchestrator::publish_replayed() {
  if (!pending_) return;
  pending_ = false;
  ensure_run_started();
  s_.rings[pending_ring_].publish(pending_seq_);
  // Tasks linked to producers published earlier kept their +1 until now:
  // none of them could become ready (and run, and release an unfilled
  // consumer) before the whole batch was filled.
  for (const auto& [id, surplus] : deferred_) {
    TaskSlotState& st = s_.slot_of(id);
    if (st.fanin_pending.fetch_sub(surplus, std::memory_order_acq_rel) == surplus) {
      st.state.store(kSlotReady, std::memory_order_relaxed);
      if (s_.config.profiling) st.ready_ns = now_ns();
      while (!s_.orch_ready->try_push(id)) cpu_relax();
    }
  }
  deferred_.clear();
  s_.notify_work();
}

void Orchestrator::fill_replayed_params(const CapturedRegion& region, const CapturedTask& t, uint64_t id,
                                        uint64_t base, TaskDescriptor& d) {
  const CapturedParam* p = region.params.data() + t.first_param;
  for (int32_t i = 0; i < t.num_params; ++i, ++p) {
    d.param_kind[i] = p->kind;
    if (p->kind == PTO_PARAM_SCALAR) {
      d.args[i] = static_cast<int64_t>(p->scalar);
      continue;
    }
    Tensor& v = d.tensors[i];
    v = p->view;
    switch (p->source) {
      case CaptureSource::kBinding:
        v.addr = bind_addr_[p->ref];
        v.owner = bind_owner_[p->ref];
        break;
      case CaptureSource::kOwnOutput:
        v.addr = base + p->offset;
        v.owner = owner_from_task(id);
        break;
      case CaptureSource::kInternal:
        v.addr = replay_base_[p->ref] + p->offset;
        v.owner = owner_from_task(replay_ids_[p->ref]);
        break;
    }
    d.args[i] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&v));
  }
}

// Producers of this batch: linked directly. Earlier ones (published, so
// possibly done) and the entry task: the fanout lock, under a +1 kept until
// the batch is published (deferred_). The region's producers counted this
// task in their refs; the entry task is held by the region's scope. Returns
// the edges made; *deferred: the task's fanin is settled when its batch is
// published (it is no root then, whatever its edges).
int32_t Orchestrator::link_replayed(const CapturedRegion& region, const CapturedTask& t, uint64_t id, bool entry,
                                    TaskDescriptor& d, TaskSlotState& st, bool* deferred) {
  const uint32_t ring = task_ring(id);
  DepPool& deps = deps_[ring];
  const uint32_t* prod = region.producers.data() + t.first_producer;
  int32_t direct = 0, locked_max = entry ? 1 : 0;
  for (uint32_t k = 0; k < t.num_producers; ++k) {
    if (prod[k] >= batch_first_ && pending_) {
      const uint64_t producer = replay_ids_[prod[k]];
      TaskSlotState& pst = s_.slot_of(producer);
      pst.fanout_head = make_dep_link(ring, deps.alloc(id, pst.fanout_head));
      ++pst.fanout_count;
      d.fanin_head = make_dep_link(ring, deps.alloc(producer, d.fanin_head));
      ++direct;
    } else {
      ++locked_max;
    }
  }
  int32_t edges = direct;
  if (locked_max == 0) {
    st.fanin_pending.store(direct, std::memory_order_relaxed);
  } else {
    st.fanin_pending.store(1 + direct + locked_max, std::memory_order_relaxed);
    for (uint32_t k = 0; k < t.num_producers; ++k)
      if (!(prod[k] >= batch_first_ && pending_)) add_producer(id, replay_ids_[prod[k]], &edges, ProducerRef::kCounted);
    if (entry) add_producer(id, static_cast<uint64_t>(replay_entry_), &edges, ProducerRef::kHeld);
    deferred_.emplace_back(id, 1 + locked_max - (edges - direct));
  }
  *deferred = locked_max != 0;
  return edges;
}

// One recorded task, filled as submit_one would have filled it, and
// published with its batch (publish_replayed): a producer of the same
// unpublished batch cannot have run, so the edge from it is written without
// the fanout lock and counted without a locked instruction.
bool Orchestrator::replay_task(const CapturedRegion& region, uint32_t index, const uint64_t* function_addr) {
  const CapturedTask& t = region.tasks[index];
  const auto ring = static_cast<uint32_t>(current_ring());
  if (pending_ && (ring != pending_ring_ || index - batch_first_ >= kReplayBatch)) publish_replayed();
  if (!pending_) batch_first_ = index;
  TaskRing& tr = s_.rings[ring];
  // Every wait publishes the batch first: its tasks may be what must finish
  // (and retire) to free the space.
  uint64_t seq = 0;
  if (!tr.try_alloc(&seq)) {
    publish_replayed();
    batch_first_ = index;
    if (!alloc_slot(ring, &seq)) return false;
  }
  const uint64_t id = make_task_id(ring, seq);
  TaskSlotState& st = tr.slot_state(seq);
  reset_slot(st, static_cast<uint32_t>(t.block_dim));
  tensor_map_->before_slot_reuse(ring, seq);

  TaskDescriptor& d = tr.descriptor(seq);
  d.task_id = id;
  d.kernel_id = t.kernel_id;
  d.worker_type = t.worker_type;
  d.function_bin_addr = t.kernel_slot >= 0 ? function_addr[t.kernel_slot] : 0;
  d.num_params = t.num_params;
  d.fanin_head = 0;
  d.fanin_count = 0;
  d.dep_reserved = 0;
  d.cluster_id = -1;
  d.group_id = -1;
  d.block_dim = t.block_dim;
  d.block_base = t.block_base;
  d.block_num = t.block_num;
  d.uses_pipes = false;
  uint64_t base = 0;
  if (t.out_bytes > 0 && heaps_[ring].try_alloc(t.out_bytes, &base) != HeapRing::Alloc::kOk) {
    publish_replayed();
    batch_first_ = index;
    if (!alloc_outputs(ring, seq, t.out_bytes, &base)) return false;
  }
  d.packed_buffer_base = base;
  d.packed_buffer_end = base + t.out_bytes;
  d.heap_end_pos = heaps_[ring].top();
  replay_ids_[index] = id;
  replay_base_[index] = base;

  fill_replayed_params(region, t, id, base, d);

  const bool entry = t.after_entry && replay_entry_ >= 0;
  const uint64_t dep_needed = 2 * (uint64_t{t.num_producers} + (entry ? 1 : 0));
  DepPool& deps = deps_[ring];
  if (!deps.can_reserve(dep_needed)) {
    publish_replayed();
    batch_first_ = index;
    if (!reserve_deps(ring, seq, dep_needed)) return false;
  }
  d.dep_reserved = static_cast<int32_t>(dep_needed);
  // Its references, set after the last wait (a slot whose wait fails is
  // published as a no-op holding reset_slot's two): its own completion and
  // its consumers in the region, counted now so that they link without
  // touching them. No scope reference: nothing but those consumers can name
  // its buffers (the region is a scope of its own), and the region's end has
  // nothing to release for it.
  st.refs.store(1 + static_cast<int32_t>(t.num_consumers), std::memory_order_relaxed);
  bool deferred = false;
  const int32_t edges = link_replayed(region, t, id, entry, d, st, &deferred);
  d.dep_end_pos = deps.top();
  deps.publish();

  d.fanin_count = edges;
  if (s_.config.profiling) d.submit_ns = now_ns();
  // A root is found by the schedulers' scan once the batch is published.
  st.scan_id.store(edges == 0 && !deferred ? id | TaskSlotState::kRootBit : id, std::memory_order_release);
  ++submitted_;
  s_.run_submitted.store(submitted_, std::memory_order_relaxed);
  pending_ = true;
  pending_ring_ = ring;
  pending_seq_ = seq;
  prefetch_next(ring, seq + kReplayPrefetch, /*tensor_map=*/false);
  return true;
}

}  // namespace pto2
