// pto::Worker, the public face of the engine: the facade over WorkerImpl,
// configuration rules, and the names of outcomes and states.
#include <fmt/format.h>
#include <sched.h>

#include "worker_impl.h"

namespace pto {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::SUCCESS: return "SUCCESS";
    case Outcome::TASK_FAILURE: return "TASK_FAILURE";
    case Outcome::ENDPOINT_FAILURE: return "ENDPOINT_FAILURE";
    case Outcome::SKIPPED: return "SKIPPED";
    case Outcome::STOPPED: return "STOPPED";
  }
  return "?";
}

const char* priority_name(RunPriority p) {
  switch (p) {
    case RunPriority::LOW: return "low";
    case RunPriority::NORMAL: return "normal";
    case RunPriority::HIGH: return "high";
  }
  return "?";
}

const char* child_state_name(ChildState s) {
  switch (s) {
    case ChildState::NOT_STARTED: return "not-started";
    case ChildState::IDLE: return "idle";
    case ChildState::BUSY: return "busy";
    case ChildState::DEAD: return "dead";
    case ChildState::STOPPED: return "stopped";
    case ChildState::STARTING: return "starting";
  }
  return "?";
}

std::string TaskFailure::describe() const {
  return fmt::format("task {} ({}) {}{}: {}", task_id, callable.substr(0, 16), outcome_name(outcome),
                     worker.empty() ? "" : " on " + worker, message);
}

Status WorkerConfig::validate() const {
  auto bad = [](const std::string& m) { return Status::Error(kWorkerInvalidConfig, m); };
  if (level < 3) return bad(fmt::format("level {} is not a Worker level: the engine serves levels >= 3", level));
  if (num_chips < 0 || num_chips > 64) return bad(fmt::format("num_chips {} is outside 0..64", num_chips));
  if (num_sub_workers < 0 || num_sub_workers > 64)
    return bad(fmt::format("num_sub_workers {} is outside 0..64", num_sub_workers));
  if (level > 3 && num_chips != 0)
    return bad(
        fmt::format("num_chips {} at level {}: above level 3 the next-level children are L3 Workers "
                    "(add_next_level_worker)",
                    num_chips, level));
  if (platform != "a2a3sim" && platform != "tx8sim")
    return bad(fmt::format("platform '{}' is unknown (known: a2a3sim, tx8sim)", platform));
  if (heap_ring_bytes < 4096 || heap_ring_bytes > (1ull << 40))
    return bad(fmt::format("heap_ring_bytes {} is outside 4096..2^40", heap_ring_bytes));
  if (buffer_arena_bytes < 4096 || buffer_arena_bytes > (1ull << 42))
    return bad(fmt::format("buffer_arena_bytes {} is outside 4096..2^42", buffer_arena_bytes));
  if (spin_us > 100000) return bad(fmt::format("spin_us {} is above 100000", spin_us));
  if (init_timeout_ms == 0 || control_timeout_ms == 0 || shutdown_timeout_ms == 0)
    return bad("init_timeout_ms, control_timeout_ms and shutdown_timeout_ms must be > 0");
  if (max_concurrent_runs < 1 || max_concurrent_runs > 64)
    return bad(fmt::format("max_concurrent_runs {} is outside 1..64", max_concurrent_runs));
  if (liveness_timeout_ms != 0 && liveness_timeout_ms < 200)
    return bad(fmt::format("liveness_timeout_ms {} is below 200 (the heartbeat's period is 100 ms); 0 turns the "
                           "check off",
                           liveness_timeout_ms));
  for (int cpu : child_cpus)
    if (cpu < 0 || cpu >= CPU_SETSIZE)
      return bad(fmt::format("child_cpus holds {}: a CPU number is 0..{}", cpu, CPU_SETSIZE - 1));
  return Status::Ok();
}

// --- Worker facade ------------------------------------------------------------

Worker::Worker(const WorkerConfig& config) : impl_(std::make_unique<WorkerImpl>(config)) {}
Worker::~Worker() { (void)impl_->close(); }
Status Worker::add_next_level_worker(std::unique_ptr<Worker>&& inner) {
  return impl_->add_next_level_worker(std::move(inner));
}
Status Worker::add_remote_worker(std::shared_ptr<RemoteLink> link) { return impl_->add_remote_worker(std::move(link)); }
CallableHandle Worker::register_callable(const Callable& c) { return impl_->register_callable(c, {}); }
CallableHandle Worker::register_callable(const Callable& c, const CallableOptions& o) {
  return impl_->register_callable(c, o);
}
CallableHandle Worker::register_remote_callable(const CallableIdentity& id, EntryAbi abi, const CallableOptions& o) {
  return impl_->register_remote_callable(id, abi, o);
}
Status Worker::unregister_callable(const CallableHandle& h) { return impl_->unregister_callable(h); }
Result<bool> Worker::child_has_callable(const CallableHandle& h, ChildKind kind, int index) {
  return impl_->child_has_callable(h, kind, index);
}
Status Worker::init() { return impl_->init(); }
RunResult Worker::run_function(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg,
                               const RunOptions& options) {
  if (options.batch_width != 0) {
    RunResult r;
    r.status = Status::Error(kWorkerInvalidArgument,
                             fmt::format("RunOptions::batch_width {} given to run(): it bounds the runs of a batch "
                                         "queued with submit(), and run() runs on the caller's thread at once",
                                         options.batch_width));
    return r;
  }
  return impl_->run(fn, args, cfg, options);
}
RunHandle Worker::submit_function(OrchestrationFunction fn, TaskArgs args, CallConfig cfg) {
  return impl_->queue_run(std::move(fn), std::move(args), cfg, {}, {});
}
RunHandle Worker::submit_function(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                                  std::function<void(const RunResult&)> on_done, const RunOptions& options) {
  return impl_->queue_run(std::move(fn), std::move(args), cfg, std::move(on_done), options);
}
Status Worker::close() { return impl_->close(); }
Result<ContinuousTensor> Worker::alloc(const std::vector<uint32_t>& shape, int32_t dtype) {
  return impl_->alloc_buffer(shape, dtype);
}
Result<ContinuousTensor> Worker::alloc_to_overwrite(const std::vector<uint32_t>& shape, int32_t dtype) {
  return impl_->alloc_buffer(shape, dtype, nullptr, true);
}
Status Worker::free(const ContinuousTensor& t) { return impl_->free_buffer(t); }
Result<ContinuousTensor> Worker::alloc_at(uint64_t arena_offset, const std::vector<uint32_t>& shape, int32_t dtype) {
  return impl_->alloc_buffer(shape, dtype, &arena_offset);
}
uint64_t Worker::arena_offset(const ContinuousTensor& t) const { return impl_->arena_offset(t); }
Status Worker::sync(const ContinuousTensor& t) { return impl_->sync_buffer(t); }
Status Worker::write(const ContinuousTensor& t, uint64_t at, const void* src, uint64_t bytes) {
  return impl_->write_buffer(t, at, {iovec{const_cast<void*>(src), bytes}});
}
Status Worker::write(const ContinuousTensor& t, uint64_t at, const std::vector<iovec>& pieces) {
  return impl_->write_buffer(t, at, pieces);
}
Result<ContinuousTensor> Worker::alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype) {
  return impl_->alloc_remote(worker, shape, dtype);
}
Status Worker::free_remote(const ContinuousTensor& t) { return impl_->free_remote(t); }
Status Worker::write_remote(const ContinuousTensor& t, const void* src) {
  return impl_->move_remote(t, const_cast<void*>(src), true);
}
Status Worker::read_remote(const ContinuousTensor& t, void* dst) { return impl_->move_remote(t, dst, false); }
std::vector<ChildInfo> Worker::children() const { return impl_->children(); }
WorkerStats Worker::stats() const { return impl_->stats(); }
Status Worker::name_callable(const std::string& name, const CallableHandle& h) { return impl_->name_callable(name, h); }
Worker::RunProgress Worker::progress() const { return impl_->progress(); }
bool Worker::cancel_run(const std::string& reason) { return impl_->cancel_run(reason); }
const WorkerConfig& Worker::config() const { return impl_->cfg_; }
bool Worker::initialized() const { return impl_->is_initialized(); }

bool RunHandle::done() const {
  std::lock_guard<std::mutex> g(state_->mu);
  return state_->done;
}
bool RunHandle::wait(std::chrono::milliseconds timeout) const {
  // A finished handle never touches its Worker (which may be gone by now).
  if (state_->detached && state_->owner && !state_->finished.load(std::memory_order_acquire))
    return state_->owner->wait(state_, timeout);
  std::unique_lock<std::mutex> lk(state_->mu);
  return state_->cv.wait_for(lk, timeout, [&] { return state_->done; });
}
const RunResult& RunHandle::result() const {
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  return state_->result;
}
bool RunHandle::cancel(const std::string& reason) const {
  return state_ && state_->owner && state_->owner->cancel(state_, reason);
}
RunProgress RunHandle::progress() const {
  if (!state_ || !state_->owner) return {};
  uint64_t id;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    id = state_->run_id;
  }
  return state_->owner->progress(id);
}

}  // namespace pto
