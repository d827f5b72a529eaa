// The TaskGraph (task_graph.h): runs and their slots, the submit's wiring,
// the life cycle of a task, scopes and the heap rings.
#include "task_graph.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine_log.h"
#include "scheduler.h"

namespace pto {

Status TaskGraph::map_rings() {
  slots_.clear();
  for (int i = 0; i < cfg_.max_concurrent_runs; ++i) {
    auto slot = std::make_unique<Slot>();
    if (Status s = slot->map.map(kHeapRings * cfg_.heap_ring_bytes, "a run's heap rings"); !s.ok()) return s;
    for (int r = 0; r < kHeapRings; ++r)
      slot->rings[r].attach(slot->map.data() + r * cfg_.heap_ring_bytes, cfg_.heap_ring_bytes);
    slots_.push_back(std::move(slot));
  }
  return Status::Ok();
}

void TaskGraph::unmap_rings() { slots_.clear(); }

uint64_t TaskGraph::ring_used(int r) const {
  uint64_t n = 0;
  for (const auto& slot : slots_) n += slot->rings[r].used();
  return n;
}

// --- runs -----------------------------------------------------------------------

RunState* TaskGraph::begin_run(const RunOptions& options) {
  int free_slot = -1;
  for (size_t i = 0; i < slots_.size() && free_slot < 0; ++i)
    if (!slots_[i]->run) free_slot = static_cast<int>(i);
  if (free_slot < 0) return nullptr;
  auto state = std::make_unique<RunState>();
  RunState* run = state.get();
  run->id = next_run_id_++;
  run->options = options;
  run->slot = free_slot;
  run->start_ns = now_ns();
  run->result.log_written = false;  // until a task's answer says otherwise (Scheduler::complete_member)
  if (options.deadline_ms)
    run->deadline_ns = run->start_ns + std::min<uint64_t>(options.deadline_ms, uint64_t(1) << 40) * 1'000'000;
  slots_[free_slot]->run = run;
  states_[run->id] = std::move(state);
  live_.push_back(run);
  live_count_.store(static_cast<uint32_t>(live_.size()), std::memory_order_relaxed);
  return run;
}

void TaskGraph::close_scopes(RunState* run) {
  if (run->scopes.size() > 1)
    fail_run(run, Status::Error(kWorkerInvalidArgument,
                                fmt::format("{} scope(s) left open by the orchestration function",
                                            run->scopes.size() - 1)));
  while (!run->scopes.empty()) {
    std::vector<TaskNode*> members = std::move(run->scopes.back());
    run->scopes.pop_back();
    for (TaskNode* s : members) unref(s);
  }
}

bool TaskGraph::detach(RunState* run) {
  if (run->pending == 0) return true;
  run->detached = true;
  detached_count_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void TaskGraph::queue_end(RunState* run) {
  if (run->ending) return;
  run->ending = true;
  ending_.push_back(run);
  ending_count_.store(static_cast<uint32_t>(ending_.size()), std::memory_order_release);
  // A driver ends it after its round: this thread, when it is one (its
  // answer collected there); else a parked scheduler thread is woken.
  if (scheduler_ && !Scheduler::on_driving_thread()) scheduler_->kick(true);
}

std::vector<RunState*> TaskGraph::take_ending() {
  std::vector<RunState*> out;
  out.swap(ending_);
  ending_count_.store(0, std::memory_order_release);
  return out;
}

RunResult TaskGraph::end_run(RunState* run) {
  run->ended = true;
  if (run->detached) detached_count_.fetch_sub(1, std::memory_order_relaxed);
  if (scheduler_) (void)scheduler_->take_queued(run);  // nothing is queued by now: its fair-queue turns are dropped
  live_.erase(std::remove(live_.begin(), live_.end(), run), live_.end());
  live_count_.store(static_cast<uint32_t>(live_.size()), std::memory_order_relaxed);
  ++counters_.runs;
  RunResult r = std::move(run->result);
  r.start_ns = run->start_ns;
  r.chip_tasks_submitted = run->chip_submitted.load(std::memory_order_relaxed);
  r.chip_tasks_completed = run->chip_completed.load(std::memory_order_relaxed);
  if (r.status.ok() && r.first_failure) r.status = Status::Error(kWorkerRunFailed, r.first_failure->describe());
  // Failed writers stayed in the TensorMap so that the run's later readers
  // were skipped; nothing of the run may stay there now.
  for (auto& n : run->nodes) tmap_.remove(n.get());
  Slot& slot = *slots_[run->slot];
  for (int i = 0; i < kHeapRings; ++i) {
    for (TaskNode* n : slot.allocs[i]) forget_allocation(n);
    slot.allocs[i].clear();
    slot.rings[i].reset();
  }
  slot.run = nullptr;
  run->slot = -1;
  if (run->unconsumed != 0)  // every task is final and every scope closed: nothing can hold a node
    engine_log()->error("{}: run {} ended with {} nodes still referenced", cfg_.name, run->id, run->unconsumed);
  states_.erase(run->id);
  lock_.slot.notify_one();  // a run waiting for a slot
  lock_.idle.notify_all();  // close() waits for the runs to end
  return r;
}

void TaskGraph::fail_run(RunState* run, const Status& s) {
  if (run->result.status.ok()) run->result.status = s;
}

bool TaskGraph::cancel(RunState* run, const std::string& reason) {
  if (run->ended || !run->cancelled.empty()) return false;
  run->cancelled = reason.empty() ? "cancelled" : reason;
  fail_run(run, Status::Error(kWorkerCancelled, "cancelled: " + run->cancelled));
  // Ready tasks not yet launched end now, running ones are stopped; tasks
  // still waiting on producers end when they become ready (make_ready).
  for (TaskNode* s : scheduler_->take_queued(run)) {
    s->failure = TaskFailure{s->id, s->callable.hex(), "", Outcome::SKIPPED, "cancelled: " + run->cancelled};
    s->members_left = 0;
    finalize(s, Outcome::SKIPPED);
  }
  scheduler_->stop_running(run);
  return true;
}

RunProgress TaskGraph::progress(const RunState* run) const {
  RunProgress p;
  p.running = !run->ended;
  p.submitted = run->result.tasks_submitted;
  p.finished = run->result.tasks_succeeded + run->result.tasks_failed + run->result.tasks_skipped +
               run->result.tasks_stopped;
  p.chip_submitted = run->chip_submitted.load(std::memory_order_relaxed);
  p.chip_completed = run->chip_completed.load(std::memory_order_relaxed);
  return p;
}

RunProgress TaskGraph::progress() const {
  RunProgress p;
  for (const RunState* run : live_) {
    const RunProgress q = progress(run);
    p.running = true;
    p.submitted += q.submitted;
    p.finished += q.finished;
    p.chip_submitted += q.chip_submitted;
    p.chip_completed += q.chip_completed;
  }
  return p;
}

// --- scopes and heap rings --------------------------------------------------------

void TaskGraph::scope_begin(RunState* run) {
  if (run->scope_depth >= Orchestrator::kMaxScopeDepth) {
    fail_run(run, Status::Error(kWorkerInvalidArgument,
                                fmt::format("scope_begin: more than {} nested scopes", Orchestrator::kMaxScopeDepth)));
    return;
  }
  run->scopes.emplace_back();
  ++run->scope_depth;
}

Status TaskGraph::scope_end(RunState* run) {
  if (run->scopes.size() <= 1) {
    Status s = Status::Error(kWorkerInvalidArgument, "scope_end without a matching scope_begin");
    fail_run(run, s);
    return s;
  }
  std::vector<TaskNode*> members = std::move(run->scopes.back());
  run->scopes.pop_back();
  --run->scope_depth;
  for (TaskNode* s : members) unref(s);
  return Status::Ok();
}

Status TaskGraph::buffer_owner(const RunState* run, uint64_t lo, uint64_t hi, TaskNode** owner) const {
  *owner = nullptr;
  auto it = allocs_.upper_bound(lo);
  if (it != allocs_.begin()) {
    --it;
    if (lo >= it->first && lo < it->second.first) {
      if (it->second.second->run != run)
        return Status::Error(kWorkerInvalidArgument,
                             fmt::format("[0x{:x}, 0x{:x}) is a buffer of another run; a run's heap-ring buffers are "
                                         "its own",
                                         lo, hi));
      *owner = it->second.second;
      return Status::Ok();
    }
  }
  for (const auto& slot : slots_) {
    const uint64_t base = reinterpret_cast<uint64_t>(slot->map.data());
    if (lo < base || lo >= base + slot->map.size()) continue;
    if (slot->run != run)
      return Status::Error(kWorkerInvalidArgument,
                           fmt::format("[0x{:x}, 0x{:x}) lies in another run's heap rings", lo, hi));
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("[0x{:x}, 0x{:x}) lies in heap ring {} but no live buffer holds it: the scope "
                                     "that owned it has ended",
                                     lo, hi, (lo - base) / cfg_.heap_ring_bytes));
  }
  return Status::Ok();
}

Status TaskGraph::heap_alloc(RunState* run, uint64_t bytes, int ring, std::unique_lock<std::mutex>& lk,
                             uint8_t** ptr, uint64_t* end) {
  Slot& slot = *slots_[run->slot];
  for (;;) {
    switch (slot.rings[ring].alloc(bytes, end, ptr)) {
      case L3HeapRing::Alloc::kOk: return Status::Ok();
      case L3HeapRing::Alloc::kTooLarge:
        return Status::Error(kWorkerHeapExhausted,
                             fmt::format("{} bytes of outputs exceed heap ring {} ({} bytes; heap_ring_bytes)", bytes,
                                         ring, slot.rings[ring].size()));
      case L3HeapRing::Alloc::kFull: break;
    }
    // Space comes back only when the oldest allocation's task is consumed,
    // which needs its scope closed. If that scope is still open (this
    // orchestration is inside it) waiting would never end.
    TaskNode* oldest = slot.allocs[ring].empty() ? nullptr : slot.allocs[ring].front();
    bool open = !oldest;
    for (auto& sc : run->scopes)
      for (TaskNode* x : sc) open |= x == oldest;
    if (open)
      return Status::Error(kWorkerHeapExhausted,
                           fmt::format("heap ring {} ({} bytes, {} in use) cannot fit {} bytes: its oldest buffer "
                                       "(task {}) belongs to a scope that is still open; end the scope or raise "
                                       "heap_ring_bytes",
                                       ring, slot.rings[ring].size(), slot.rings[ring].used(), bytes,
                                       oldest ? oldest->id : 0));
    if (!run->cancelled.empty())
      return Status::Error(kWorkerCancelled, "cancelled while waiting for heap-ring space: " + run->cancelled);
    // Bounded: the tasks holding it are running or ready and each ends (task
    // timeouts, child liveness); check again at least every 100 ms. A
    // detached run's function started on a driving thread drives meanwhile:
    // those tasks may be waiting for this very thread.
    if (scheduler_ && Scheduler::on_driving_thread()) {
      lk.unlock();
      scheduler_->drive_once();
      lk.lock();
      continue;
    }
    lock_.idle.wait_for(lk, std::chrono::milliseconds(100));
  }
}

TaskNode* TaskGraph::new_node(RunState* run) {
  run->nodes.push_back(std::make_unique<TaskNode>());
  TaskNode* s = run->nodes.back().get();
  s->run = run;
  ++run->unconsumed;
  return s;
}

Result<ContinuousTensor> TaskGraph::alloc_in_scope(RunState* run, const std::vector<uint32_t>& shape, int32_t dtype,
                                                   std::unique_lock<std::mutex>& lk) {
  Result<ContinuousTensor> r;
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  // A dependency-free node owns the buffer, so the ring frees it FIFO like
  // any other; consumers hold it through the TensorMap.
  const int ring = std::min(run->scope_depth, kHeapRings - 1);
  uint8_t* p = nullptr;
  uint64_t end = 0;
  if (Status s = heap_alloc(run, tensor_bytes(t), ring, lk, &p, &end); !s.ok()) {
    r.status = Status::Error(s.code, "alloc: " + s.message);
    return r;
  }
  TaskNode* s = new_node(run);
  s->id = 0;  // not a task
  s->state = TaskNode::State::kFinal;
  s->refs = 1;  // the scope
  s->ring = ring;
  s->heap_start = reinterpret_cast<uint64_t>(p);
  s->heap_end = end;
  s->scope_depth = run->scope_depth;
  slots_[run->slot]->allocs[ring].push_back(s);
  allocs_[s->heap_start] = {s->heap_start + std::max<uint64_t>(tensor_bytes(t), 1), s};
  run->scopes.back().push_back(s);
  t.data = reinterpret_cast<uint64_t>(p);
  tmap_.set_writer(t.data, t.data + std::max<uint64_t>(tensor_bytes(t), 1), s);
  r.value = t;
  return r;
}

// --- submit ------------------------------------------------------------------------

Status TaskGraph::add_task(RunState* run, const NewTask& t, std::vector<TaskArgs>& members,
                           std::unique_lock<std::mutex>& lk, TaskNode** out) {
  const int ring = std::min(run->scope_depth, kHeapRings - 1);
  uint8_t* heap = nullptr;
  uint64_t heap_end = 0;
  if (t.alloc_bytes)
    if (Status s = heap_alloc(run, t.alloc_bytes, ring, lk, &heap, &heap_end); !s.ok()) return s;
  TaskNode* s = new_node(run);
  const int n = static_cast<int>(members.size());
  s->id = next_task_id_++;
  s->next_level = t.next_level;
  s->callable = t.callable;
  s->config = t.config;
  s->pinned = t.pinned;
  s->allowed = t.allowed;
  s->retries_left = n == 1 ? t.retries : 0;
  s->uses_remote_buffer = t.remote_pinned;
  s->members_left = n;
  s->refs = 2;   // the scope, and the task itself until it is final
  s->fanin = 1;  // guard while wiring
  s->scope_depth = run->scope_depth;
  s->submit_ns = now_ns();
  if (t.alloc_bytes) {
    s->ring = ring;
    s->heap_start = reinterpret_cast<uint64_t>(heap);
    s->heap_end = heap_end;
    slots_[run->slot]->allocs[ring].push_back(s);
    allocs_[s->heap_start] = {s->heap_start + t.alloc_bytes, s};
  }
  for (TaskNode* o : t.owners) {
    ++o->refs;
    s->buffer_holds.push_back(o);
  }
  ++pending_;
  ++run->pending;
  ++run->result.tasks_submitted;
  run->scopes.back().push_back(s);
  uint8_t* next_out = heap;
  for (TaskArgs& a : members) wire_member(s, a, next_out, t.with_directions);
  if (--s->fanin == 0) make_ready(s);
  *out = s;
  return Status::Ok();
}

// One member's tensors: OUTPUTs without an address get their share of the
// task's allocation; every other tensor is ordered after the earlier
// accesses it overlaps and recorded for later ones.
void TaskGraph::wire_member(TaskNode* s, TaskArgs& a, uint8_t*& next_out, bool with_directions) {
  for (int i = 0; i < a.tensor_count(); ++i) {
    ContinuousTensor& t = a.tensor(i);
    const TensorArgType tag = a.tag(i);
    if (tag == TensorArgType::NO_DEP) continue;
    if (t.data == 0) {  // OUTPUT to allocate: fresh memory, no earlier access to order after
      t.data = reinterpret_cast<uint64_t>(next_out);
      next_out += (tensor_bytes(t) + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
      tmap_.set_writer(t.data, t.data + std::max<uint64_t>(tensor_bytes(t), 1), s);
      continue;
    }
    const uint64_t lo = t.data, hi = t.data + std::max<uint64_t>(tensor_bytes(t), 1);
    const bool reads = tag == TensorArgType::INPUT || tag == TensorArgType::INOUT;
    const bool writes = !(tag == TensorArgType::INPUT);
    tmap_.for_overlaps(lo, hi, writes, [&](TaskNode* p, bool is_writer) {
      if (p != s) add_dependency(s, p, is_writer && reads);
    });
    if (writes) tmap_.set_writer(lo, hi, s);
    else tmap_.add_reader(lo, hi, s);
  }
  s->blobs.emplace_back();
  encode_args(a.view(), &s->blobs.back());
  if (with_directions) {  // remote endpoints copy tensor bytes by direction
    std::vector<TensorDirection> d(a.tensor_count());
    for (int i = 0; i < a.tensor_count(); ++i) {
      const TensorArgType tag = a.tag(i);
      d[i] = tag == TensorArgType::INPUT                                              ? TensorDirection::IN
             : tag == TensorArgType::OUTPUT || tag == TensorArgType::OUTPUT_EXISTING ? TensorDirection::OUT
                                                                                     : TensorDirection::INOUT;
    }
    s->dirs.push_back(std::move(d));
  }
}

void TaskGraph::add_dependency(TaskNode* consumer, TaskNode* producer, bool data) {
  if (producer->run != consumer->run) {
    // Another run's task on the same bytes: this one follows it, nothing
    // more. It is not held (runs never share heap-ring buffers) and its
    // failure skips nothing here.
    if (producer->state == TaskNode::State::kFinal) return;
    ++consumer->fanin;
    producer->fanout.emplace_back(consumer, false);
    return;
  }
  auto poison_if_failed = [&] {
    if (data && producer->outcome != Outcome::SUCCESS && !consumer->poisoned) {
      consumer->poisoned = true;
      consumer->poison = fmt::format("upstream task {} did not succeed", producer->id);
    }
  };
  if (producer->consumed) {  // a failed writer kept for its run's later readers: nothing left to hold
    poison_if_failed();
    return;
  }
  for (TaskNode* h : consumer->holds)
    if (h == producer) {
      // Already wired; a data edge upgrades an ordering edge.
      if (data && producer->state != TaskNode::State::kFinal) {
        for (auto& [c, d] : producer->fanout)
          if (c == consumer) d = true;
      } else {
        poison_if_failed();
      }
      return;
    }
  // Hold the producer so its heap buffer outlives this consumer.
  ++producer->refs;
  consumer->holds.push_back(producer);
  if (producer->state == TaskNode::State::kFinal) {
    poison_if_failed();
    return;
  }
  ++consumer->fanin;
  producer->fanout.emplace_back(consumer, data);
}

// --- life cycle ----------------------------------------------------------------------

void TaskGraph::make_ready(TaskNode* s) {
  if (!s->run->cancelled.empty() && !s->poisoned) {
    s->poisoned = true;
    s->poison = "cancelled: " + s->run->cancelled;
  }
  if (s->poisoned) {
    s->failure = TaskFailure{s->id, s->callable.hex(), "", Outcome::SKIPPED, s->poison};
    finalize(s, Outcome::SKIPPED);
    return;
  }
  s->state = TaskNode::State::kReady;
  scheduler_->enqueue(s);
}

void TaskGraph::finalize(TaskNode* first, Outcome first_outcome) {
  std::vector<std::pair<TaskNode*, Outcome>> work{{first, first_outcome}};
  while (!work.empty()) {
    auto [s, o] = work.back();
    work.pop_back();
    RunState* run = s->run;
    RunResult& res = run->result;
    s->state = TaskNode::State::kFinal;
    s->outcome = o;
    --pending_;
    --run->pending;
    counters_.task_latency.record(now_ns() - s->submit_ns);
    switch (o) {
      case Outcome::SUCCESS:
        ++res.tasks_succeeded;
        ++counters_.succeeded;
        break;
      case Outcome::SKIPPED:
        ++res.tasks_skipped;
        ++counters_.skipped;
        break;
      case Outcome::STOPPED:  // the run's verdict is the cancellation, not this task
        ++res.tasks_stopped;
        ++counters_.stopped;
        if (res.failures.size() < 64) res.failures.push_back(s->failure);
        break;
      default:
        ++res.tasks_failed;
        ++counters_.failed;
        if (!res.first_failure) {
          res.first_failure = s->failure;
          res.outcome = o;
        }
        if (res.failures.size() < 64) res.failures.push_back(s->failure);
    }
    for (auto& [c, data] : s->fanout) {
      if (data && o != Outcome::SUCCESS && !c->poisoned) {
        c->poisoned = true;
        c->poison = fmt::format("upstream task {} did not succeed", s->id);
      }
      if (--c->fanin == 0) {
        if (c->poisoned) {
          c->failure = TaskFailure{c->id, c->callable.hex(), "", Outcome::SKIPPED, c->poison};
          work.emplace_back(c, Outcome::SKIPPED);
        } else {
          make_ready(c);
        }
      }
    }
    for (TaskNode* p : s->holds) unref(p);
    for (TaskNode* p : s->buffer_holds) unref(p);
    unref(s);
    if (run->pending == 0) {
      if (run->detached) {
        queue_end(run);
      } else if (run->drainer) {
        if (defer_drained_)
          drained_.push_back(std::move(run->drainer));
        else
          std::exchange(run->drainer, nullptr)->wake();
      }
    }
  }
}

void TaskGraph::unref(TaskNode* s) {
  if (--s->refs > 0) return;
  consume(s);
}

void TaskGraph::consume(TaskNode* s) {
  if (s->consumed) return;
  s->consumed = true;
  --s->run->unconsumed;
  // A failed writer stays in the TensorMap until its run ends: later tasks of
  // the run that read what it should have written are skipped.
  if (s->outcome == Outcome::SUCCESS) tmap_.remove(s);
  if (s->ring >= 0) reclaim_rings(*slots_[s->run->slot]);
}

// An allocation's memory may be handed out again: no stale entry may order
// (or poison) the accesses of its next owner.
void TaskGraph::forget_allocation(TaskNode* s) {
  auto a = allocs_.find(s->heap_start);
  if (a != allocs_.end()) {
    tmap_.erase_range(a->first, a->second.first);
    allocs_.erase(a);
  }
  s->ring = -1;
}

void TaskGraph::reclaim_rings(Slot& slot) {
  bool freed = false;
  for (int r = 0; r < kHeapRings; ++r) {
    auto& q = slot.allocs[r];
    while (!q.empty() && q.front()->consumed) {
      TaskNode* owner = q.front();
      slot.rings[r].release_to(owner->heap_end);
      forget_allocation(owner);
      q.pop_front();
      freed = true;
    }
    if (q.empty()) slot.rings[r].reset();
  }
  if (freed) lock_.idle.notify_all();
}

}  // namespace pto
