// The orchestration thread's side of the engine (reference design: the
// Orchestrator): pto::Orchestrator's calls, and the submit path — the call's
// shape and placement, its arguments, then the TaskGraph under the engine
// lock. docs/worker.md, "TaskArgs, tags and dependencies".
#include <fmt/format.h>

#include <algorithm>

#include "worker_impl.h"

namespace pto {

// --- pto::Orchestrator: its run's backend --------------------------------------

SubmitResult Orchestrator::submit_next_level(const CallableHandle& h, const TaskArgs& args, const CallConfig& cfg,
                                             int worker) {
  return b_->submit(true, h, {args}, cfg, {worker}, false);
}
SubmitResult Orchestrator::submit_next_level_group(const CallableHandle& h, const std::vector<TaskArgs>& args,
                                                   const CallConfig& cfg, const std::vector<int>& workers) {
  return b_->submit(true, h, args, cfg, workers, true);
}
SubmitResult Orchestrator::submit_sub(const CallableHandle& h, const TaskArgs& args) { return submit_sub(h, args, {}); }
SubmitResult Orchestrator::submit_sub_group(const CallableHandle& h, const std::vector<TaskArgs>& args) {
  return submit_sub_group(h, args, {});
}
SubmitResult Orchestrator::submit_sub(const CallableHandle& h, const TaskArgs& args, const CallConfig& cfg) {
  return b_->submit(false, h, {args}, cfg, {-1}, false);
}
SubmitResult Orchestrator::submit_sub_group(const CallableHandle& h, const std::vector<TaskArgs>& args,
                                            const CallConfig& cfg) {
  return b_->submit(false, h, args, cfg, {}, true);
}
Result<ContinuousTensor> Orchestrator::alloc(const std::vector<uint32_t>& shape, int32_t dtype) {
  return b_->alloc(shape, dtype);
}
void Orchestrator::scope_begin() { b_->scope_begin(); }
Status Orchestrator::scope_end() { return b_->scope_end(); }
int Orchestrator::scope_depth() const { return b_->scope_depth(); }
CallableHandle Orchestrator::find_callable(const std::string& name) const { return b_->find_callable(name); }
bool Orchestrator::cancelled() const { return b_->cancelled(); }
void Orchestrator::fail(const std::string& message) { b_->fail(message); }
int Orchestrator::level() const { return b_->level(); }
int Orchestrator::num_next_level() const { return b_->num_next_level(); }
int Orchestrator::num_sub_workers() const { return b_->num_sub_workers(); }

// --- in-process runs --------------------------------------------------------------

namespace {
SubmitResult outside_run() {
  SubmitResult r;
  r.status = Status::Error(kWorkerInvalidArgument, "submit outside run(): use the Orchestrator passed to run()");
  return r;
}
}  // namespace

SubmitResult LocalOrchestration::submit(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members,
                                        const CallConfig& cfg, const std::vector<int>& pinned, bool group) {
  if (!run) return outside_run();
  return w_->submit_task(run, next_level, h, std::move(members), cfg, pinned, group);
}
Result<ContinuousTensor> LocalOrchestration::alloc(const std::vector<uint32_t>& shape, int32_t dtype) {
  if (!run) {
    Result<ContinuousTensor> r;
    r.status = Status::Error(kWorkerInvalidArgument, "Orchestrator::alloc outside run()");
    return r;
  }
  return w_->alloc_in_scope(run, shape, dtype);
}
void LocalOrchestration::scope_begin() {
  if (run) w_->scope_begin(run);
}
Status LocalOrchestration::scope_end() {
  if (!run) return Status::Error(kWorkerInvalidArgument, "scope_end outside run()");
  return w_->scope_end(run);
}
int LocalOrchestration::scope_depth() const { return run ? w_->scope_depth(run) : 0; }
bool LocalOrchestration::cancelled() const { return run && w_->run_cancelled(run); }
void LocalOrchestration::fail(const std::string& message) {
  if (run) w_->fail_run(run, message);
}

int WorkerImpl::num_next_level() const {
  return cfg_.level == 3 ? cfg_.num_chips : static_cast<int>(pool_.l3s().size());
}

// --- scopes and scoped buffers ---------------------------------------------------

void WorkerImpl::scope_begin(RunState* run) {
  std::lock_guard<std::mutex> g(lock_.mu);
  graph_.scope_begin(run);
}

Status WorkerImpl::scope_end(RunState* run) {
  std::lock_guard<std::mutex> g(lock_.mu);
  return graph_.scope_end(run);
}

int WorkerImpl::scope_depth(const RunState* run) const {
  std::lock_guard<std::mutex> g(lock_.mu);
  return run->scope_depth;
}

bool WorkerImpl::run_cancelled(const RunState* run) const {
  std::lock_guard<std::mutex> g(lock_.mu);
  return !run->cancelled.empty();
}

void WorkerImpl::fail_run(RunState* run, const std::string& message) {
  std::lock_guard<std::mutex> g(lock_.mu);
  graph_.fail_run(run, Status::Error(kWorkerRunFailed, clip_message(message)));
}

Result<ContinuousTensor> WorkerImpl::alloc_in_scope(RunState* run, const std::vector<uint32_t>& shape,
                                                    int32_t dtype) {
  Result<ContinuousTensor> r;
  if (Status s = check_alloc_shape(shape, dtype); !s.ok()) {
    r.status = Status::Error(s.code, "alloc: " + s.message);
    return r;
  }
  std::unique_lock<std::mutex> lk(lock_.mu);
  return graph_.alloc_in_scope(run, shape, dtype, lk);
}

// --- submit: checks without the lock ---------------------------------------------------

Status WorkerImpl::validate_tensor(const ContinuousTensor& t, TensorArgType tag, int member, int index) const {
  auto bad = [&](const std::string& why) {
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("member {} tensor {} ({}): {}", member, index, tag_name(tag), why));
  };
  if (static_cast<uint8_t>(tag) > static_cast<uint8_t>(TensorArgType::NO_DEP))
    return bad(fmt::format("unknown tag {}", static_cast<int>(tag)));
  if (t.ndims < 0 || t.ndims > PTO_TENSOR_MAX_DIMS)
    return bad(fmt::format("ndims {} is outside 0..{}", t.ndims, PTO_TENSOR_MAX_DIMS));
  if (pto_dtype_size(t.dtype) == 0) return bad(fmt::format("unknown dtype {}", t.dtype));
  uint64_t checked = pto_dtype_size(t.dtype);
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
  if (rbufs_.find(t.data, t.data + bytes, &ep, &ref, &remote_error))
    return remote_error.ok() ? Status::Ok() : bad(remote_error.message);
  if (!in_shared_region(t.data, bytes))
    return bad(fmt::format("[0x{:x}, +{} bytes) is not in memory the children share; allocate it with "
                           "Worker::alloc / Orchestrator::alloc or register it with register_shared_memory",
                           t.data, bytes));
  return Status::Ok();
}

// The call itself: the callable's kind against the call, the group's size
// against the workers, the worker ids named.
Status WorkerImpl::check_call(bool next_level, const CallableHandle& h, int n, const std::vector<int>& pinned_in,
                              bool group, const char* what, std::vector<int>* pinned_out) const {
  auto bad = [](int32_t code, const std::string& m) { return Status::Error(code, m); };
  if (!h.ok()) return bad(kWorkerNotRegistered, fmt::format("{}: the handle holds an error: {}", what, h.status.message));
  const int n_workers = next_level ? num_next_level() : cfg_.num_sub_workers;
  const char* wkind = next_level ? (cfg_.level == 3 ? "chip" : "L3") : "sub";
  // Level 3: chips run chip callables. Level 4: L3 Workers run orchestrations,
  // and chip callables as a one-task run on one of their chips.
  const EntryAbi want = next_level ? (cfg_.level == 3 ? EntryAbi::CHIP : EntryAbi::ORCHESTRATION) : EntryAbi::SUB;
  if (h.abi != want && !(next_level && cfg_.level == 4 && h.abi == EntryAbi::CHIP))
    return bad(kWorkerInvalidArgument, fmt::format("{}: callable {} is a {} callable; this call needs a {} callable",
                                                   what, h.id.short_hex(), abi_name(h.abi), abi_name(want)));
  if (n_workers == 0) return bad(kWorkerInvalidArgument, fmt::format("{}: this Worker has no {} workers", what, wkind));
  if (n == 0) return bad(kWorkerInvalidArgument, fmt::format("{}: a group needs at least one member", what));
  if (n > n_workers)
    return bad(kWorkerInvalidArgument, fmt::format("{}: a group of {} needs {} distinct {} workers; this Worker has {}",
                                                   what, n, n, wkind, n_workers));
  std::vector<int> pinned(n, -1);
  if (group) {
    if (!pinned_in.empty() && static_cast<int>(pinned_in.size()) != n)
      return bad(kWorkerInvalidArgument, fmt::format("{}: {} members but {} worker ids", what, n, pinned_in.size()));
    if (!pinned_in.empty()) pinned = pinned_in;
  } else {
    pinned[0] = pinned_in.empty() ? -1 : pinned_in[0];
  }
  for (int i = 0; i < n; ++i) {
    if (pinned[i] < -1 || pinned[i] >= n_workers || (group && !pinned_in.empty() && pinned[i] < 0))
      return bad(kWorkerInvalidArgument,
                 fmt::format("{}: worker id {} is out of range (this Worker has {} {} workers, ids 0..{})", what,
                             pinned[i], n_workers, wkind, n_workers - 1));
    for (int j = 0; j < i; ++j)
      if (pinned[i] >= 0 && pinned[i] == pinned[j])
        return bad(kWorkerInvalidArgument,
                   fmt::format("{}: worker id {} named twice; group members need distinct workers", what, pinned[i]));
  }
  *pinned_out = std::move(pinned);
  return Status::Ok();
}

// Remote buffers live on one worker: a task naming one runs there.
Status WorkerImpl::place_on_remote_buffers(bool next_level, std::vector<TaskArgs>& members, const char* what,
                                           std::vector<int>* pinned, bool* remote_pinned) const {
  const int n = static_cast<int>(members.size());
  *remote_pinned = false;
  for (int m = 0; m < n && rbufs_.active(); ++m)
    for (int i = 0; i < members[m].tensor_count(); ++i) {
      const ContinuousTensor& t = members[m].tensor(i);
      int ep = -1;
      RemoteBufferRef ref;
      Status err;
      if (t.data == 0 || !rbufs_.find(t.data, t.data + tensor_bytes(t), &ep, &ref, &err) || !err.ok()) continue;
      if (!next_level)
        return Status::Error(kWorkerInvalidArgument,
                             fmt::format("{}: tensor {} is in a remote buffer; only next-level tasks on its worker can "
                                         "use it",
                                         what, i));
      if ((*pinned)[m] >= 0 && (*pinned)[m] != ep)
        return Status::Error(kWorkerInvalidArgument,
                             fmt::format("{}: member {} tensor {} is in a remote buffer on worker {}, but the task is "
                                         "placed on worker {}",
                                         what, m, i, ep, (*pinned)[m]));
      (*pinned)[m] = ep;
      *remote_pinned = true;
    }
  const auto unplaced = std::count(pinned->begin(), pinned->end(), -1);
  if (n > 1 && unplaced != 0 && unplaced != n)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("{}: some members use remote buffers (placed on their workers) and some do not; "
                                     "name a worker for every member",
                                     what));
  return Status::Ok();
}

// Counts, tensors, the mailbox budget, and the bytes of OUTPUTs to allocate.
Status WorkerImpl::check_arguments(const std::vector<TaskArgs>& members, const char* what,
                                   uint64_t* alloc_bytes) const {
  *alloc_bytes = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    const TaskArgs& a = members[m];
    const size_t need = blob_size(a.tensor_count(), a.scalar_count());
    if (need > kMailboxBlobCapacity)
      return Status::Error(kWorkerInvalidArgument,
                           fmt::format("{}: member {} has {} tensors and {} scalars, {} bytes of arguments; the "
                                       "mailbox holds {} bytes (8 + 40 per tensor + 8 per scalar)",
                                       what, m, a.tensor_count(), a.scalar_count(), need, kMailboxBlobCapacity));
    for (int i = 0; i < a.tensor_count(); ++i) {
      if (Status s = validate_tensor(a.tensor(i), a.tag(i), static_cast<int>(m), i); !s.ok())
        return Status::Error(s.code, std::string(what) + ": " + s.message);
      if (a.tensor(i).data == 0 && a.tag(i) == TensorArgType::OUTPUT)
        *alloc_bytes += (tensor_bytes(a.tensor(i)) + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
    }
  }
  return Status::Ok();
}

// A rejected submit returns its error and fails the run, so an ignored
// return value cannot hide it.
SubmitResult WorkerImpl::reject(RunState* run, int32_t code, const std::string& msg) {
  SubmitResult r;
  r.status = Status::Error(code, msg);
  std::lock_guard<std::mutex> g(lock_.mu);
  graph_.fail_run(run, r.status);
  return r;
}

// --- submit ------------------------------------------------------------------------------

SubmitResult WorkerImpl::submit_task(RunState* run, bool next_level, const CallableHandle& h,
                                     std::vector<TaskArgs> members, const CallConfig& cfg,
                                     const std::vector<int>& pinned_in, bool group) {
  if (life_.closed) return reject(run, kWorkerClosed, "submit after close()");
  const char* what = next_level ? (group ? "submit_next_level_group" : "submit_next_level")
                                : (group ? "submit_sub_group" : "submit_sub");
  TaskGraph::NewTask t;
  if (Status s = check_call(next_level, h, static_cast<int>(members.size()), pinned_in, group, what, &t.pinned);
      !s.ok())
    return reject(run, s.code, s.message);
  if (Status s = place_on_remote_buffers(next_level, members, what, &t.pinned, &t.remote_pinned); !s.ok())
    return reject(run, s.code, s.message);
  if (Status s = check_arguments(members, what, &t.alloc_bytes); !s.ok()) return reject(run, s.code, s.message);

  SubmitResult r;
  std::unique_lock<std::mutex> lk(lock_.mu);
  auto refuse = [&](Status s) {
    r.status = std::move(s);
    graph_.fail_run(run, r.status);
    return r;
  };
  if (!run->cancelled.empty()) {
    r.status = Status::Error(kWorkerCancelled, "submit after the run was cancelled: " + run->cancelled);
    return r;
  }
  const Registered* reg = callables_.lookup(h.id.digest);
  if (!reg) {
    const std::string tomb = callables_.tombstone(h.id.digest);
    return refuse(Status::Error(kWorkerNotRegistered,
                                fmt::format("{}: callable {} is not registered with this Worker{}", what, h.id.hex(),
                                            tomb.empty() ? "" : " (" + tomb + ")")));
  }
  t.allowed = next_level ? reg->allowed : nullptr;
  if (t.allowed) {
    bool any = false;
    for (uint8_t a : *t.allowed) any |= a != 0;
    for (size_t m = 0; m < members.size() && any; ++m)
      if (t.pinned[m] >= 0 && !(*t.allowed)[t.pinned[m]])
        return refuse(Status::Error(kWorkerInvalidArgument,
                                    fmt::format("{}: worker {} ({}) does not hold callable {}", what, t.pinned[m],
                                                pool_.l3s()[t.pinned[m]]->label(), h.id.short_hex())));
    if (!any)
      return refuse(Status::Error(kWorkerInvalidArgument,
                                  fmt::format("{}: no next-level worker holds callable {}", what, h.id.short_hex())));
  }
  // Buffers in the heap rings stay alive while this task may touch them.
  for (size_t m = 0; m < members.size(); ++m)
    for (int i = 0; i < members[m].tensor_count(); ++i) {
      const ContinuousTensor& x = members[m].tensor(i);
      if (x.data == 0) continue;
      TaskNode* o = nullptr;
      if (Status st = graph_.buffer_owner(run, x.data, x.data + tensor_bytes(x), &o); !st.ok())
        return refuse(Status::Error(st.code, fmt::format("{}: member {} tensor {}: {}", what, m, i, st.message)));
      if (o && std::find(t.owners.begin(), t.owners.end(), o) == t.owners.end()) t.owners.push_back(o);
    }
  t.next_level = next_level;
  t.callable = h.id;
  t.config = cfg;
  if (const uint64_t bound = run->options.task_timeout_ms;
      bound > 0 && (t.config.timeout_ms == 0 || t.config.timeout_ms > bound))
    t.config.timeout_ms = bound;
  t.retries = reg->options.max_retries;
  t.with_directions = next_level && !pool_.links().empty();
  TaskNode* s = nullptr;
  if (Status st = graph_.add_task(run, t, members, lk, &s); !st.ok())
    return refuse(Status::Error(st.code, std::string(what) + ": " + st.message));
  r.task_id = s->id;
  for (TaskArgs& a : members) {  // allocated OUTPUTs now have their addresses
    std::vector<ContinuousTensor> ts(a.tensor_count());
    for (int i = 0; i < a.tensor_count(); ++i) ts[i] = a.tensor(i);
    r.tensors.push_back(std::move(ts));
  }
  lk.unlock();
  // A detached run's tasks have no thread of their own to drive them
  // (unless the thread submitting them drives next: QuietSubmits).
  if (!Scheduler::quiet_submits()) scheduler_.kick(run->options.detached);
  return r;
}

}  // namespace pto
