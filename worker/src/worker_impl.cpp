// WorkerImpl (worker_impl.h): the life cycle — init, runs, close — and what
// is the Worker's own: the buffer arena, progress, cancellation, statistics.
#include "worker_impl.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "engine_log.h"

namespace pto {

WorkerImpl::WorkerImpl(const WorkerConfig& cfg)
    : cfg_(cfg),
      pool_(cfg_, lock_),
      graph_(cfg_, lock_),
      scheduler_(cfg_, lock_, pool_, graph_),
      callables_(cfg_, lock_, life_, pool_, scheduler_),
      runs_(cfg_.spin_us, std::max(cfg_.max_concurrent_runs, 1),
            [this](const std::shared_ptr<RunHandle::State>& st, bool* no_slot) -> std::optional<RunResult> {
              if (!st->detached) return run(st->fn, st->args, st->cfg, st->options, st);
              RunResult r;
              const Start s = start_detached(st, false, &r);
              *no_slot = s == Start::kNoSlot;
              if (s == Start::kEnded) return r;
              return std::nullopt;
            }) {
  graph_.set_scheduler(&scheduler_);
  scheduler_.set_run_finisher([this] { finish_detached(); });
  scheduler_.set_helper_hook([this](bool parking) { hand_unfinished_to_finisher(parking); });
}

WorkerImpl::~WorkerImpl() { (void)close(); }

Status WorkerImpl::add_next_level_worker(std::unique_ptr<Worker>&& inner) {
  if (cfg_.level < 4)
    return Status::Error(
        kWorkerInvalidArgument,
        fmt::format("add_next_level_worker on a level-{} Worker: only levels >= 4 have Worker children", cfg_.level));
  if (life_.initialized || life_.closed) return Status::Error(kWorkerInvalidArgument, "add_next_level_worker after init()");
  if (!inner || inner->initialized())
    return Status::Error(kWorkerInvalidArgument, "add_next_level_worker needs a Worker that is not initialised");
  if (inner->config().level != cfg_.level - 1)
    return Status::Error(kWorkerInvalidArgument, fmt::format("a level-{} Worker cannot hold a level-{} child",
                                                             cfg_.level, inner->config().level));
  if (!pool_.links().empty())
    return Status::Error(kWorkerInvalidArgument,
                         "add_next_level_worker after add_remote_worker: local L3 children come first");
  pool_.add_inner(std::move(inner));
  return Status::Ok();
}

Status WorkerImpl::add_remote_worker(std::shared_ptr<RemoteLink> link) {
  if (cfg_.level < 4)
    return Status::Error(
        kWorkerInvalidArgument,
        fmt::format("add_remote_worker on a level-{} Worker: remote L3 workers belong to levels >= 4", cfg_.level));
  if (life_.initialized || life_.closed) return Status::Error(kWorkerInvalidArgument, "add_remote_worker after init()");
  if (!link) return Status::Error(kWorkerInvalidArgument, "add_remote_worker: null link");
  pool_.add_link(std::move(link));
  return Status::Ok();
}

Status WorkerImpl::init() {
  if (life_.closed) return Status::Error(kWorkerClosed, "init after close()");
  if (life_.initialized) return Status::Error(kWorkerInvalidArgument, "init() called twice");
  if (Status s = cfg_.validate(); !s.ok()) return s;
  if (cfg_.level >= 4 && pool_.inner().empty() && pool_.links().empty() && cfg_.num_sub_workers == 0)
    return Status::Error(kWorkerInvalidConfig,
                         "a level-4 Worker needs L3 children (add_next_level_worker, add_remote_worker) or sub workers");
  auto fail = [&](Status s) {
    life_.initialized = true;  // let close() tear down what exists
    (void)close();
    return s;
  };
  if (Status s = graph_.map_rings(); !s.ok()) return fail(s);
  for (int i = 0; i < cfg_.max_concurrent_runs; ++i) {
    local_.push_back(std::make_unique<LocalOrchestration>(this));
    orchs_.push_back(OrchestratorAccess::make(local_.back().get()));
  }
  if (Status s = cfg_.arena_file.empty() ? arena_map_.map(cfg_.buffer_arena_bytes, "the buffer arena")
                                         : arena_map_.map_file(cfg_.arena_file, cfg_.buffer_arena_bytes,
                                                               "the buffer arena");
      !s.ok())
    return fail(s);
  arena_.attach(arena_map_.data(), cfg_.buffer_arena_bytes);
  if (arena_map_.file_backed()) {
    // What an earlier process left in the file's free space is not known
    // to be zeros (it may have kept warm pages there).
    warm_.set_cap(cfg_.arena_warm_bytes);
    warm_.adopt_unknown(0, cfg_.buffer_arena_bytes);
  }
  if (Status s = pool_.create(scheduler_, rbufs_); !s.ok()) return fail(s);
  // Remote buffers get placeholder addresses no real tensor can have.
  if (!pool_.links().empty())
    if (Status s = rbufs_.reserve(); !s.ok()) return fail(s);
  scheduler_.attach_endpoints(pool_.next_level().size(), [this](Endpoint& ep, bool main) { child_main(ep, main); });
  // Fork every child before any thread of ours exists.
  if (Status s = pool_.start_all([this](Endpoint& ep, bool main) { child_main(ep, main); }); !s.ok()) return fail(s);
  life_.initialized = true;
  scheduler_.start();
  // Sessions to remote L3 workers: started now that every child is forked
  // (their threads must not exist at fork). A peer that is not READY within
  // remote_ready_timeout_ms does not fail init: its link keeps reconnecting
  // and the scheduler uses it once it is READY.
  for (auto& link : pool_.links())
    if (Status s = link->start([this] {
          if (SharedDoorbell* b = pool_.bell()) b->ring();
        });
        !s.ok())
      return fail(s);
  const uint64_t deadline = now_ns() + uint64_t(cfg_.remote_ready_timeout_ms) * 1'000'000;
  for (auto& link : pool_.links())
    while (!link->ready() && now_ns() < deadline) usleep(2000);
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    for (auto& ep : pool_.l3s())
      if (ep->is_remote()) ep->alive = ep->link->ready();
  }
  engine_log()->debug("{}: level {} up: {} chips, {} sub workers, {} L3 workers", cfg_.name, cfg_.level,
                     pool_.chips().size(), pool_.subs().size(), pool_.l3s().size());
  return Status::Ok();
}

namespace {
// The Workers whose orchestrations this thread is running (innermost last).
thread_local std::vector<const WorkerImpl*> tl_running;
// The detached run this thread waits for and drives (RunHandle::wait).
thread_local const void* tl_waited = nullptr;
// The Worker of that run: only its runs are kept on this thread.
thread_local const WorkerImpl* tl_waited_on = nullptr;
// When this thread first kept a run not its own, or 0 (hand_over).
thread_local uint64_t tl_kept_others_since = 0;
}  // namespace

bool WorkerImpl::inside_own_run() const {
  return std::find(tl_running.begin(), tl_running.end(), this) != tl_running.end();
}

void WorkerImpl::bind_slot(int slot, RunState* run) { local_[slot]->run = run; }

bool WorkerImpl::begin(const RunOptions& options, const std::shared_ptr<RunHandle::State>& handle, bool wait_for_slot,
                       RunState** out, RunResult* failed) {
  auto fail = [&](int32_t code, const char* message) {
    failed->status = Status::Error(code, message);
    return false;
  };
  if (inside_own_run()) return fail(kWorkerInvalidArgument, "run() from inside an orchestration of the same Worker");
  if (life_.closed || closing_) return fail(kWorkerClosed, "run after close()");
  if (!life_.initialized) return fail(kWorkerInvalidArgument, "run before init()");
  // A handle's lock is held with the engine's while the run takes its slot
  // and the handle learns its run: a cancel (under the handle's lock) finds
  // the run begun and cancels it, or came before and the run never begins.
  // The handle used to learn its run after the slot was taken, and a cancel
  // between - or while a queue thread waited here with the run, out of the
  // queue - made it begin cancelled: its function ran, its submits refused
  // (runs_test). The handle's lock comes first (lock order).
  std::unique_lock<std::mutex> hl;
  if (handle) hl = std::unique_lock<std::mutex>(handle->mu);
  // A slot frees when a run in flight ends; each ends (task timeouts,
  // child liveness), so the wait is bounded by theirs.
  std::unique_lock<std::mutex> lk(lock_.mu);
  // A run that does not wait never overtakes one that does.
  if (!wait_for_slot && slot_waiters_ > 0) return false;
  RunState* run = nullptr;
  for (;;) {
    // Read under the lock before every try: close() sets it under this
    // lock, then waits for the graph to empty. It used to be read only
    // after a failed try: a run woken here by the end that freed a slot
    // (or one that read it false above, just before close() set it) took
    // the slot even when close(), woken by the same end, had already seen
    // no run and gone on to stop the children (close_race_test).
    if (closing_) {
      if (handle) runs_.settle(handle);
      return fail(kWorkerClosed, "run after close()");
    }
    if (handle && handle->cancel_requested) {  // as a queued run cancelled: it never starts
      runs_.settle(handle);
      *failed = RunQueue::cancelled_before_start(handle->cancel_reason);
      return false;
    }
    run = graph_.begin_run(options);
    if (run) break;
    if (!wait_for_slot) return false;
    ++slot_waiters_;
    // Its turn among the waiters is its place: a run taken from the queue
    // after it may start now (nothing that does not wait overtakes it).
    if (handle) runs_.settle(handle);
    // Not holding the handle's lock while it waits: a cancel takes it, then
    // the engine's, and wakes this wait.
    if (hl.owns_lock()) hl.unlock();
    lock_.slot.wait_for(lk, std::chrono::milliseconds(100));
    if (handle) {  // the handle's lock again, before the engine's; still counted as waiting
      lk.unlock();
      hl.lock();
      lk.lock();
    }
    --slot_waiters_;
  }
  if (handle) runs_.settle(handle);
  run->thread = std::this_thread::get_id();
  bind_slot(run->slot, run);
  if (handle) {
    if (handle->detached) detached_[run->id] = handle;
    handle->run_id = run->id;
  }
  *out = run;
  return true;
}

void WorkerImpl::call(RunState* run, const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg) {
  Orchestrator& orch = orchs_[run->slot];
  tl_running.push_back(this);
  try {
    const int rc = fn(orch, args.view(), cfg);
    if (rc != 0) {
      std::lock_guard<std::mutex> g(lock_.mu);
      graph_.fail_run(run, Status::Error(kWorkerRunFailed, fmt::format("the orchestration function returned {}", rc)));
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> g(lock_.mu);
    graph_.fail_run(run, Status::Error(kWorkerRunFailed, fmt::format("the orchestration function threw: {}", e.what())));
  } catch (...) {
    std::lock_guard<std::mutex> g(lock_.mu);
    graph_.fail_run(run, Status::Error(kWorkerRunFailed, "the orchestration function threw a non-std exception"));
  }
  tl_running.pop_back();
}

RunResult WorkerImpl::run(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg,
                          const RunOptions& options, const std::shared_ptr<RunHandle::State>& handle) {
  RunResult bad;
  if (!fn) {
    bad.status = Status::Error(kWorkerInvalidArgument, "run with an empty orchestration function");
    return bad;
  }
  const uint64_t t0 = now_ns();
  RunState* run = nullptr;
  if (!begin(options, handle, true, &run, &bad)) return bad;
  call(run, fn, args, cfg);
  std::unique_lock<std::mutex> lk(lock_.mu);
  graph_.close_scopes(run);
  // Every pending task ends: children are watched and tasks time out. This
  // thread drives the end of the run itself while completions come quickly:
  // a condition-variable wake-up from the scheduler thread costs more than a
  // short run.
  if (run->pending > 0) {
    lk.unlock();
    scheduler_.help_drain(run);  // detached runs it ends meanwhile go to the finisher (hand_over)
    lk.lock();
  }
  if (run->pending > 0) {
    auto drainer = std::make_shared<DrainWaiter>();
    while (run->pending > 0) {
      run->drainer = drainer;  // taken (under the lock) by the last task's finalize
      lk.unlock();
      drainer->sleep(std::chrono::milliseconds(100));
      lk.lock();
    }
    run->drainer.reset();
  }
  bind_slot(run->slot, nullptr);
  RunResult r = graph_.end_run(run);
  lk.unlock();
  runs_.slot_freed();  // a queued detached run waiting for a slot
  if (handle) {  // a cancel from here on finds the run ended
    std::lock_guard<std::mutex> g(handle->mu);
    handle->run_id = 0;
    handle->ended.store(true, std::memory_order_release);
  }
  r.wall_ns = now_ns() - t0;
  return r;
}

WorkerImpl::Start WorkerImpl::start_detached(const std::shared_ptr<RunHandle::State>& handle, bool wait_for_slot,
                                             RunResult* result) {
  if (!handle->fn) {
    result->status = Status::Error(kWorkerInvalidArgument, "run with an empty orchestration function");
    return Start::kEnded;
  }
  RunState* run = nullptr;
  if (!begin(handle->options, handle, wait_for_slot, &run, result))
    return result->status.ok() ? Start::kNoSlot : Start::kEnded;
  call(run, handle->fn, handle->args, handle->cfg);
  std::lock_guard<std::mutex> g(lock_.mu);
  graph_.close_scopes(run);
  // No thread stays: an Orchestrator kept past here is refused like one
  // kept past any run's end.
  bind_slot(run->slot, nullptr);
  if (!graph_.detach(run)) return Start::kStarted;
  // Nothing pending (it submitted nothing, or its submit was refused): it
  // ends here, on the caller's thread, not through the ending list.
  const uint64_t start_ns = run->start_ns;
  detached_.erase(run->id);
  *result = graph_.end_run(run);
  result->wall_ns = now_ns() - start_ns;
  handle->ended.store(true, std::memory_order_release);
  return Start::kEnded;
}

thread_local std::vector<std::pair<std::shared_ptr<RunHandle::State>, RunResult>> WorkerImpl::unfinished_;

void WorkerImpl::hand_over(std::shared_ptr<RunHandle::State> h, RunResult r) {
  // Its result is known: a waiter that drives stops (and finishes it, if it
  // kept it below). Also for one that never began - refused at its start, or
  // cancelled while taken from the queue: its waiter used to drive on to its
  // deadline with it kept (detached_runs_test). With the run id cleared in
  // the same hold of the lock: a cancel from here on finds the run ended.
  {
    std::lock_guard<std::mutex> g(h->mu);
    h->run_id = 0;
    h->ended.store(true, std::memory_order_release);
  }
  // on_done may commit, or register a callable: never on a thread while it
  // drives the Worker (it would stall every run, or wait for itself). A
  // run's thread draining it drives for as long as the run lasts: what it
  // ends goes to the finisher at once (a one-task job it ended used to wait
  // for that run's last task: ptod_bench's fairness, 1.1 s, one run in
  // three). A waiter drives until its own run ends, which for a one-task
  // call is soon: it keeps what it ends, finishes it when it stops driving
  // (no finisher wake-up per call with many clients), and hands the others'
  // to the finisher when it parks or has driven on for 1 ms since it kept
  // the first (hand_unfinished_to_finisher).
  // (Only this Worker's runs are kept: another Worker's finisher, which its
  // close() waits for, finishes its own.)
  if (Scheduler::on_scheduler_thread() || (Scheduler::on_driving_thread() && tl_waited_on != this)) {
    finisher_.push(std::move(h), std::move(r));
  } else if (Scheduler::on_driving_thread()) {
    if (h.get() != tl_waited && tl_kept_others_since == 0) tl_kept_others_since = now_ns();
    unfinished_.emplace_back(std::move(h), std::move(r));
  } else {
    RunQueue::finish(h, std::move(r));
  }
}

void WorkerImpl::hand_unfinished_to_finisher(bool parking) {
  // Others' runs wait at most ~1 ms while this waiter keeps finding work (a
  // waiter whose run has many tasks, or one of many clients' waiters, may
  // not park for as long as its run lasts); all go when it parks.
  if (tl_kept_others_since == 0 || tl_waited_on != this) return;
  if (!parking && now_ns() - tl_kept_others_since < 1'000'000) return;
  tl_kept_others_since = 0;
  // Every run but the one this thread waits for: that one it finishes
  // itself. (A wait nested in a function this thread ran may have kept
  // another Worker's: each goes to its own Worker's finisher.)
  hand_kept_if([](const RunHandle::State& h) { return &h != tl_waited; });
}

void WorkerImpl::hand_kept_to_finisher() {
  hand_kept_if([this](const RunHandle::State& h) { return h.owner == this || h.owner == nullptr; });
}

void WorkerImpl::hand_kept_if(const std::function<bool(const RunHandle::State&)>& pick) {
  size_t kept = 0;
  for (size_t i = 0; i < unfinished_.size(); ++i) {
    auto& e = unfinished_[i];
    if (pick(*e.first)) {
      WorkerImpl* owner = e.first->owner ? e.first->owner : this;
      owner->finisher_.push(std::move(e.first), std::move(e.second));
    } else if (kept++ != i) {
      unfinished_[kept - 1] = std::move(e);
    }
  }
  unfinished_.resize(kept);
}

void WorkerImpl::finish_unfinished() {
  while (!unfinished_.empty()) {
    auto [h, r] = std::move(unfinished_.back());
    unfinished_.pop_back();
    RunQueue::finish(h, std::move(r));
  }
}

void WorkerImpl::finish_detached() {
  // A run taken here leaves the graph before its handle is handed over:
  // close(), which waits for the graph to empty, also waits for this count
  // (raised before the lock that takes the runs) to fall back.
  HandingOver counted(handing_over_);
  // Until nothing is left to end: a run started here in a freed slot may
  // have ended at once.
  while (graph_.ending_count() != 0) {
    std::vector<std::pair<std::shared_ptr<RunHandle::State>, RunResult>> ended;
    {
      std::lock_guard<std::mutex> g(lock_.mu);
      for (RunState* run : graph_.take_ending()) {
        const uint64_t id = run->id, start_ns = run->start_ns;
        auto it = detached_.find(id);
        RunResult r = graph_.end_run(run);
        if (it == detached_.end()) continue;  // not a handle's (never: every detached run has one)
        r.wall_ns = now_ns() - start_ns;
        it->second->ended.store(true, std::memory_order_release);
        ended.emplace_back(std::move(it->second), std::move(r));
        detached_.erase(it);
      }
    }
    for (auto& [h, r] : ended) hand_over(std::move(h), std::move(r));
    start_queued();
  }
}

void WorkerImpl::start_queued() {
  // The queued detached runs at the front take the freed slots here: no run
  // thread is woken for them. Their functions only submit; one that waits
  // for heap-ring space on a driving thread drives meanwhile (TaskGraph::
  // heap_alloc).
  for (;;) {
    std::shared_ptr<RunHandle::State> st = runs_.pop_detached();
    if (!st) break;
    RunResult r;
    const Start s = start_detached(st, false, &r);
    if (s == Start::kNoSlot) {
      // Cancelled since it was taken: it never starts, and its on_done
      // waits until this thread stops driving, as any end's does.
      if (std::optional<RunResult> cancelled = runs_.put_back(st)) hand_over(std::move(st), std::move(*cancelled));
      break;
    }
    runs_.settle(st);
    if (s == Start::kEnded) hand_over(std::move(st), std::move(r));
  }
  runs_.slot_freed();  // a run thread waiting for a slot tries too
}

RunHandle WorkerImpl::queue_run(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                                std::function<void(const RunResult&)> on_done, const RunOptions& options) {
  auto st = std::make_shared<RunHandle::State>();
  st->fn = std::move(fn);
  st->args = std::move(args);
  st->cfg = cfg;
  st->options = options;
  st->on_done = std::move(on_done);
  st->owner = this;
  st->detached = options.detached;
  if (options.batch_width != 0 && options.detached) {
    RunResult r;
    r.status = Status::Error(kWorkerInvalidArgument,
                             fmt::format("RunOptions::batch_width {} on a detached run: a batch's width bounds the "
                                         "runs that hold a run thread, and a detached run holds none",
                                         options.batch_width));
    // Finished as any end: a function that a driving thread runs (a queued
    // detached run's) may submit so.
    hand_over(st, std::move(r));
    RunHandle h;
    h.state_ = st;
    return h;
  }
  // A detached run starts here when it overtakes nobody: no run is queued
  // (nor taken from the queue to start) and a slot is free — a run thread
  // would start it no sooner.
  if (st->detached && runs_.empty() && !inside_own_run()) {
    RunResult r;
    Start s = Start::kNoSlot;
    {
      std::optional<Scheduler::QuietSubmits> quiet;
      if (options.waiter_drives) quiet.emplace();  // this thread waits, and drives, next
      s = start_detached(st, false, &r);
    }
    if (s == Start::kEnded) hand_over(st, std::move(r));
    if (s != Start::kNoSlot) {
      RunHandle h;
      h.state_ = st;
      return h;
    }
  }
  // Refused after close() began: finished as any end (the same).
  if (std::optional<RunResult> refused = runs_.push(st)) hand_over(st, std::move(*refused));
  RunHandle h;
  h.state_ = std::move(st);
  return h;
}

bool WorkerImpl::wait(const std::shared_ptr<RunHandle::State>& h, std::chrono::milliseconds timeout) {
  const int64_t ms = std::clamp<int64_t>(timeout.count(), 0, int64_t(1) << 40);  // no overflow below
  const uint64_t deadline = now_ns() + static_cast<uint64_t>(ms) * 1'000'000;
  // A waiter of a detached run drives (no other thread's wake-up between the
  // child's answer and this one): the run may end right here. close() waits
  // for such waiters to leave (waiters_, counted before closing_ is read).
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  // (A handle finished without its run ending — cancelled in the queue,
  // refused at its start — has nothing to drive.)
  const auto over = [&h] {
    return h->ended.load(std::memory_order_acquire) || h->finished.load(std::memory_order_acquire);
  };
  if (!closing_.load(std::memory_order_seq_cst) && life_.initialized && !life_.closed && !inside_own_run() && !over()) {
    // A wait nested in a function this thread runs while it drives: the
    // outer one's are restored after.
    const void* outer = tl_waited;
    const WorkerImpl* outer_on = tl_waited_on;
    tl_waited = h.get();
    tl_waited_on = this;
    // Refused (another thread helps): this run's submits were quiet, so the
    // helper, parked between long tasks, is told of them now.
    if (!scheduler_.help_until(over, deadline)) scheduler_.kick(false);
    tl_waited = outer;
    tl_waited_on = outer_on;
  }
  // What this thread ended while it drove, its own run among them (not while
  // it still drives: a wait nested in a driving thread's function).
  if (!Scheduler::on_driving_thread()) {
    finish_unfinished();
    tl_kept_others_since = 0;
  } else {
    // Nested in a function run while this thread drives (a queued detached
    // run started here): it would sleep below to its deadline with its own
    // run kept (detached_runs_test).
    hand_kept_to_finisher();
  }
  waiters_.fetch_sub(1, std::memory_order_seq_cst);
  std::unique_lock<std::mutex> lk(h->mu);
  const uint64_t now = now_ns();
  return h->cv.wait_for(lk, std::chrono::nanoseconds(deadline > now ? deadline - now : 0), [&] { return h->done; });
}

bool WorkerImpl::cancel(const std::shared_ptr<RunHandle::State>& h, const std::string& reason) {
  // Started: its run is cancelled in the graph. h->mu held.
  auto cancel_started = [&] {
    std::lock_guard<std::mutex> g2(lock_.mu);
    RunState* run = graph_.find_run(h->run_id);
    return run && graph_.cancel(run, reason);
  };
  {
    std::lock_guard<std::mutex> g(h->mu);
    if (h->done || h->ended.load(std::memory_order_acquire)) return false;
    if (h->run_id) return cancel_started();
  }
  {
    // Taken from the queue here, the run may be finished here (on_done):
    // close() waits for this thread as for one that ended runs (it used to
    // return while a racing cancel still ran on_done; close_race_test). Not
    // counted before: a done handle's cancel does not touch its Worker,
    // which may be gone.
    HandingOver counted(handing_over_);
    if (std::optional<RunResult> r = runs_.cancel_queued(h, reason)) {
      // Finished as any end: this thread may be driving (a queued detached
      // run's function cancelling another, on the thread that started it).
      hand_over(h, std::move(*r));
      return true;
    }
  }
  // Between the queue and the start of the run: it never begins (begin()
  // reads this under the handle's lock before every try for a slot). A
  // thread waiting there with it is woken: it holds the engine's lock from
  // its read until it waits, so once that lock is taken here it waits.
  std::lock_guard<std::mutex> g(h->mu);
  if (h->done || h->ended.load(std::memory_order_acquire)) return false;
  if (h->run_id) return cancel_started();
  h->cancel_requested = true;
  h->cancel_reason = reason;
  { std::lock_guard<std::mutex> g2(lock_.mu); }
  lock_.slot.notify_all();
  return true;
}

RunProgress WorkerImpl::progress(uint64_t run_id) const {
  std::lock_guard<std::mutex> g(lock_.mu);
  const RunState* run = run_id ? graph_.find_run(run_id) : nullptr;
  return run ? graph_.progress(run) : RunProgress{};
}

Status WorkerImpl::close() {
  // Children hold a copy of this object; only the process that init()ed it
  // may stop the children. In another process (a fork of the owner) the
  // thread objects name threads that do not exist there: let them go.
  if (life_.initialized && pool_.owner_pid() != getpid()) {
    scheduler_.detach();
    runs_.detach();
    finisher_.detach();
    return Status::Ok();
  }
  if (inside_own_run())
    return Status::Error(kWorkerInvalidArgument, "close() from inside an orchestration: return from it first");
  // It would wait for itself: on a finisher or run thread it joined its own
  // thread (std::terminate), in a waiter's or canceller's on_done it waited
  // for its own count (close_race_test).
  if (RunQueue::in_on_done_of(this))
    return Status::Error(kWorkerInvalidArgument,
                         "close() from inside an on_done of a run of the same Worker: close() waits for every run "
                         "to be finished, that one among them");
  std::lock_guard<std::mutex> close_lock(close_mu_);
  runs_.stop();  // queued runs execute first
  {
    // Runs in flight on other threads end first; no new one starts.
    std::unique_lock<std::mutex> lk(lock_.mu);
    closing_ = true;
    while (!graph_.runs().empty()) lock_.idle.wait_for(lk, std::chrono::milliseconds(100));
  }
  // Threads still in RunHandle::wait() of a detached run leave once its run
  // ended (they may be finishing it): then nothing of this Worker is in use.
  while (waiters_.load(std::memory_order_seq_cst) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // A thread that ended detached runs may still be handing their handles to
  // the finisher: stopped before they arrive, it would finish them after
  // close() returned.
  while (handing_over_.load(std::memory_order_seq_cst) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  finisher_.stop();  // the handles of runs the scheduler thread ended are finished first
  if (life_.closed) return Status::Ok();
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    life_.closed = true;
    // Registration requests still queued fail now rather than at their timeout.
    scheduler_.fail_controls("the Worker was closed");
  }
  if (!life_.initialized) {
    for (auto& l : pool_.links()) l->stop();
    return Status::Ok();
  }
  scheduler_.stop();
  for (auto& l : pool_.links()) l->stop();  // SHUTDOWN frames; their sessions end
  const std::string stuck = pool_.shutdown();
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    pool_.clear();
  }
  graph_.unmap_rings();
  if (!cfg_.keep_arena_until_destroyed) arena_map_.reset();  // else at destruction
  rbufs_.release();
  callables_.remove_private_state_dir();
  if (!stuck.empty())
    return Status::Error(kWorkerTimeout,
                         fmt::format("{} did not stop within {} ms and were killed", stuck, cfg_.shutdown_timeout_ms));
  return Status::Ok();
}

// The byte count is checked as it is multiplied: tensor_bytes wraps, and a
// wrapped size would hand out a buffer far smaller than its shape.
Status WorkerImpl::check_alloc_shape(const std::vector<uint32_t>& shape, int32_t dtype) {
  if (shape.size() > PTO_TENSOR_MAX_DIMS || pto_dtype_size(dtype) == 0)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("{} dims (at most {}) and dtype {} (must be a pto/dtype.h dtype)", shape.size(),
                                     PTO_TENSOR_MAX_DIMS, dtype));
  uint64_t bytes = pto_dtype_size(dtype);
  for (uint32_t d : shape)
    if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes) || bytes > (uint64_t(1) << 48))
      return Status::Error(kWorkerInvalidArgument, fmt::format("shape [{}] of dtype {} describes more than 2^48 bytes",
                                                               fmt::join(shape, ", "), dtype));
  return Status::Ok();
}

Result<ContinuousTensor> WorkerImpl::alloc_buffer(const std::vector<uint32_t>& shape, int32_t dtype, const uint64_t* at,
                                                  bool overwrite) {
  Result<ContinuousTensor> r;
  if (!life_.initialized || life_.closed) {
    r.status = Status::Error(life_.closed ? kWorkerClosed : kWorkerInvalidArgument,
                             "Worker::alloc needs an initialised, open Worker (the arena is mapped by init())");
    return r;
  }
  if (Status s = check_alloc_shape(shape, dtype); !s.ok()) {
    r.status = Status::Error(s.code, "alloc: " + s.message);
    return r;
  }
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  uint8_t* p = nullptr;
  const uint64_t bytes = std::max<uint64_t>(tensor_bytes(t), 1);
  if (Status s = at ? arena_.alloc_at(*at, bytes, &p) : arena_.alloc(bytes, &p); !s.ok()) {
    r.status = s;
    return r;
  }
  const uint64_t off = static_cast<uint64_t>(p - arena_map_.data());
  const uint64_t len = arena_.length_of(p);
  // A file-backed arena gets its blocks now: a full disk fails this call
  // instead of a later write into the mapping. Before the warm pages are
  // taken: a failed call leaves them tracked (and so cleared for the next).
  if (Status s = arena_map_.reserve(off, len); !s.ok()) {
    (void)arena_.free(p);
    r.status = s;
    return r;
  }
  // Warm pages under the buffer hold an earlier buffer's bytes: zeroed
  // unless the caller overwrites them all. Kept pages are in memory, so they
  // are cleared in place (~10 GB/s, and the buffer's first writes then land
  // in memory too: a remote buffer's chunks, a job's outputs); unknown ones
  // (an earlier process's, maybe holes) are punched. A re-attached buffer
  // (at) is what an earlier process left there; a range freed in this one
  // reads as zeros, as a punched one always did.
  if (arena_map_.file_backed()) {
    const WarmRanges::Taken warm = warm_.take(off, len);
    if (!overwrite) {
      for (const auto& [o, n] : warm.kept) std::memset(arena_map_.data() + o, 0, n);
      if (!at)
        for (const auto& [o, n] : warm.unknown) zero_range(o, n);
    }
  }
  t.data = reinterpret_cast<uint64_t>(p);
  r.value = t;
  return r;
}

Status WorkerImpl::free_buffer(const ContinuousTensor& t) {
  if (!life_.initialized || life_.closed)
    return Status::Error(kWorkerClosed, "Worker::free on a closed or uninitialised Worker");
  const void* p = reinterpret_cast<const void*>(t.data);
  // The pages are kept warm (up to arena_warm_bytes) or go back to the
  // file system, before the range is free: once free, it may be another
  // buffer's, whose allocation must see them as warm.
  if (const uint64_t len = arena_.length_of(p); len && arena_map_.file_backed()) {
    const auto [rest, rest_len] =
        warm_.keep(static_cast<uint64_t>(static_cast<const uint8_t*>(p) - arena_map_.data()), len);
    // A file system that cannot punch holes keeps the bytes: tracked as
    // unknown, the next zeroing alloc there clears them.
    if (rest_len && !arena_map_.release(rest, rest_len)) warm_.adopt_unknown(rest, rest_len);
  }
  return arena_.free(p);
}

void WorkerImpl::zero_range(uint64_t offset, uint64_t bytes) {
  if (!arena_map_.release(offset, bytes)) std::memset(arena_map_.data() + offset, 0, bytes);
}

uint64_t WorkerImpl::arena_offset(const ContinuousTensor& t) const {
  const uint64_t base = reinterpret_cast<uint64_t>(arena_map_.data());
  if (!base || t.data < base || t.data >= base + arena_map_.size()) return UINT64_MAX;
  return t.data - base;
}

Status WorkerImpl::sync_buffer(const ContinuousTensor& t) {
  const uint64_t off = arena_offset(t);
  if (off == UINT64_MAX) return Status::Error(kWorkerInvalidArgument, "sync: the tensor is not in this Worker's arena");
  return arena_map_.sync(off, std::min<uint64_t>(tensor_bytes(t), arena_map_.size() - off));
}

Status WorkerImpl::write_buffer(const ContinuousTensor& t, uint64_t at, const std::vector<iovec>& pieces) {
  const uint64_t off = arena_offset(t);
  uint64_t bytes = 0;
  for (const iovec& v : pieces) bytes += v.iov_len;
  if (off == UINT64_MAX || at > tensor_bytes(t) || bytes > tensor_bytes(t) - at)
    return Status::Error(kWorkerInvalidArgument, "write: the bytes do not lie in the buffer");
  return arena_map_.write(off + at, pieces);
}

RunProgress WorkerImpl::progress() const {
  std::lock_guard<std::mutex> g(lock_.mu);
  return graph_.progress();
}

bool WorkerImpl::cancel_run(const std::string& reason) {
  std::lock_guard<std::mutex> g(lock_.mu);
  bool any = false;
  for (RunState* run : std::vector<RunState*>(graph_.runs())) any |= graph_.cancel(run, reason);
  return any;
}

WorkerStats WorkerImpl::stats() const {
  std::lock_guard<std::mutex> g(lock_.mu);
  WorkerStats s;
  const TaskGraph::Counters& c = graph_.counters();
  s.runs = c.runs;
  s.tasks_succeeded = c.succeeded;
  s.tasks_failed = c.failed;
  s.tasks_skipped = c.skipped;
  s.tasks_stopped = c.stopped;
  s.task_latency = c.task_latency;
  s.child_restarts = pool_.restarts();
  s.task_retries = scheduler_.task_retries();
  s.mailbox_round_trip = scheduler_.mailbox_round_trip();
  s.remote_round_trip = scheduler_.remote_round_trip();
  s.ready_queue_depth = scheduler_.queue_depth();
  s.tasks_in_flight = scheduler_.in_flight();
  s.heap_ring_bytes = cfg_.heap_ring_bytes;
  for (int i = 0; i < kHeapRings; ++i) s.heap_ring_used[i] = graph_.ring_used(i);
  s.arena_bytes = cfg_.buffer_arena_bytes;
  s.arena_in_use = life_.initialized && !life_.closed ? arena_.bytes_in_use() : 0;
  s.arena_warm = life_.initialized && !life_.closed ? warm_.kept_bytes() : 0;
  return s;
}

std::vector<ChildInfo> WorkerImpl::children() const {
  std::lock_guard<std::mutex> g(lock_.mu);
  return pool_.children(life_.closed);
}

}  // namespace pto
