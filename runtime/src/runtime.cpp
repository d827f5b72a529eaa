#include "pto2/runtime.h"

#if defined(PTO_UNDER_ASAN)
#include <sanitizer/lsan_interface.h>
#endif

#include <fmt/format.h>

#include "log.h"
#include "orchestrator.h"
#include "runtime_state.h"
#include "scheduler.h"

namespace pto2 {

class RuntimeImpl {
 public:
  RuntimeImpl(const RuntimeConfig& config, Platform& platform)
      : state_(config, platform), orchestrator_(state_), scheduler_(state_, config.resolved_scheduler_threads()) {
    platform.set_wakeup(&state_);
    orchestrator_.set_run_starter([this] { scheduler_.start_run(); });
  }
  ~RuntimeImpl() { state_.platform.set_wakeup(nullptr); }

  RunResult run(const OrchestrationFn& orchestration);
  RuntimeState& state() { return state_; }
  bool valid() const { return state_.valid() && orchestrator_.valid(); }
  bool broken() const { return broken_; }
  void abandon() { scheduler_.abandon(); }

 private:
  RuntimeState state_;
  Orchestrator orchestrator_;
  Scheduler scheduler_;
  bool broken_ = false;
};

RunResult RuntimeImpl::run(const OrchestrationFn& orchestration) {
  RunResult result;
  if (broken_) {
    result.status = Status::Error(kRuntimeBroken,
                                  "an earlier run stalled with kernels still running; "
                                  "create a new Runtime");
    component_logger("runtime")->error("{} ({}): {}", error_name(result.status.code), result.status.code,
                                       result.status.message);
    return result;
  }
  const uint64_t t0 = now_ns();
  const uint64_t completed0 = state_.completed_count.load(std::memory_order_acquire);
  state_.run_completed_base.store(completed0, std::memory_order_relaxed);
  state_.run_submitted.store(0, std::memory_order_relaxed);
  state_.abort.store(0, std::memory_order_release);
  state_.region.header()->orchestrator_done.store(0, std::memory_order_release);
  (void)state_.take_fault();  // a fault reported after the last run ended belongs to no run
  state_.platform.run_starting();
  orchestrator_.begin_run();  // the scheduler threads join at the first publish

  const int rc = orchestration(orchestrator_.api());
  const uint64_t t1 = now_ns();
  if (rc != 0) orchestrator_.fail(kOrchestrationFailed, fmt::format("orchestration function returned {}", rc));
  orchestrator_.end_run();

  // Drain: every submitted task completes and retires. Liveness: something
  // must complete at least every stall_timeout_ms.
  uint64_t seen = state_.completed_count.load(std::memory_order_acquire);
  uint64_t last_progress = now_ns();
  const uint64_t stall_ns = uint64_t(state_.config.stall_timeout_ms) * 1000000;
  // A run that published nothing has nothing to drain and woke no thread.
  const bool drained = !orchestrator_.run_started() || scheduler_.wait_run_finished([&] {
    const uint64_t c = state_.completed_count.load(std::memory_order_acquire);
    const uint64_t now = now_ns();
    if (c != seen) {
      seen = c;
      last_progress = now;
      return true;
    }
    return stall_ns == 0 || now - last_progress < stall_ns;
  });
  if (!drained) {
    state_.abort.store(1, std::memory_order_release);
    state_.sched_ec.notify();
    broken_ = true;
    state_.leak_mappings = true;
    component_logger("runtime")->error(
        "run abandoned with kernels still running; this Runtime's shared region "
        "and heap ({} bytes) will not be unmapped",
        state_.region.layout().total_bytes + state_.heap_mapping_bytes);
    orchestrator_.fail(kStalled, fmt::format("no task completed for {} ms while draining the run; kernels may "
                                             "still be running",
                                             state_.config.stall_timeout_ms));
  }
  // A fault the platform reported (a pipe nobody served) fails the run with
  // its own diagnosis, unless an earlier error already did.
  if (Status fault = state_.take_fault(); !fault.ok()) orchestrator_.fail(fault.code, fault.message);
  result.start_ns = t0;
  result.orchestration_end_ns = t1;
  if (state_.config.profiling && drained) scheduler_.take_records(&result.records);
  result.status = orchestrator_.error();
  result.stats.tasks_submitted = orchestrator_.tasks_submitted();
  // Between runs progress() reads zeros: a reader that looks just before the
  // next run resets them sees no stale counts.
  state_.run_submitted.store(0, std::memory_order_relaxed);
  // Slots of failed submits complete as no-ops; they are not tasks of the run.
  const uint64_t finished = state_.completed_count.load(std::memory_order_acquire) - completed0;
  state_.run_completed_base.store(completed0 + finished, std::memory_order_relaxed);
  result.stats.tasks_completed = finished > orchestrator_.noop_slots() ? finished - orchestrator_.noop_slots() : 0;
  result.stats.orchestrator_ns = t1 - t0;
  result.stats.wall_ns = now_ns() - t0;
  result.stats.blocked_waits = orchestrator_.blocked_waits();
  const CaptureStats& cs = orchestrator_.capture_stats();
  result.stats.regions_recorded = cs.regions_recorded;
  result.stats.regions_replayed = cs.regions_replayed;
  result.stats.tasks_replayed = cs.tasks_replayed;
  result.stats.capture_mismatches = cs.mismatches;
  result.stats.capture_unreplayable = cs.unreplayable;
  return result;
}

Runtime::Runtime(std::unique_ptr<RuntimeImpl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() {
  if (impl_ && impl_->broken()) {
    // A kernel of the abandoned run may still be executing on a scheduler
    // thread: joining could hang forever, and freeing the state would pull
    // memory from under it. Stop what can stop, then leak the rest.
    component_logger("runtime")->error(
        "Runtime destroyed after a stalled run: its threads are detached and its "
        "memory leaked; the Platform must stay alive while they may run");
    impl_->abandon();
    RuntimeImpl* leaked = impl_.release();
#if defined(PTO_UNDER_ASAN)
    __lsan_ignore_object(leaked);  // deliberate: see above
#else
    (void)leaked;
#endif
  }
}

std::unique_ptr<Runtime> Runtime::create(const RuntimeConfig& config, Platform& platform, Status* error) {
  Status st = config.validate();
  if (st.ok() && platform.core_count() <= 0)
    st = Status::Error(kInvalidConfig, fmt::format("platform has {} cores", platform.core_count()));
  if (!st.ok()) {
    if (error) *error = st;
    return nullptr;
  }
  auto impl = std::make_unique<RuntimeImpl>(config, platform);
  if (!impl->valid()) {
    if (error)
      *error = Status::Error(
          kInvalidConfig, fmt::format("could not map {} bytes of shared region plus {} of heap",
                                      SharedRegionLayout::compute(config).total_bytes, config.heap_size * kMaxRings));
    return nullptr;
  }
  if (error) *error = Status::Ok();
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

RunResult Runtime::run(const OrchestrationFn& orchestration) { return impl_->run(orchestration); }

RunResult Runtime::run(PTO2OrchestrationConfigFn config_fn, PTO2OrchestrationEntryFn entry, uint64_t* args,
                       int arg_count) {
  if (entry == nullptr) {
    RunResult r;
    r.status = Status::Error(kInvalidArgument, "orchestration entry is null");
    component_logger("runtime")->error("{} ({}): {}", error_name(r.status.code), r.status.code, r.status.message);
    return r;
  }
  if (config_fn != nullptr) {
    const PTO2OrchestrationConfig cfg = config_fn(args, arg_count);
    if (cfg.expected_arg_count != arg_count) {
      RunResult r;
      r.status = Status::Error(kInvalidArgument, fmt::format("orchestration expects {} arguments, got {}",
                                                             cfg.expected_arg_count, arg_count));
      // Like every failure of a run, told once in the log.
      component_logger("runtime")->error("{} ({}): {}", error_name(r.status.code), r.status.code, r.status.message);
      return r;
    }
  }
  return impl_->run([&](PTO2Runtime* rt) { return entry(rt, args, arg_count); });
}

void Runtime::set_task_observer(TaskObserver* observer) { impl_->state().observer = observer; }

const RuntimeConfig& Runtime::config() const { return impl_->state().config; }
bool Runtime::broken() const { return impl_->broken(); }
Runtime::Progress Runtime::progress() const {
  RuntimeState& s = impl_->state();
  Progress p;
  p.submitted = s.run_submitted.load(std::memory_order_relaxed);
  const uint64_t done = s.completed_count.load(std::memory_order_relaxed);
  const uint64_t base = s.run_completed_base.load(std::memory_order_relaxed);
  p.completed = done > base ? done - base : 0;
  return p;
}
uint64_t Runtime::shared_region_bytes() const { return impl_->state().region.layout().total_bytes; }

}  // namespace pto2
