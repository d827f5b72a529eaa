// The submit path (seed 001 §6): validation, heap-ring allocation of OUTPUTs
// without an address, dependency inference from address regions, scopes and
// the task life cycle (ready -> running -> final -> consumed) with failure
// poisoning. Everything that touches the graph runs with mu_ held.
#include <fmt/format.h>

#include <algorithm>

#include "worker_impl.h"

namespace pto {

// --- L3 TensorMap ------------------------------------------------------------

void L3TensorMap::add_reader(uint64_t lo, uint64_t hi, Slot* s) {
  auto [b, e] = map_.equal_range(lo);
  for (auto it = b; it != e; ++it) {
    if (it->second.end != hi) continue;
    auto& r = it->second.readers;
    // Finished readers no longer order anything.
    r.erase(std::remove_if(r.begin(), r.end(), [](Slot* x) { return x->state == Slot::State::kFinal; }), r.end());
    r.push_back(s);
    return;
  }
  map_.emplace(lo, Entry{hi, nullptr, {s}});
  max_len_ = std::max(max_len_, hi - lo);
}

void L3TensorMap::set_writer(uint64_t lo, uint64_t hi, Slot* s) {
  // Entries the new region covers are superseded: the writer already follows them.
  auto it = map_.lower_bound(lo);
  while (it != map_.end() && it->first < hi) {
    if (it->second.end <= hi)
      it = map_.erase(it);
    else
      ++it;
  }
  map_.emplace(lo, Entry{hi, s, {}});
  max_len_ = std::max(max_len_, hi - lo);
  s->map_keys.push_back(lo);
}

void L3TensorMap::erase_range(uint64_t lo, uint64_t hi) {
  auto it = map_.lower_bound(lo > max_len_ ? lo - max_len_ : 0);
  while (it != map_.end() && it->first < hi) {
    if (it->second.end > lo)
      it = map_.erase(it);
    else
      ++it;
  }
}

void L3TensorMap::remove_writer(Slot* s) {
  for (uint64_t key : s->map_keys) {
    auto [b, e] = map_.equal_range(key);
    for (auto it = b; it != e;) {
      if (it->second.writer == s) {
        it->second.writer = nullptr;
        if (it->second.readers.empty()) {
          it = map_.erase(it);
          continue;
        }
      }
      ++it;
    }
  }
  s->map_keys.clear();
}

// --- Orchestrator facade ------------------------------------------------------

SubmitResult Orchestrator::submit_next_level(const CallableHandle& h, const TaskArgs& args, const CallConfig& cfg,
                                             int worker) {
  return w_->submit(true, h, {args}, cfg, {worker}, false);
}
SubmitResult Orchestrator::submit_next_level_group(const CallableHandle& h, const std::vector<TaskArgs>& args,
                                                   const CallConfig& cfg, const std::vector<int>& workers) {
  return w_->submit(true, h, args, cfg, workers, true);
}
SubmitResult Orchestrator::submit_sub(const CallableHandle& h, const TaskArgs& args) {
  return w_->submit(false, h, {args}, CallConfig{}, {-1}, false);
}
SubmitResult Orchestrator::submit_sub_group(const CallableHandle& h, const std::vector<TaskArgs>& args) {
  return w_->submit(false, h, args, CallConfig{}, {}, true);
}
Result<ContinuousTensor> Orchestrator::alloc(const std::vector<uint32_t>& shape, int32_t dtype) {
  return w_->alloc_in_scope(shape, dtype);
}
void Orchestrator::scope_begin() { w_->scope_begin(); }
Status Orchestrator::scope_end() { return w_->scope_end(); }
int Orchestrator::scope_depth() const { return w_->scope_depth_; }
CallableHandle Orchestrator::find_callable(const std::string& name) const { return w_->find_callable(name); }
int Orchestrator::level() const { return w_->cfg_.level; }
int Orchestrator::num_next_level() const {
  return w_->cfg_.level == 3 ? w_->cfg_.num_chips : static_cast<int>(w_->l3s_.size());
}
int Orchestrator::num_sub_workers() const { return w_->cfg_.num_sub_workers; }

// --- validation ----------------------------------------------------------------

Status WorkerImpl::validate_tensor(const ContinuousTensor& t, TensorArgType tag, int member, int index) const {
  auto bad = [&](const std::string& why) {
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("member {} tensor {} ({}): {}", member, index, tag_name(tag), why));
  };
  if (static_cast<uint8_t>(tag) > static_cast<uint8_t>(TensorArgType::NO_DEP))
    return bad(fmt::format("unknown tag {}", static_cast<int>(tag)));
  if (t.ndims < 0 || t.ndims > PTO_TENSOR_MAX_DIMS)
    return bad(fmt::format("ndims {} is outside 0..{}", t.ndims, PTO_TENSOR_MAX_DIMS));
  if (pto2_dtype_size(t.dtype) == 0) return bad(fmt::format("unknown dtype {}", t.dtype));
  uint64_t checked = pto2_dtype_size(t.dtype);
  for (int i = 0; i < t.ndims; ++i)
    if (__builtin_mul_overflow(checked, uint64_t(t.shape[i]), &checked) || checked > (uint64_t(1) << 48))
      return bad("its shape describes more than 2^48 bytes");
  if (t.data == 0) {
    if (tag == TensorArgType::OUTPUT || tag == TensorArgType::NO_DEP) return Status::Ok();
    return bad("has no address; only an OUTPUT tensor may be allocated by the Worker");
  }
  const uint64_t bytes = tensor_bytes(t);
  int ep = -1;
  RemoteBufferRef ref;
  Status remote_error;
  if (remote_buffer_of(t.data, t.data + bytes, &ep, &ref, &remote_error))
    return remote_error.ok() ? Status::Ok() : bad(remote_error.message);
  if (!in_shared_region(t.data, bytes))
    return bad(
        fmt::format("[0x{:x}, +{} bytes) is not in memory the children share; allocate it with "
                    "Worker::alloc / Orchestrator::alloc or register it with register_shared_memory",
                    t.data, bytes));
  return Status::Ok();
}

Status WorkerImpl::buffer_owner(uint64_t lo, uint64_t hi, Slot** owner) const {
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

void WorkerImpl::fail_run(const Status& s) {
  if (run_.status.ok()) run_.status = s;
}

// --- submit ----------------------------------------------------------------------

SubmitResult WorkerImpl::submit(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members,
                                const CallConfig& cfg, const std::vector<int>& pinned_in, bool group) {
  SubmitResult r;
  auto reject = [&](int32_t code, const std::string& msg) {
    r.status = Status::Error(code, msg);
    std::lock_guard<std::mutex> g(mu_);
    fail_run(r.status);
    return r;
  };
  if (closed_) return reject(kWorkerClosed, "submit after close()");
  if (!in_run_) return reject(kWorkerInvalidArgument, "submit outside run(): use the Orchestrator passed to run()");
  const char* what = next_level ? (group ? "submit_next_level_group" : "submit_next_level")
                                : (group ? "submit_sub_group" : "submit_sub");
  if (!h.ok())
    return reject(kWorkerNotRegistered, fmt::format("{}: the handle holds an error: {}", what, h.status.message));
  const int n_workers =
      next_level ? (cfg_.level == 3 ? cfg_.num_chips : static_cast<int>(l3s_.size())) : cfg_.num_sub_workers;
  const char* wkind = next_level ? (cfg_.level == 3 ? "chip" : "L3") : "sub";
  // Level 3: chips run chip callables. Level 4: L3 Workers run orchestrations,
  // and chip callables as a one-task run on one of their chips.
  const EntryAbi want = next_level ? (cfg_.level == 3 ? EntryAbi::CHIP : EntryAbi::ORCHESTRATION) : EntryAbi::SUB;
  if (h.abi != want && !(next_level && cfg_.level == 4 && h.abi == EntryAbi::CHIP))
    return reject(kWorkerInvalidArgument, fmt::format("{}: callable {} is a {} callable; this call needs a {} callable",
                                                      what, h.id.short_hex(), abi_name(h.abi), abi_name(want)));
  if (n_workers == 0)
    return reject(kWorkerInvalidArgument, fmt::format("{}: this Worker has no {} workers", what, wkind));
  const int n = static_cast<int>(members.size());
  if (n == 0) return reject(kWorkerInvalidArgument, fmt::format("{}: a group needs at least one member", what));
  if (n > n_workers)
    return reject(kWorkerInvalidArgument,
                  fmt::format("{}: a group of {} needs {} distinct {} workers; this Worker has {}", what, n, n, wkind,
                              n_workers));
  std::vector<int> pinned(n, -1);
  if (group) {
    if (!pinned_in.empty() && static_cast<int>(pinned_in.size()) != n)
      return reject(kWorkerInvalidArgument, fmt::format("{}: {} members but {} worker ids", what, n, pinned_in.size()));
    if (!pinned_in.empty()) pinned = pinned_in;
  } else {
    pinned[0] = pinned_in.empty() ? -1 : pinned_in[0];
  }
  for (int i = 0; i < n; ++i) {
    if (pinned[i] < -1 || pinned[i] >= n_workers || (group && !pinned_in.empty() && pinned[i] < 0))
      return reject(kWorkerInvalidArgument,
                    fmt::format("{}: worker id {} is out of range (this Worker has {} {} workers, ids 0..{})", what,
                                pinned[i], n_workers, wkind, n_workers - 1));
    for (int j = 0; j < i; ++j)
      if (pinned[i] >= 0 && pinned[i] == pinned[j])
        return reject(
            kWorkerInvalidArgument,
            fmt::format("{}: worker id {} named twice; group members need distinct workers", what, pinned[i]));
  }
  // Remote buffers live on one worker: a task naming one runs there.
  bool remote_pinned = false;
  for (int m = 0; m < n && rbuf_base_; ++m)
    for (int i = 0; i < members[m].tensor_count(); ++i) {
      const ContinuousTensor& t = members[m].tensor(i);
      int ep = -1;
      RemoteBufferRef ref;
      Status err;
      if (t.data == 0 || !remote_buffer_of(t.data, t.data + tensor_bytes(t), &ep, &ref, &err) || !err.ok()) continue;
      if (!next_level)
        return reject(kWorkerInvalidArgument,
                      fmt::format("{}: tensor {} is in a remote buffer; only next-level tasks on its worker can use it",
                                  what, i));
      if (pinned[m] >= 0 && pinned[m] != ep)
        return reject(
            kWorkerInvalidArgument,
            fmt::format("{}: member {} tensor {} is in a remote buffer on worker {}, but the task is placed on "
                        "worker {}",
                        what, m, i, ep, pinned[m]));
      pinned[m] = ep;
      remote_pinned = true;
    }
  if (n > 1 && std::count(pinned.begin(), pinned.end(), -1) != 0 && std::count(pinned.begin(), pinned.end(), -1) != n)
    return reject(kWorkerInvalidArgument,
                  fmt::format("{}: some members use remote buffers (placed on their workers) and some do not; name a "
                              "worker for every member",
                              what));
  // Arguments: counts, tensors, the mailbox budget, outputs to allocate.
  // (members is this call's own copy: allocated outputs are written into it.)
  std::vector<TaskArgs>& args = members;
  uint64_t alloc_bytes = 0;
  for (int m = 0; m < n; ++m) {
    const TaskArgs& a = args[m];
    const size_t need = blob_size(a.tensor_count(), a.scalar_count());
    if (need > kMailboxBlobCapacity)
      return reject(kWorkerInvalidArgument,
                    fmt::format("{}: member {} has {} tensors and {} scalars, {} bytes of arguments; the mailbox holds "
                                "{} bytes (8 + 40 per tensor + 8 per scalar)",
                                what, m, a.tensor_count(), a.scalar_count(), need, kMailboxBlobCapacity));
    for (int i = 0; i < a.tensor_count(); ++i) {
      if (Status s = validate_tensor(a.tensor(i), a.tag(i), m, i); !s.ok())
        return reject(s.code, std::string(what) + ": " + s.message);
      if (a.tensor(i).data == 0 && a.tag(i) == TensorArgType::OUTPUT)
        alloc_bytes += (tensor_bytes(a.tensor(i)) + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
    }
  }

  std::unique_lock<std::mutex> lk(mu_);
  if (!cancelled_.empty()) {
    r.status = Status::Error(kWorkerCancelled, "submit after the run was cancelled: " + cancelled_);
    return r;
  }
  auto reg = registry_.find(h.id.digest);
  if (reg == registry_.end()) {
    auto tomb = tombstones_.find(h.id.digest);
    r.status = Status::Error(kWorkerNotRegistered,
                             fmt::format("{}: callable {} is not registered with this Worker{}", what, h.id.hex(),
                                         tomb == tombstones_.end() ? "" : " (" + tomb->second + ")"));
    fail_run(r.status);
    return r;
  }
  const auto allowed = next_level ? reg->second.allowed : nullptr;
  if (allowed) {
    bool any = false;
    for (uint8_t a : *allowed) any |= a != 0;
    for (int m = 0; m < n && any; ++m)
      if (pinned[m] >= 0 && !(*allowed)[pinned[m]]) {
        r.status =
            Status::Error(kWorkerInvalidArgument, fmt::format("{}: worker {} ({}) does not hold callable {}", what,
                                                              pinned[m], l3s_[pinned[m]]->label(), h.id.short_hex()));
        fail_run(r.status);
        return r;
      }
    if (!any) {
      r.status = Status::Error(kWorkerInvalidArgument,
                               fmt::format("{}: no next-level worker holds callable {}", what, h.id.short_hex()));
      fail_run(r.status);
      return r;
    }
  }
  // Buffers in the heap rings stay alive while this task may touch them.
  std::vector<Slot*> owners;
  for (int m = 0; m < n; ++m)
    for (int i = 0; i < args[m].tensor_count(); ++i) {
      const ContinuousTensor& t = args[m].tensor(i);
      if (t.data == 0) continue;
      Slot* o = nullptr;
      if (Status st = buffer_owner(t.data, t.data + tensor_bytes(t), &o); !st.ok()) {
        r.status = Status::Error(st.code, fmt::format("{}: member {} tensor {}: {}", what, m, i, st.message));
        fail_run(r.status);
        return r;
      }
      if (o && std::find(owners.begin(), owners.end(), o) == owners.end()) owners.push_back(o);
    }
  const int ring = std::min(scope_depth_, kHeapRings - 1);
  uint8_t* heap = nullptr;
  uint64_t heap_end = 0;
  if (alloc_bytes) {
    if (Status s = heap_alloc(alloc_bytes, ring, lk, &heap, &heap_end); !s.ok()) {
      r.status = Status::Error(s.code, std::string(what) + ": " + s.message);
      fail_run(r.status);
      return r;
    }
  }
  slots_.push_back(std::make_unique<Slot>());
  Slot* s = slots_.back().get();
  s->id = next_task_id_++;
  s->next_level = next_level;
  s->callable = h.id;
  s->config = cfg;
  s->pinned = pinned;
  s->allowed = allowed;
  s->retries_left = n == 1 ? reg->second.options.max_retries : 0;
  s->uses_remote_buffer = remote_pinned;
  s->members_left = n;
  s->refs = 2;   // the scope, and the task itself until it is final
  s->fanin = 1;  // guard while wiring
  s->scope_depth = scope_depth_;
  s->submit_ns = now_ns();
  if (alloc_bytes) {
    s->ring = ring;
    s->heap_start = reinterpret_cast<uint64_t>(heap);
    s->heap_end = heap_end;
    ring_allocs_[ring].push_back(s);
    allocs_[s->heap_start] = {s->heap_start + alloc_bytes, s};
  }
  for (Slot* o : owners) {
    ++o->refs;
    s->buffer_holds.push_back(o);
  }
  ++pending_;
  ++run_.tasks_submitted;
  scopes_.back().push_back(s);

  uint8_t* next_out = heap;
  for (int m = 0; m < n; ++m) {
    TaskArgs& a = args[m];
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
      tmap_.for_overlaps(lo, hi, writes, [&](Slot* p, bool is_writer) {
        if (p != s) add_dependency(s, p, is_writer && reads);
      });
      if (writes)
        tmap_.set_writer(lo, hi, s);
      else
        tmap_.add_reader(lo, hi, s);
    }
    s->blobs.emplace_back();
    encode_args(a.view(), &s->blobs.back());
    if (next_level && !links_.empty()) {  // remote endpoints copy tensor bytes by direction
      std::vector<TensorDirection> d(a.tensor_count());
      for (int i = 0; i < a.tensor_count(); ++i) {
        const TensorArgType tag = a.tag(i);
        d[i] = tag == TensorArgType::INPUT                                             ? TensorDirection::IN
               : tag == TensorArgType::OUTPUT || tag == TensorArgType::OUTPUT_EXISTING ? TensorDirection::OUT
                                                                                       : TensorDirection::INOUT;
      }
      s->dirs.push_back(std::move(d));
    }
    std::vector<ContinuousTensor> ts(a.tensor_count());
    for (int i = 0; i < a.tensor_count(); ++i) ts[i] = a.tensor(i);
    r.tensors.push_back(std::move(ts));
  }
  r.task_id = s->id;
  if (--s->fanin == 0) make_ready(s);
  lk.unlock();
  bell_->ring();
  return r;
}

void WorkerImpl::add_dependency(Slot* consumer, Slot* producer, bool data) {
  for (Slot* h : consumer->holds)
    if (h == producer) {
      // Already wired; a data edge upgrades an ordering edge.
      if (data && producer->state != Slot::State::kFinal) {
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
  if (producer->state == Slot::State::kFinal) {
    if (data && producer->outcome != Outcome::SUCCESS && !consumer->poisoned) {
      consumer->poisoned = true;
      consumer->poison = fmt::format("upstream task {} did not succeed", producer->id);
    }
    return;
  }
  ++consumer->fanin;
  producer->fanout.emplace_back(consumer, data);
}

void WorkerImpl::make_ready(Slot* s) {
  if (!cancelled_.empty() && !s->poisoned) {
    s->poisoned = true;
    s->poison = "cancelled: " + cancelled_;
  }
  if (s->poisoned) {
    s->failure = TaskFailure{s->id, s->callable.hex(), "", Outcome::SKIPPED, s->poison};
    finalize(s, Outcome::SKIPPED);
    return;
  }
  s->state = Slot::State::kReady;
  queued_.fetch_add(1, std::memory_order_release);
  if (!s->next_level)
    sub_q_.push_back(s);
  else if (s->blobs.size() == 1 && s->pinned[0] >= 0)
    next_pinned_[s->pinned[0]].push_back(s);
  else
    next_any_.push_back(s);
}

void WorkerImpl::finalize(Slot* first, Outcome first_outcome) {
  std::vector<std::pair<Slot*, Outcome>> work{{first, first_outcome}};
  while (!work.empty()) {
    auto [s, o] = work.back();
    work.pop_back();
    s->state = Slot::State::kFinal;
    s->outcome = o;
    --pending_;
    stats_.task_latency.record(now_ns() - s->submit_ns);
    if (o == Outcome::SUCCESS) {
      ++run_.tasks_succeeded;
      ++stats_.tasks_succeeded;
    } else if (o == Outcome::SKIPPED) {
      ++run_.tasks_skipped;
      ++stats_.tasks_skipped;
    } else {
      ++run_.tasks_failed;
      ++stats_.tasks_failed;
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
    for (Slot* p : s->holds) unref(p);
    for (Slot* p : s->buffer_holds) unref(p);
    unref(s);
  }
  if (pending_ == 0) idle_cv_.notify_all();
}

void WorkerImpl::unref(Slot* s) {
  if (--s->refs > 0) return;
  s->consumed = true;
  if (s->outcome == Outcome::SUCCESS) tmap_.remove_writer(s);
  if (s->ring >= 0) reclaim_rings();
}

void WorkerImpl::reclaim_rings() {
  bool freed = false;
  for (int r = 0; r < kHeapRings; ++r) {
    auto& q = ring_allocs_[r];
    while (!q.empty() && q.front()->consumed) {
      Slot* owner = q.front();
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
  if (freed) idle_cv_.notify_all();
}

Status WorkerImpl::heap_alloc(uint64_t bytes, int ring, std::unique_lock<std::mutex>& lk, uint8_t** ptr,
                              uint64_t* end) {
  for (;;) {
    switch (rings_[ring].alloc(bytes, end, ptr)) {
      case HeapRing::Alloc::kOk: return Status::Ok();
      case HeapRing::Alloc::kTooLarge:
        return Status::Error(kWorkerHeapExhausted,
                             fmt::format("{} bytes of outputs exceed heap ring {} ({} bytes; heap_ring_bytes)", bytes,
                                         ring, rings_[ring].size()));
      case HeapRing::Alloc::kFull: break;
    }
    // Space comes back only when the oldest allocation's task is consumed,
    // which needs its scope closed. If that scope is still open (this
    // orchestration is inside it) waiting would never end.
    Slot* oldest = ring_allocs_[ring].empty() ? nullptr : ring_allocs_[ring].front();
    bool open = !oldest;
    for (auto& sc : scopes_)
      for (Slot* x : sc) open |= x == oldest;
    if (open)
      return Status::Error(kWorkerHeapExhausted,
                           fmt::format("heap ring {} ({} bytes, {} in use) cannot fit {} bytes: its oldest buffer "
                                       "(task {}) belongs to a scope that is still open; end the scope or raise "
                                       "heap_ring_bytes",
                                       ring, rings_[ring].size(), rings_[ring].used(), bytes, oldest ? oldest->id : 0));
    // Bounded: the tasks holding it are running or ready and each ends (task
    // timeouts, child liveness); check again at least every 100 ms.
    idle_cv_.wait_for(lk, std::chrono::milliseconds(100));
  }
}

Result<ContinuousTensor> WorkerImpl::alloc_in_scope(const std::vector<uint32_t>& shape, int32_t dtype) {
  Result<ContinuousTensor> r;
  if (!in_run_) {
    r.status = Status::Error(kWorkerInvalidArgument, "Orchestrator::alloc outside run()");
    return r;
  }
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  if (shape.size() > PTO_TENSOR_MAX_DIMS || pto2_dtype_size(dtype) == 0) {
    r.status = Status::Error(kWorkerInvalidArgument,
                             fmt::format("alloc: {} dims (at most {}) and dtype {} (must be a PTO2DataType)",
                                         shape.size(), PTO_TENSOR_MAX_DIMS, dtype));
    return r;
  }
  // A dependency-free task slot owns the buffer, so the ring frees it FIFO
  // like any other; consumers hold it through the TensorMap.
  std::unique_lock<std::mutex> lk(mu_);
  const int ring = std::min(scope_depth_, kHeapRings - 1);
  uint8_t* p = nullptr;
  uint64_t end = 0;
  if (Status s = heap_alloc(tensor_bytes(t), ring, lk, &p, &end); !s.ok()) {
    r.status = Status::Error(s.code, "alloc: " + s.message);
    return r;
  }
  slots_.push_back(std::make_unique<Slot>());
  Slot* s = slots_.back().get();
  s->id = 0;  // not a task
  s->state = Slot::State::kFinal;
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

void WorkerImpl::scope_begin() {
  std::lock_guard<std::mutex> g(mu_);
  scopes_.emplace_back();
  ++scope_depth_;
}

Status WorkerImpl::scope_end() {
  std::lock_guard<std::mutex> g(mu_);
  if (scopes_.size() <= 1) {
    Status s = Status::Error(kWorkerInvalidArgument, "scope_end without a matching scope_begin");
    fail_run(s);
    return s;
  }
  std::vector<Slot*> members = std::move(scopes_.back());
  scopes_.pop_back();
  --scope_depth_;
  for (Slot* s : members) unref(s);
  return Status::Ok();
}

}  // namespace pto
