#include "orchestrator.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "log.h"
#include "orchestrator_wait.h"

namespace pto2 {

namespace {

constexpr int32_t kMaxCachedKernelId = 4096;

Orchestrator* self(PTO2Runtime* rt) { return static_cast<Orchestrator*>(rt->impl); }

int64_t api_submit(PTO2Runtime* rt, int32_t kernel_id, int32_t worker_type, PTOParam* params, int32_t n,
                   const int64_t* deps, int32_t ndeps) {
  return self(rt)->submit(kernel_id, worker_type, params, n, deps, ndeps);
}
int64_t api_submit_spec(PTO2Runtime* rt, const PTO2TaskSpec* spec) {
  if (spec == nullptr) return self(rt)->submit(-1, -1, nullptr, -1, nullptr, 0);  // fails naming num_params
  return self(rt)->submit(*spec);
}
int32_t api_allocate_cluster(PTO2Runtime* rt) { return self(rt)->allocate_cluster(); }
void api_free_cluster(PTO2Runtime* rt, int32_t id) { self(rt)->free_cluster(id); }
void api_scope_begin(PTO2Runtime* rt) { self(rt)->scope_begin(); }
void api_scope_end(PTO2Runtime* rt) { self(rt)->scope_end(); }
void api_done(PTO2Runtime* rt) { self(rt)->api_orchestration_done(); }
int32_t api_read(PTO2Runtime* rt, const Tensor* t, void* dst, uint64_t n) { return self(rt)->read_tensor(t, dst, n); }
int32_t api_capture_begin(PTO2Runtime* rt, uint64_t key, Tensor* const* bindings, int32_t n) {
  return self(rt)->capture_begin(key, bindings, n);
}
void api_capture_end(PTO2Runtime* rt, int32_t completed) { self(rt)->capture_end(completed != 0); }
int32_t api_error(PTO2Runtime* rt) { return self(rt)->error().code; }
const char* api_error_message(PTO2Runtime* rt) { return self(rt)->error().message.c_str(); }

const PTO2RuntimeOps kOps = {
    api_submit,        api_scope_begin, api_scope_end,        api_done,         api_read,          api_error,
    api_error_message, api_submit_spec, api_allocate_cluster, api_free_cluster, api_capture_begin, api_capture_end};

// The TensorMap's view of one end of a pipe: a one-byte tensor, the push end
// at the pipe's address and the pop end 8 bytes on. Each end is written
// (INOUT) by its users, which orders the producers of a pipe among themselves
// and its consumers among themselves, but never a consumer after its
// producer: they must run at the same time for a bounded pipe to drain
// (docs/runtime.md §15).
Tensor pipe_end(const Tensor& pipe, int32_t type) {
  const uint32_t one[1] = {1};
  Tensor t = make_tensor(one, 1, PTO2_UINT8);
  t.addr = pipe.addr + (type == PTO_PARAM_PIPE_OUT ? 0 : 8);
  return t;
}

const char* kind_name(int32_t type) {
  switch (type) {
    case PTO_PARAM_INPUT: return "INPUT";
    case PTO_PARAM_OUTPUT: return "OUTPUT";
    case PTO_PARAM_INOUT: return "INOUT";
    case PTO_PARAM_PIPE_IN: return "PIPE_IN";
    case PTO_PARAM_PIPE_OUT: return "PIPE_OUT";
    default: return "SCALAR";
  }
}

}  // namespace

Orchestrator::Orchestrator(RuntimeState& state) : s_(state) {
  api_.ops = &kOps;
  api_.impl = this;
  std::atomic<uint64_t>* last_alive[kMaxRings];
  for (int r = 0; r < kMaxRings; ++r) {
    RingFlowControl& fc = s_.rings[r].flow();
    heaps_[r].init(s_.heap_base + r * s_.config.heap_size, s_.config.heap_size, &fc.heap_top, &fc.heap_tail);
    deps_[r].init(s_.dep_entries[r], s_.config.dep_pool_size, &fc.dep_top, &fc.dep_tail);
    scope_held_[r].assign(s_.config.task_window, 0);
    last_alive[r] = &fc.last_task_alive;
  }
  tensor_map_ = std::make_unique<TensorMap>(s_.config.tensormap_pool_size, s_.config.tensormap_buckets,
                                            s_.config.task_window, last_alive);
  tensor_map_->set_cleanup_interval(s_.config.cleanup_interval);
  heap_begin_ = reinterpret_cast<uint64_t>(s_.heap_base);
  heap_end_ = heap_begin_ + kMaxRings * s_.config.heap_size;
  scope_tasks_.reserve(s_.config.task_window * kMaxRings);
  captures_.set_budget(s_.config.capture_cache_tasks);
  producers_.reserve(64);
  owners_.reserve(PTO2_MAX_PARAMS);
}

int Orchestrator::current_ring() const { return std::min(scope_depth(), kMaxRings - 1); }

void Orchestrator::fail(int32_t code, std::string message) {
  if (!error_.ok()) return;  // the first error is the one reported
  error_ = Status::Error(code, std::move(message));
  // A sizing failure is logged when the run ends, with the size the whole run needs.
  if (!is_sizing_failure(code))
    component_logger("orchestrator")->error("{} ({}): {}", error_name(code), code, error_.message);
}

void Orchestrator::begin_run() {
  error_ = Status::Ok();
  // A platform may re-register kernels between runs.
  for (auto& cache : kernel_addr_cache_) cache.clear();
  done_ = false;
  submitted_ = 0;
  noops_ = 0;
  blocked_waits_ = 0;
  scope_tasks_.clear();
  scope_begin_.assign(1, 0);  // the implicit scope around the orchestration (docs/runtime.md §7)
  scope_clusters_.assign(1, {});
  cluster_held_.assign(static_cast<size_t>(s_.clusters), 0);
  // The last run drained: every pinned task completed.
  for (int c = 0; c < s_.clusters; ++c) s_.cluster_outstanding[c].store(0, std::memory_order_relaxed);
  cluster_group_.assign(static_cast<size_t>(s_.clusters), -1);
  tensor_map_->begin_run();  // the previous run drained: no task is alive
  probe_.reset();
  probe_map_.reset();
  run_started_ = false;
  in_capture_ = false;  // the last run may have failed inside a region
  capture_stats_ = CaptureStats{};
}

void Orchestrator::end_run() {
  if (probe_) finish_probe();
  if (scope_begin_.size() > 1) {
    component_logger("orchestrator")
        ->warn("orchestration returned with {} scope(s) still open; closing them", scope_begin_.size() - 1);
  }
  while (!scope_begin_.empty()) close_innermost_scope();
  // A region the orchestration never ended (the C API without
  // pto2_rt_capture_end) is not kept, and the next run starts outside it.
  recording_.reset();
  in_capture_ = false;
  orchestration_done();
}

void Orchestrator::scope_begin() {
  if (recording_) recording_->scopes.push_back({static_cast<uint32_t>(recording_->tasks.size()), true});
  scope_begin_.push_back(scope_tasks_.size());
  scope_clusters_.emplace_back();
  if (probe_) probe_->scope_begin();
}

void Orchestrator::scope_end() {
  if (scope_begin_.size() <= 1) {
    fail(kInvalidArgument, "pto2_rt_scope_end without a matching pto2_rt_scope_begin");
    return;
  }
  if (in_capture_ && scope_begin_.size() == capture_depth_) {
    fail(kInvalidArgument,
         "pto2_rt_scope_end would end the captured region's own scope; begin and end scopes "
         "inside a PTO2_CAPTURE region in pairs");
    return;
  }
  if (recording_) recording_->scopes.push_back({static_cast<uint32_t>(recording_->tasks.size()), false});
  close_innermost_scope();
  if (probe_) probe_->scope_end();
}

void Orchestrator::close_innermost_scope() {
  release_scope_clusters();
  const size_t begin = scope_begin_.back();
  scope_begin_.pop_back();
  // The scope's reference on each task it owns (docs/runtime.md §7: one reference, from
  // the innermost scope). Tasks of nested scopes were released by those.
  for (size_t i = begin; i < scope_tasks_.size(); ++i) {
    const uint64_t id = scope_tasks_[i];
    scope_held_[task_ring(id)][s_.ring_of(id).slot(task_seq(id))] = 0;
    s_.release(id);
  }
  scope_tasks_.resize(begin);
}

void Orchestrator::api_orchestration_done() {
  if (!refuse_in_capture("pto2_rt_orchestration_done")) return;
  orchestration_done();
}

void Orchestrator::orchestration_done() {
  done_ = true;
  s_.region.header()->orchestrator_done.store(1, std::memory_order_release);
  // Only the threads of a started run look at orchestrator_done; between
  // runs they wait for the next start (Scheduler::start_run). A run that
  // published nothing woke none of them, and waking them here would cost a
  // futex wake and a parked thread's round trip per empty run.
  if (run_started_) s_.sched_ec.notify();
}

bool Orchestrator::resolve_kernel(int32_t kernel_id, int32_t worker_type, uint64_t* addr) {
  std::vector<uint64_t>& cache = kernel_addr_cache_[worker_type];
  if (kernel_id >= 0 && kernel_id < kMaxCachedKernelId && static_cast<size_t>(kernel_id) < cache.size() &&
      cache[kernel_id] != 0) {
    *addr = cache[kernel_id];
    return true;
  }
  if (!s_.platform.resolve_kernel(kernel_id, static_cast<WorkerType>(worker_type), addr)) return false;
  if (kernel_id >= 0 && kernel_id < kMaxCachedKernelId && *addr != 0) {
    if (cache.size() <= static_cast<size_t>(kernel_id)) cache.resize(kernel_id + 1, 0);
    cache[kernel_id] = *addr;
  }
  return true;
}

bool Orchestrator::validate_params(int32_t worker_type, const PTOParam* params, int32_t n) {
  saw_pipe_ = false;
  if (n < 0 || n > PTO2_MAX_PARAMS) {
    fail(kInvalidArgument, fmt::format("num_params {} is outside 0..{}", n, PTO2_MAX_PARAMS));
    return false;
  }
  if (n > 0 && params == nullptr) {
    fail(kInvalidArgument, fmt::format("params is null with num_params {}", n));
    return false;
  }
  if (worker_type != PTO2_WORKER_CUBE && worker_type != PTO2_WORKER_VECTOR) {
    fail(kInvalidArgument,
         fmt::format("worker_type {} is neither PTO2_WORKER_CUBE (0) nor PTO2_WORKER_VECTOR (1)", worker_type));
    return false;
  }
  for (int32_t i = 0; i < n; ++i) {
    const PTOParam& p = params[i];
    if (p.type < PTO_PARAM_INPUT || p.type > PTO_PARAM_PIPE_OUT) {
      fail(kInvalidArgument,
           fmt::format("param {}: type {} is not INPUT/OUTPUT/INOUT/SCALAR/PIPE_IN/PIPE_OUT", i, int(p.type)));
      return false;
    }
    if (p.type == PTO_PARAM_SCALAR) continue;
    if (p.type == PTO_PARAM_PIPE_IN || p.type == PTO_PARAM_PIPE_OUT) {
      saw_pipe_ = true;  // checked with the task's cluster (validate_placement)
      continue;
    }
    const Tensor* t = p.tensor;
    if (t == nullptr) {
      fail(kInvalidArgument, fmt::format("param {} ({}): tensor pointer is null", i, kind_name(p.type)));
      return false;
    }
    if (pto2_is_pipe_tensor(t)) {
      // Its address is a pipe's name, no memory: a kernel would write through it.
      fail(kInvalidArgument, fmt::format("param {} ({}): is a pipe tensor (make_pipe_tensor), not data; pass it as "
                                         "make_pipe_in_param / make_pipe_out_param",
                                         i, kind_name(p.type)));
      return false;
    }
    if (t->ndim < 1 || t->ndim > PTO2_MAX_DIMS) {
      fail(kInvalidArgument,
           fmt::format("param {} ({}): ndim {} is outside 1..{}", i, kind_name(p.type), t->ndim, PTO2_MAX_DIMS));
      return false;
    }
    if (pto2_dtype_size(t->dtype) == 0) {
      fail(kInvalidArgument, fmt::format("param {} ({}): unknown dtype {}", i, kind_name(p.type), t->dtype));
      return false;
    }
    for (int32_t d = 0; d < t->ndim; ++d) {
      if (static_cast<uint64_t>(t->offsets[d]) + t->shapes[d] > t->raw_shape[d]) {
        fail(kInvalidArgument,
             fmt::format("param {} ({}): view offsets[{}] + shapes[{}] = {} exceeds raw_shape[{}] = {}", i,
                         kind_name(p.type), d, d, static_cast<uint64_t>(t->offsets[d]) + t->shapes[d], d,
                         t->raw_shape[d]));
        return false;
      }
    }
    // The buffer's byte size must not overflow: sizes, strides and byte spans
    // are all computed from raw_shape.
    uint64_t bytes = pto2_dtype_size(t->dtype);
    for (int32_t d = 0; d < t->ndim; ++d) {
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(t->raw_shape[d]), &bytes)) {
        fail(kInvalidArgument,
             fmt::format("param {} ({}): raw_shape overflows 64-bit byte sizes", i, kind_name(p.type)));
        return false;
      }
    }
    if (t->addr == 0 && p.type == PTO_PARAM_OUTPUT && bytes > s_.config.heap_size) {
      fail(kHeapRequestTooLarge, fmt::format("param {} (OUTPUT): a {}-byte buffer cannot come from a heap ring of {} "
                                             "bytes.",
                                             i, bytes, s_.config.heap_size));
      return false;
    }
    if (t->addr == 0 && p.type != PTO_PARAM_OUTPUT) {
      fail(kInvalidArgument, fmt::format("param {} ({}): tensor has no storage (addr 0); a runtime-allocated "
                                         "tensor must first be produced by an OUTPUT parameter",
                                         i, kind_name(p.type)));
      return false;
    }
    if (t->owner == 0 && t->addr != 0 && t->addr < heap_end_ && t->addr + bytes > heap_begin_) {
      // Such a tensor would keep no buffer alive and would meet the buffer's
      // own tensors only by accident of base address.
      fail(kInvalidArgument,
           fmt::format("param {} ({}): external tensor at {:#x} ({} bytes) lies inside the runtime's heap rings; "
                       "use the runtime-allocated tensor, or a tensor_view of it, instead",
                       i, kind_name(p.type), t->addr, bytes));
      return false;
    }
    if (t->owner != 0) {
      const uint64_t owner = task_from_owner(t->owner);
      const uint32_t r = task_ring(owner);
      const uint64_t seq = task_seq(owner);
      const bool alive = seq < s_.rings[r].next_seq() && s_.descriptor_of(owner).task_id == owner &&
                         scope_held_[r][s_.rings[r].slot(seq)] != 0;
      if (!alive) {
        fail(kTensorOutOfScope,
             fmt::format("param {} ({}): tensor at {:#x} was allocated by task {} in a scope that has ended, so "
                         "its buffer may already be reused; allocate it in an enclosing scope",
                         i, kind_name(p.type), t->addr, owner));
        return false;
      }
    }
  }
  return true;
}

bool Orchestrator::ring_blocked_by_scope(uint32_t ring, uint64_t below) const {
  const TaskRing& tr = s_.rings[ring];
  const uint64_t la = s_.rings[ring].flow().last_task_alive.load(std::memory_order_acquire);
  if (la >= below) return true;  // nothing older is live: waiting frees nothing more
  const uint64_t slot = tr.slot(la);
  if (s_.rings[ring].descriptor(la).task_id != make_task_id(ring, la)) return false;
  return scope_held_[ring][slot] != 0;
}

Status Orchestrator::diagnose_task_ring(uint32_t ring) {
  TaskRing& tr = s_.rings[ring];
  if (!ring_blocked_by_scope(ring, tr.next_seq())) return Status::Ok();
  const uint64_t active = tr.next_seq() - tr.last_alive();
  const uint64_t in_scope = scope_tasks_.size() - scope_begin_.back();
  const bool one_scope = in_scope >= tr.window() - 1;
  return Status::Error(
      one_scope ? kScopeExceedsWindow : kTaskRingDeadlock,
      fmt::format("FATAL: Flow Control Deadlock Detected! Task ring {} is FULL: active tasks {} / window {}, the "
                  "innermost scope (depth {}) holds {} of them. Root cause: every active task still holds its "
                  "owning scope's reference, which only scope_end() releases, and scope_end() needs this "
                  "orchestrator to continue.",
                  ring, active, tr.window(), scope_depth(), in_scope));
}

void Orchestrator::publish_as_noop(uint32_t ring, uint64_t seq) {
  // A slot that was allocated but could not be filled becomes a dependency-
  // free no-op so the ring's order of retirement stays intact.
  TaskRing& tr = s_.rings[ring];
  TaskDescriptor& d = tr.descriptor(seq);
  const uint64_t id = make_task_id(ring, seq);
  d.worker_type = kWorkerDummy;
  d.kernel_id = PTO2_KERNEL_DUMMY;
  d.function_bin_addr = 0;
  d.num_params = 0;
  d.fanin_count = 0;
  d.fanin_head = 0;
  d.dep_reserved = 0;
  // Whatever the failed submit recorded of its placement goes: a pinned
  // no-op would reach a cluster queue, and its completion would count down
  // a cluster that never counted it up.
  d.cluster_id = -1;
  d.group_id = -1;
  d.block_dim = 1;
  d.block_base = 0;
  d.block_num = 1;
  d.uses_pipes = false;
  tr.slot_state(seq).blocks_left.store(1, std::memory_order_relaxed);
  d.heap_end_pos = heaps_[ring].top();
  d.dep_end_pos = deps_[ring].top();
  scope_tasks_.push_back(id);
  scope_held_[ring][tr.slot(seq)] = 1;
  tr.slot_state(seq).scan_id.store(id | TaskSlotState::kRootBit, std::memory_order_release);
  ensure_run_started();
  tr.publish(seq);
  s_.notify_work();
  ++noops_;
}

void Orchestrator::prefetch_next(uint32_t ring, uint64_t seq, bool tensor_map) {
  // A ring reuses a slot only after walking its whole window, so the lines
  // the next submit writes are cold. Start fetching them for writing now; the
  // orchestration's own code between two submits hides the latency.
  TaskRing& tr = s_.rings[ring];
  const char* d = reinterpret_cast<const char*>(&tr.descriptor(seq));
  for (size_t off = 0; off < offsetof(TaskDescriptor, tensors) + 3 * sizeof(Tensor); off += 64)
    __builtin_prefetch(d + off, 1, 3);
  __builtin_prefetch(&tr.slot_state(seq), 1, 3);
  deps_[ring].prefetch_next();
  if (tensor_map) tensor_map_->prefetch_next(ring, seq);
}

void Orchestrator::dedup_producers() {
  // A task usually has a handful of producers: a quadratic pass beats a sort.
  const size_t n = producers_.size();
  if (n < 2) return;
  if (n > 16) {
    std::sort(producers_.begin(), producers_.end());
    producers_.erase(std::unique(producers_.begin(), producers_.end()), producers_.end());
    return;
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t p = producers_[i];
    bool seen = false;
    for (size_t j = 0; j < kept && !seen; ++j) seen = producers_[j] == p;
    if (!seen) producers_[kept++] = p;
  }
  producers_.resize(kept);
}

bool Orchestrator::take_fanout_ref(uint64_t producer) {
  TaskSlotState& pst = s_.slot_of(producer);
  int32_t refs = pst.refs.load(std::memory_order_acquire);
  do {
    if (refs == 0) return false;
  } while (!pst.refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  return true;
}

bool Orchestrator::producer_settled(uint64_t producer) const {
  // Completed (or retired, its slot reused by a task of ours that has
  // completed since): the completion has read its final fanout list, so no
  // edge is needed. A reference would only keep the producer's own buffers,
  // and a task names those through their owner, which stays linked. Skipping
  // the reference, the lock and the release saves three locked instructions
  // on a line the scheduler that completed it holds.
  if (s_.slot_of(producer).state.load(std::memory_order_acquire) < kSlotCompleted) return false;
  for (uint64_t o : owners_)
    if (o == producer) return false;
  return true;
}

void Orchestrator::add_producer(uint64_t consumer, uint64_t producer, int32_t* edges, ProducerRef ref) {
  TaskSlotState& pst = s_.slot_of(producer);
  if (ref == ProducerRef::kHeld) {
    pst.refs.fetch_add(1, std::memory_order_relaxed);  // an open scope holds it: it cannot be consumed meanwhile
  } else if (ref == ProducerRef::kTake) {
    if (s_.descriptor_of(producer).task_id != producer) return;  // retired, slot reused
    if (!take_fanout_ref(producer)) return;                      // consumed: nothing to wait for or keep
  }

  const uint32_t ring = task_ring(consumer);
  TaskDescriptor& cd = s_.descriptor_of(consumer);
  // Fanout lock (docs/runtime.md §6): under the producer's lock, either it
  // has completed (no edge), or the consumer goes on its fanout list and the
  // completion will count it. The consumer's fanin_pending already counts
  // every producer it may link (link_bound), so nothing of it changes here.
  lock_fanout(pst);
  if (!pst.completed) {
    pst.fanout_head = make_dep_link(ring, deps_[ring].alloc(consumer, pst.fanout_head));
    ++pst.fanout_count;
    ++*edges;
  }
  unlock_fanout(pst);
  // Consumer's list of producers to release when it completes.
  cd.fanin_head = make_dep_link(ring, deps_[ring].alloc(producer, cd.fanin_head));
}

void Orchestrator::add_lifetime_ref(uint64_t consumer, uint64_t producer) {
  if (!take_fanout_ref(producer)) return;  // already consumed: nothing of it is used any more
  TaskDescriptor& cd = s_.descriptor_of(consumer);
  cd.fanin_head = make_dep_link(task_ring(consumer), deps_[task_ring(consumer)].alloc(producer, cd.fanin_head));
}

[[gnu::always_inline]] inline void Orchestrator::link_bound(uint32_t ring, uint64_t seq, int32_t max_edges) {
  // The slot is on no fanout list yet, so no completion can race this store.
  s_.rings[ring].slot_state(seq).fanin_pending.store(1 + max_edges, std::memory_order_relaxed);
}

// Inlined into submit_one, its only caller: the hot path's steps stay in one piece.
[[gnu::always_inline]] inline void Orchestrator::finish_task(uint32_t ring, uint64_t seq, int32_t edges,
                                                             int32_t max_edges, int32_t cluster_id) {
  TaskRing& tr = s_.rings[ring];
  TaskSlotState& st = tr.slot_state(seq);
  TaskDescriptor& d = tr.descriptor(seq);
  const uint64_t id = make_task_id(ring, seq);
  scope_tasks_.push_back(id);
  if (cluster_id >= 0) s_.cluster_outstanding[cluster_id].fetch_add(1, std::memory_order_acq_rel);
  scope_held_[ring][tr.slot(seq)] = 1;

  // Step 7: a task with no pending producer is found by the schedulers'
  // incremental scan; one whose producers all finished while it was being
  // submitted goes to the orchestrator ready queue.
  d.fanin_count = edges;
  if (s_.config.profiling) d.submit_ns = now_ns();
  if (edges == 0) {
    st.scan_id.store(id | TaskSlotState::kRootBit, std::memory_order_release);
  } else {
    st.scan_id.store(id, std::memory_order_release);
    // One subtraction takes away the submit's own count and the bound's
    // producers that did not become edges.
    const int32_t surplus = 1 + max_edges - edges;
    if (st.fanin_pending.fetch_sub(surplus, std::memory_order_acq_rel) == surplus) {
      st.state.store(kSlotReady, std::memory_order_relaxed);
      if (s_.config.profiling) st.ready_ns = d.submit_ns;
      // The queue holds every task that can be in flight (runtime_state.cpp),
      // so this push succeeds at once; the loop only covers a slot whose
      // previous occupant a consumer is still reading.
      while (!s_.orch_ready->try_push(id)) cpu_relax();
    }
  }

  // Step 8: publish.
  ensure_run_started();
  tr.publish(seq);
  s_.notify_work();
  ++submitted_;
  s_.run_submitted.store(submitted_, std::memory_order_relaxed);
}

int64_t Orchestrator::submit(int32_t kernel_id, int32_t worker_type, PTOParam* params, int32_t n,
                             const int64_t* extra_deps, int32_t num_extra_deps) {
  PTO2TaskSpec spec = pto2_task_spec(kernel_id, worker_type, params, n);
  spec.deps = extra_deps;
  spec.num_deps = num_extra_deps;
  return submit_one(spec);
}

// The submit path in one piece, its steps numbered as in docs/runtime.md §6.
// It is the runtime's hottest code: split into member functions it executed
// 6.7% more instructions per submit, callees included (callgrind,
// pto2_runtime_bench --shape submit), so the function-size check is waived.
// NOLINTNEXTLINE(readability-function-size)
int64_t Orchestrator::submit_one(const PTO2TaskSpec& spec) {
  int32_t kernel_id = spec.kernel_id;
  int32_t worker_type = spec.worker_type;
  PTOParam* const params = spec.params;
  const int32_t n = spec.num_params;
  const int64_t* const extra_deps = spec.deps;
  const int32_t num_extra_deps = spec.num_deps;
  if (!error_.ok()) return probe_ ? probe_submit(params, n, extra_deps, num_extra_deps) : -error_.code;
  if (done_) {
    fail(kOrchestrationDone, "task submitted after pto2_rt_orchestration_done");
    return submit_failed(params, n, extra_deps, num_extra_deps);
  }
  const bool dummy = kernel_id == PTO2_KERNEL_DUMMY;
  if (dummy) worker_type = PTO2_WORKER_VECTOR;  // validated as a normal type, stored as dummy below
  // A plain task (the hot path) has nothing for validate_placement to check.
  const bool placed = spec.cluster_id != -1 || spec.block_dim != 1 || spec.block_idx != -1;
  if (!validate_params(worker_type, params, n) || ((placed || saw_pipe_) && !validate_placement(spec)))
    return submit_failed(params, n, extra_deps, num_extra_deps);
  if (in_capture_ && (spec.cluster_id >= 0 || saw_pipe_) &&
      !refuse_in_capture(saw_pipe_ ? "a task on a cluster pipe" : "a task pinned to a cluster"))
    return submit_failed(params, n, extra_deps, num_extra_deps);
  if (num_extra_deps < 0 || (num_extra_deps > 0 && extra_deps == nullptr)) {
    fail(kInvalidArgument, fmt::format("num_deps {} with deps {}", num_extra_deps, extra_deps ? "set" : "null"));
    return submit_failed(params, n, extra_deps, num_extra_deps);
  }
  uint64_t function_addr = 0;
  if (!dummy && !resolve_kernel(kernel_id, worker_type, &function_addr)) {
    fail(kUnknownKernel, fmt::format("kernel id {} is not registered for {} cores", kernel_id,
                                     worker_type == PTO2_WORKER_CUBE ? "CUBE (AIC)" : "VECTOR (AIV)"));
    return submit_failed(params, n, extra_deps, num_extra_deps);
  }

  const uint32_t ring = static_cast<uint32_t>(current_ring());
  TaskRing& tr = s_.rings[ring];

  // Step 0: batch cleanup of retired tasks' TensorMap entries, looked at
  // every kSyncEvery submits: it reads every ring's tail, on lines the
  // retiring schedulers write (a miss per submit). A snapshot a few submits
  // old only leaves entries of retired tasks in the chains a little longer;
  // a lookup that returns one links nothing (the task is consumed).
  if (submitted_ % kSyncEvery == 0) tensor_map_->sync(/*force=*/false);

  // Step 1: task slot.
  uint64_t seq = 0;
  if (!tr.try_alloc(&seq) && !alloc_slot(ring, &seq)) return submit_failed(params, n, extra_deps, num_extra_deps);
  const uint64_t id = make_task_id(ring, seq);

  // Step 1b: reset the recycled slot.
  TaskSlotState& st = tr.slot_state(seq);
  reset_slot(st, static_cast<uint32_t>(spec.block_dim));
  tensor_map_->before_slot_reuse(ring, seq);

  // Step 2: descriptor.
  TaskDescriptor& d = tr.descriptor(seq);
  d.task_id = id;
  d.kernel_id = kernel_id;
  d.worker_type = dummy ? kWorkerDummy : worker_type;
  d.function_bin_addr = function_addr;
  d.num_params = n;
  d.fanin_head = 0;
  d.fanin_count = 0;
  d.dep_reserved = 0;
  d.packed_buffer_base = 0;
  d.packed_buffer_end = 0;
  d.cluster_id = spec.cluster_id;
  d.group_id = spec.cluster_id >= 0 ? cluster_group_[spec.cluster_id] : -1;
  d.block_dim = spec.block_dim;
  d.block_base = spec.block_idx >= 0 ? spec.block_idx : 0;
  d.block_num = spec.block_idx >= 0 ? spec.block_num : spec.block_dim;
  d.uses_pipes = false;
  uint64_t out_bytes = 0;
  for (int32_t i = 0; i < n; ++i) {
    const PTOParam& p = params[i];
    d.param_kind[i] = static_cast<uint8_t>(p.type);
    if (p.type == PTO_PARAM_SCALAR) {
      d.args[i] = static_cast<int64_t>(p.scalar);
      continue;
    }
    d.tensors[i] = *p.tensor;
    d.args[i] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&d.tensors[i]));
    d.uses_pipes |= p.type >= PTO_PARAM_PIPE_IN;
    if (p.type == PTO_PARAM_OUTPUT && p.tensor->addr == 0)
      out_bytes += align_up(std::max<uint64_t>(pto2_tensor_buffer_bytes(p.tensor), 1), kOutputAlign);
  }

  // Step 3: producers (TensorMap) and buffer owners (lifetime), no references
  // yet. A later block of an expansion keeps the list its first block found
  // (producers_ still holds it; the blocks are one logical task).
  if (!sibling_) {
    producers_.clear();
    owners_.clear();
    for (int32_t i = 0; i < n; ++i) {
      const PTOParam& p = params[i];
      if (p.type == PTO_PARAM_SCALAR || (p.type == PTO_PARAM_OUTPUT && p.tensor->addr == 0)) continue;
      if (p.type >= PTO_PARAM_PIPE_IN) {
        tensor_map_->lookup(pipe_end(*p.tensor, p.type), /*as_writer=*/true, id, &producers_);
        continue;
      }
      tensor_map_->lookup(*p.tensor, /*as_writer=*/p.type != PTO_PARAM_INPUT, id, &producers_);
      if (p.tensor->owner != 0) {
        producers_.push_back(task_from_owner(p.tensor->owner));
        owners_.push_back(producers_.back());
      }
    }
  }
  for (int32_t i = 0; i < num_extra_deps; ++i) {
    const uint64_t dep = static_cast<uint64_t>(extra_deps[i]);
    const uint32_t dr = task_ring(dep);
    const uint64_t limit = dr == ring ? seq : s_.rings[dr].next_seq();
    if (extra_deps[i] < 0 || task_seq(dep) >= limit) {
      publish_as_noop(ring, seq);
      fail(kInvalidArgument, fmt::format("dependency {} is not a task submitted before this one", extra_deps[i]));
      return submit_failed(params, n, extra_deps, num_extra_deps);
    }
    producers_.push_back(dep);
  }
  dedup_producers();

  // Step 5: one packed heap allocation for every runtime-allocated output.
  HeapRing& heap = heaps_[ring];
  if (out_bytes > 0) {
    uint64_t base = 0;
    if (heap.try_alloc(out_bytes, &base) != HeapRing::Alloc::kOk && !alloc_outputs(ring, seq, out_bytes, &base))
      return submit_failed(params, n, extra_deps, num_extra_deps);
    d.packed_buffer_base = base;
    d.packed_buffer_end = base + out_bytes;
    uint64_t off = 0;
    for (int32_t i = 0; i < n; ++i) {
      PTOParam& p = params[i];
      if (p.type != PTO_PARAM_OUTPUT || p.tensor->addr != 0) continue;
      p.tensor->addr = base + off;
      p.tensor->owner = owner_from_task(id);
      d.tensors[i].addr = p.tensor->addr;
      d.tensors[i].owner = p.tensor->owner;
      off += align_up(std::max<uint64_t>(pto2_tensor_buffer_bytes(p.tensor), 1), kOutputAlign);
    }
    // The same Tensor named twice as OUTPUT was allocated once: every copy
    // in the descriptor gets that address.
    for (int32_t i = 0; i < n; ++i) {
      if (params[i].type == PTO_PARAM_OUTPUT && d.tensors[i].addr == 0) {
        d.tensors[i].addr = params[i].tensor->addr;
        d.tensors[i].owner = params[i].tensor->owner;
      }
    }
  }
  d.heap_end_pos = heap.top();

  // Reserve what linking and inserting will use.
  DepPool& deps = deps_[ring];
  const uint64_t dep_needed = 2 * producers_.size() + (sibling_ && first_block_owns_ ? 1 : 0);
  if (!deps.can_reserve(dep_needed) && !reserve_deps(ring, seq, dep_needed))
    return submit_failed(params, n, extra_deps, num_extra_deps);
  d.dep_reserved = static_cast<int32_t>(dep_needed);
  uint64_t tm_needed = 0;
  for (int32_t i = 0; i < n; ++i) tm_needed += params[i].type != PTO_PARAM_SCALAR;
  if (!wait_for([&] { return tensor_map_->reserve(tm_needed); },
                [&]() -> Status {
                  if (tm_needed > tensor_map_->pool_size())
                    return Status::Error(kTensorMapDeadlock,
                                         fmt::format("task needs {} TensorMap entries, pool has {}.", tm_needed,
                                                     tensor_map_->pool_size()));
                  for (uint32_t r = 0; r < kMaxRings; ++r) {
                    if (tensor_map_->entries_in_use(r) == 0) continue;
                    if (!ring_blocked_by_scope(r, r == ring ? seq : s_.rings[r].next_seq())) return Status::Ok();
                  }
                  uint64_t used = tensor_map_->pool_size() - tensor_map_->free_entries();
                  return Status::Error(
                      kTensorMapDeadlock,
                      fmt::format("FATAL: TensorMap entry pool deadlock: {} of {} entries belong to tasks that "
                                  "cannot retire while their scopes are open.",
                                  used, tensor_map_->pool_size()));
                },
                [&] {
                  return fmt::format("[TensorMap] BLOCKED: pool exhausted, requesting {} entries, free={}/{}",
                                     tm_needed, tensor_map_->free_entries(), tensor_map_->pool_size());
                })) {
    publish_as_noop(ring, seq);
    return submit_failed(params, n, extra_deps, num_extra_deps);
  }

  // Step 4: dependencies.
  int32_t edges = 0;
  link_bound(ring, seq, static_cast<int32_t>(producers_.size()));
  for (uint64_t p : producers_)
    if (!producer_settled(p)) add_producer(id, p, &edges);
  if (sibling_ && first_block_owns_) add_lifetime_ref(id, first_block_);
  d.dep_end_pos = deps.top();
  deps.publish();

  // Step 6: this task's accesses become visible to later lookups.
  for (int32_t i = 0; i < n; ++i) {
    const PTOParam& p = params[i];
    if (p.type == PTO_PARAM_SCALAR) continue;
    if (p.type >= PTO_PARAM_PIPE_IN) {
      tensor_map_->insert(pipe_end(d.tensors[i], p.type), id, TensorMap::kWriter);
      continue;
    }
    tensor_map_->insert(d.tensors[i], id, p.type == PTO_PARAM_INPUT ? TensorMap::kReader : TensorMap::kWriter);
  }

  if (recording_) record_task(spec, id);
  finish_task(ring, seq, edges, static_cast<int32_t>(producers_.size()), spec.cluster_id);
  prefetch_next(ring, seq + 2);
  return static_cast<int64_t>(id);
}

int32_t Orchestrator::read_tensor(const Tensor* t, void* dst, uint64_t dst_bytes) {
  if (!error_.ok()) return error_.code;
  if (!refuse_in_capture("pto2_rt_read_tensor")) return error_.code;
  if (t == nullptr || dst == nullptr) {
    fail(kInvalidArgument, "pto2_rt_read_tensor: tensor or destination is null");
    return error_.code;
  }
  if (pto2_is_pipe_tensor(t)) {
    fail(kInvalidArgument, "pto2_rt_read_tensor: a pipe tensor has no storage to read");
    return error_.code;
  }
  // Before the size below reads shapes[0..ndim).
  if (t->ndim < 1 || t->ndim > PTO2_MAX_DIMS || pto2_dtype_size(t->dtype) == 0) {
    fail(kInvalidArgument, fmt::format("pto2_rt_read_tensor: ndim {} / dtype {}: a tensor has 1..{} dimensions and a "
                                       "known dtype",
                                       t->ndim, t->dtype, PTO2_MAX_DIMS));
    return error_.code;
  }
  const uint64_t esz = pto2_dtype_size(t->dtype);
  const uint64_t bytes = pto2_tensor_numel(t) * esz;
  if (bytes > dst_bytes) {
    fail(kInvalidArgument,
         fmt::format("pto2_rt_read_tensor: view holds {} bytes but the destination has {}", bytes, dst_bytes));
    return error_.code;
  }
  // A dependency-only task that reads t completes once every writer of t has.
  Tensor view = *t;
  PTOParam p = make_input_param(view);
  const int64_t id = submit(PTO2_KERNEL_DUMMY, PTO2_WORKER_VECTOR, &p, 1, nullptr, 0);
  if (id < 0) return error_.code;
  TaskSlotState& st = s_.slot_of(static_cast<uint64_t>(id));
  // Named before the wait looks at the task: its completion wakes this thread
  // (and no other completion does, RuntimeState::complete).
  // An RMW, like the completer's side under TSan (RuntimeState::awaited_after_fence).
  s_.awaited_task.exchange(static_cast<uint64_t>(id), std::memory_order_seq_cst);
  const bool done =
      wait_for([&] { return st.state.load(std::memory_order_acquire) >= kSlotCompleted; }, [] { return Status::Ok(); },
               [&] { return fmt::format("[ReadTensor] waiting for the writers of {:#x}", t->addr); });
  // Back to waking on freed space (a space wait prepares its park with a
  // seq_cst RMW after this store, and a retirer reads it after a fence).
  s_.awaited_task.exchange(kNoTask, std::memory_order_seq_cst);
  if (!done) return error_.code;
  // Copy the view row by row into dense row-major order.
  const int32_t nd = t->ndim;
  const uint64_t row = t->shapes[nd - 1] * esz;
  uint64_t idx[PTO2_MAX_DIMS] = {};
  const uint64_t rows = pto2_tensor_numel(t) / std::max<uint32_t>(t->shapes[nd - 1], 1);
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t r = 0; r < rows && row > 0; ++r) {
    uint64_t elem = 0;
    for (int32_t dd = 0; dd < nd; ++dd) elem += (t->offsets[dd] + idx[dd]) * pto2_tensor_stride(t, dd);
    std::memcpy(out + r * row, reinterpret_cast<const uint8_t*>(t->addr) + elem * esz, row);
    for (int32_t dd = nd - 2; dd >= 0; --dd) {
      if (++idx[dd] < t->shapes[dd]) break;
      idx[dd] = 0;
    }
  }
  return kOk;
}

}  // namespace pto2
