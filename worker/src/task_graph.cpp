// The TaskGraph (task_graph.h): the submit's wiring, the life cycle of a
// task, scopes and the heap rings.
#include "task_graph.h"

#include <fmt/format.h>

#include <algorithm>

#include "scheduler.h"

namespace pto {

Status TaskGraph::map_rings() {
  for (int r = 0; r < kHeapRings; ++r) {
    if (Status s = rings_map_[r].map(cfg_.heap_ring_bytes, "a heap ring"); !s.ok()) return s;
    rings_[r].attach(rings_map_[r].data(), cfg_.heap_ring_bytes);
  }
  return Status::Ok();
}

void TaskGraph::unmap_rings() {
  for (auto& m : rings_map_) m.reset();
}

// --- the run ------------------------------------------------------------------

void TaskGraph::begin_run() {
  run_ = RunResult{};
  cancelled_.clear();
  scopes_.assign(1, {});
  scope_depth_ = 0;
  in_run_ = true;
}

void TaskGraph::close_scopes() {
  if (scopes_.size() > 1)
    fail_run(Status::Error(kWorkerInvalidArgument,
                           fmt::format("{} scope(s) left open by the orchestration function", scopes_.size() - 1)));
  while (!scopes_.empty()) {
    std::vector<TaskNode*> members = std::move(scopes_.back());
    scopes_.pop_back();
    for (TaskNode* s : members) unref(s);
  }
}

RunResult TaskGraph::end_run() {
  in_run_ = false;
  ++counters_.runs;
  RunResult r = std::move(run_);
  if (r.status.ok() && r.first_failure) r.status = Status::Error(kWorkerRunFailed, r.first_failure->describe());
  nodes_.clear();
  tmap_.clear();
  for (int i = 0; i < kHeapRings; ++i) {
    ring_allocs_[i].clear();
    rings_[i].reset();
  }
  allocs_.clear();
  next_task_id_ = 1;
  return r;
}

void TaskGraph::fail_run(const Status& s) {
  if (run_.status.ok()) run_.status = s;
}

bool TaskGraph::cancel(const std::string& reason) {
  if (!in_run_ || !cancelled_.empty()) return false;
  cancelled_ = reason.empty() ? "cancelled" : reason;
  fail_run(Status::Error(kWorkerCancelled, "cancelled: " + cancelled_));
  // Ready tasks not yet launched end now; tasks still waiting on producers
  // end when they become ready (make_ready).
  for (TaskNode* s : scheduler_->take_queued()) {
    s->failure = TaskFailure{s->id, s->callable.hex(), "", Outcome::SKIPPED, "cancelled: " + cancelled_};
    s->members_left = 0;
    finalize(s, Outcome::SKIPPED);
  }
  return true;
}

Worker::RunProgress TaskGraph::progress() const {
  Worker::RunProgress p;
  p.running = in_run_;
  if (in_run_) {
    p.submitted = run_.tasks_submitted;
    p.finished = run_.tasks_succeeded + run_.tasks_failed + run_.tasks_skipped;
  }
  return p;
}

// --- scopes and heap rings --------------------------------------------------------

void TaskGraph::scope_begin() {
  scopes_.emplace_back();
  ++scope_depth_;
}

Status TaskGraph::scope_end() {
  if (scopes_.size() <= 1) {
    Status s = Status::Error(kWorkerInvalidArgument, "scope_end without a matching scope_begin");
    fail_run(s);
    return s;
  }
  std::vector<TaskNode*> members = std::move(scopes_.back());
  scopes_.pop_back();
  --scope_depth_;
  for (TaskNode* s : members) unref(s);
  return Status::Ok();
}

Status TaskGraph::buffer_owner(uint64_t lo, uint64_t hi, TaskNode** owner) const {
  *owner = nullptr;
  auto it = allocs_.upper_bound(lo);
  if (it != allocs_.begin()) {
    --it;
    if (lo >= it->first && lo < it->second.first) {
      *owner = it->second.second;
      return Status::Ok();
    }
  }
  for (int r = 0; r < kHeapRings; ++r) {
    const uint64_t base = reinterpret_cast<uint64_t>(rings_map_[r].data());
    if (lo >= base && lo < base + rings_map_[r].size())
      return Status::Error(kWorkerInvalidArgument,
                           fmt::format("[0x{:x}, 0x{:x}) lies in heap ring {} but no live buffer holds it: the scope "
                                       "that owned it has ended",
                                       lo, hi, r));
  }
  return Status::Ok();
}

Status TaskGraph::heap_alloc(uint64_t bytes, int ring, std::unique_lock<std::mutex>& lk, uint8_t** ptr,
                             uint64_t* end) {
  for (;;) {
    switch (rings_[ring].alloc(bytes, end, ptr)) {
      case L3HeapRing::Alloc::kOk: return Status::Ok();
      case L3HeapRing::Alloc::kTooLarge:
        return Status::Error(kWorkerHeapExhausted,
                             fmt::format("{} bytes of outputs exceed heap ring {} ({} bytes; heap_ring_bytes)", bytes,
                                         ring, rings_[ring].size()));
      case L3HeapRing::Alloc::kFull: break;
    }
    // Space comes back only when the oldest allocation's task is consumed,
    // which needs its scope closed. If that scope is still open (this
    // orchestration is inside it) waiting would never end.
    TaskNode* oldest = ring_allocs_[ring].empty() ? nullptr : ring_allocs_[ring].front();
    bool open = !oldest;
    for (auto& sc : scopes_)
      for (TaskNode* x : sc) open |= x == oldest;
    if (open)
      return Status::Error(kWorkerHeapExhausted,
                           fmt::format("heap ring {} ({} bytes, {} in use) cannot fit {} bytes: its oldest buffer "
                                       "(task {}) belongs to a scope that is still open; end the scope or raise "
                                       "heap_ring_bytes",
                                       ring, rings_[ring].size(), rings_[ring].used(), bytes, oldest ? oldest->id : 0));
    // Bounded: the tasks holding it are running or ready and each ends (task
    // timeouts, child liveness); check again at least every 100 ms.
    lock_.idle.wait_for(lk, std::chrono::milliseconds(100));
  }
}

Result<ContinuousTensor> TaskGraph::alloc_in_scope(const std::vector<uint32_t>& shape, int32_t dtype,
                                                   std::unique_lock<std::mutex>& lk) {
  Result<ContinuousTensor> r;
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  // A dependency-free node owns the buffer, so the ring frees it FIFO like
  // any other; consumers hold it through the TensorMap.
  const int ring = std::min(scope_depth_, kHeapRings - 1);
  uint8_t* p = nullptr;
  uint64_t end = 0;
  if (Status s = heap_alloc(tensor_bytes(t), ring, lk, &p, &end); !s.ok()) {
    r.status = Status::Error(s.code, "alloc: " + s.message);
    return r;
  }
  nodes_.push_back(std::make_unique<TaskNode>());
  TaskNode* s = nodes_.back().get();
  s->id = 0;  // not a task
  s->state = TaskNode::State::kFinal;
  s->refs = 1;  // the scope
  s->ring = ring;
  s->heap_start = reinterpret_cast<uint64_t>(p);
  s->heap_end = end;
  s->scope_depth = scope_depth_;
  ring_allocs_[ring].push_back(s);
  allocs_[s->heap_start] = {s->heap_start + std::max<uint64_t>(tensor_bytes(t), 1), s};
  scopes_.back().push_back(s);
  t.data = reinterpret_cast<uint64_t>(p);
  tmap_.set_writer(t.data, t.data + std::max<uint64_t>(tensor_bytes(t), 1), s);
  r.value = t;
  return r;
}

// --- submit ------------------------------------------------------------------------

Status TaskGraph::add_task(const NewTask& t, std::vector<TaskArgs>& members, std::unique_lock<std::mutex>& lk,
                           TaskNode** out) {
  const int ring = std::min(scope_depth_, kHeapRings - 1);
  uint8_t* heap = nullptr;
  uint64_t heap_end = 0;
  if (t.alloc_bytes)
    if (Status s = heap_alloc(t.alloc_bytes, ring, lk, &heap, &heap_end); !s.ok()) return s;
  nodes_.push_back(std::make_unique<TaskNode>());
  TaskNode* s = nodes_.back().get();
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
  s->scope_depth = scope_depth_;
  s->submit_ns = now_ns();
  if (t.alloc_bytes) {
    s->ring = ring;
    s->heap_start = reinterpret_cast<uint64_t>(heap);
    s->heap_end = heap_end;
    ring_allocs_[ring].push_back(s);
    allocs_[s->heap_start] = {s->heap_start + t.alloc_bytes, s};
  }
  for (TaskNode* o : t.owners) {
    ++o->refs;
    s->buffer_holds.push_back(o);
  }
  ++pending_;
  ++run_.tasks_submitted;
  scopes_.back().push_back(s);
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
  for (TaskNode* h : consumer->holds)
    if (h == producer) {
      // Already wired; a data edge upgrades an ordering edge.
      if (data && producer->state != TaskNode::State::kFinal) {
        for (auto& [c, d] : producer->fanout)
          if (c == consumer) d = true;
      } else if (data && producer->outcome != Outcome::SUCCESS && !consumer->poisoned) {
        consumer->poisoned = true;
        consumer->poison = fmt::format("upstream task {} did not succeed", producer->id);
      }
      return;
    }
  // Hold the producer so its heap buffer outlives this consumer.
  ++producer->refs;
  consumer->holds.push_back(producer);
  if (producer->state == TaskNode::State::kFinal) {
    if (data && producer->outcome != Outcome::SUCCESS && !consumer->poisoned) {
      consumer->poisoned = true;
      consumer->poison = fmt::format("upstream task {} did not succeed", producer->id);
    }
    return;
  }
  ++consumer->fanin;
  producer->fanout.emplace_back(consumer, data);
}

// --- life cycle ----------------------------------------------------------------------

void TaskGraph::make_ready(TaskNode* s) {
  if (!cancelled_.empty() && !s->poisoned) {
    s->poisoned = true;
    s->poison = "cancelled: " + cancelled_;
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
    s->state = TaskNode::State::kFinal;
    s->outcome = o;
    --pending_;
    counters_.task_latency.record(now_ns() - s->submit_ns);
    if (o == Outcome::SUCCESS) {
      ++run_.tasks_succeeded;
      ++counters_.succeeded;
    } else if (o == Outcome::SKIPPED) {
      ++run_.tasks_skipped;
      ++counters_.skipped;
    } else {
      ++run_.tasks_failed;
      ++counters_.failed;
      if (!run_.first_failure) {
        run_.first_failure = s->failure;
        run_.outcome = o;
      }
      if (run_.failures.size() < 64) run_.failures.push_back(s->failure);
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
  }
  if (pending_ == 0) lock_.idle.notify_all();
}

void TaskGraph::unref(TaskNode* s) {
  if (--s->refs > 0) return;
  s->consumed = true;
  if (s->outcome == Outcome::SUCCESS) tmap_.remove_writer(s);
  if (s->ring >= 0) reclaim_rings();
}

void TaskGraph::reclaim_rings() {
  bool freed = false;
  for (int r = 0; r < kHeapRings; ++r) {
    auto& q = ring_allocs_[r];
    while (!q.empty() && q.front()->consumed) {
      TaskNode* owner = q.front();
      rings_[r].release_to(owner->heap_end);
      // The memory may be handed out again: no stale entry may order (or
      // poison) the accesses of its next owner.
      auto a = allocs_.find(owner->heap_start);
      if (a != allocs_.end()) {
        tmap_.erase_range(a->first, a->second.first);
        allocs_.erase(a);
      }
      q.pop_front();
      freed = true;
    }
    if (q.empty()) rings_[r].reset();
  }
  if (freed) lock_.idle.notify_all();
}

}  // namespace pto
