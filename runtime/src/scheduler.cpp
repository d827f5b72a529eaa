#include "scheduler.h"

#include <algorithm>

#include "log.h"

namespace pto2 {

namespace {
constexpr uint64_t kScanBatch = 32;
constexpr int kDummyBatch = 64;
constexpr int kDrainBatch = 64;
constexpr uint64_t kParkBusyNs = 1000000;   // cores busy: look again within 1 ms
constexpr uint64_t kParkIdleNs = 10000000;  // nothing in flight: 10 ms
constexpr uint64_t kParkBetweenRunsNs = 100000000;
constexpr uint32_t kMaxBackoff = 32;  // pauses between idle looks (~1 us here)
}  // namespace

SchedulerThread::SchedulerThread(RuntimeState& state, int index, std::vector<int> cores, bool peers)
    : s_(state), index_(index), peers_(peers) {
  for (int c : cores)
    cores_.push_back({c, static_cast<int32_t>(s_.platform.core_type(c)), s_.platform.core_cluster(c), kNoTask, {}});
  busy_.reserve(cores_.size());
}

bool SchedulerThread::poll_completions() {
  bool progress = false;
  for (size_t i = 0; i < busy_.size();) {
    Core& c = cores_[busy_[i]];
    uint64_t finished = 0;
    if (!s_.platform.poll_finished(c.id, &finished)) {
      ++i;
      continue;
    }
    if (finished != c.running) {
      component_logger("scheduler")
          ->error("core {} reported task {} finished but was running task {}", c.id, finished, c.running);
    }
    const uint64_t id = c.running;
    c.running = kNoTask;
    busy_[i] = busy_.back();
    busy_.pop_back();
    progress = true;
    if (s_.config.profiling) record(id, &c, c.dispatch_ns);
    // A batch descriptor completes with its last block.
    if (c.payload.block_num > 1 && s_.descriptor_of(id).block_dim > 1 &&
        s_.slot_of(id).blocks_left.fetch_sub(1, std::memory_order_acq_rel) != 1)
      continue;
    if (s_.observer) observe(id);
    s_.complete(id, index_);
  }
  return progress;
}

void SchedulerThread::observe(uint64_t id) {
  const TaskDescriptor& d = s_.descriptor_of(id);
  const Tensor* tensors[PTO2_MAX_PARAMS] = {};
  for (int32_t i = 0; i < d.num_params; ++i)
    if (d.param_kind[i] != kParamScalar && d.param_kind[i] != kParamPipeIn && d.param_kind[i] != kParamPipeOut)
      tensors[i] = &d.tensors[i];
  s_.observer->task_finished(id, d.kernel_id, d.worker_type, tensors, d.num_params);
}

bool SchedulerThread::drain_orchestrator_queue() {
  uint64_t id;
  int n = 0;
  while (n < kDrainBatch && s_.orch_ready->try_pop(&id)) {
    s_.enqueue_ready(id, index_);
    ++n;
  }
  return n > 0;
}

bool SchedulerThread::scan() {
  bool progress = false;
  for (TaskRing& tr : s_.rings) {
    RingFlowControl& fc = tr.flow();
    const uint64_t head = fc.current_task_index.load(std::memory_order_acquire);
    uint64_t begin = fc.next_scan_index.load(std::memory_order_relaxed);
    uint64_t end = 0;
    bool claimed = false;
    while (begin < head) {
      end = std::min(begin + kScanBatch, head);
      if (fc.next_scan_index.compare_exchange_weak(begin, end, std::memory_order_acq_rel)) {
        claimed = true;
        break;
      }
    }
    if (!claimed) continue;
    progress = true;
    for (uint64_t seq = begin; seq < end; ++seq) {
      // Only roots are ours; other tasks become ready through their producers.
      // A non-root may already have retired and its slot been reused: the id
      // in scan_id tells.
      const uint64_t want = make_task_id(tr.ring(), seq) | TaskSlotState::kRootBit;
      TaskSlotState& st = tr.slot_state(seq);
      if (st.scan_id.load(std::memory_order_acquire) != want) continue;
      uint32_t expected = kSlotInitial;
      if (st.state.compare_exchange_strong(expected, kSlotReady, std::memory_order_acq_rel)) {
        if (s_.config.profiling) st.ready_ns = now_ns();
        s_.enqueue_ready(make_task_id(tr.ring(), seq), index_);
      }
    }
  }
  return progress;
}

bool SchedulerThread::take(Core& c, bool* empty, uint64_t* carry, uint64_t* id, int32_t* block) {
  bool pinned = false;
  if (c.cluster >= 0 && s_.pinned->any() && s_.pinned->pop(c.cluster, c.type, id)) {
    pinned = true;
  } else if (carry[c.type] != kNoTask) {
    *id = carry[c.type];
  } else if (empty[c.type] || !s_.ready[c.type]->pop(index_, id)) {
    empty[c.type] = true;
    return false;
  }
  const TaskDescriptor& d = s_.descriptor_of(*id);
  if (d.block_dim <= 1) {
    *block = d.block_base;
    return true;
  }
  // A batch descriptor has one queue entry; whoever holds it hands out the
  // next block. The task cannot complete, so its slot cannot be reused, while
  // a block is undispatched.
  TaskSlotState& st = s_.slot_of(*id);
  *block = d.block_base + static_cast<int32_t>(st.next_block++);
  const bool more = st.next_block < static_cast<uint32_t>(d.block_dim);
  if (pinned) {
    if (more) s_.push_pinned(c.cluster, c.type, *id);
  } else if (more && peers_) {
    // Back at once, before this block is dispatched (with inline kernels the
    // dispatch runs it): an idle core of another thread can take the next.
    carry[c.type] = kNoTask;
    s_.ready[c.type]->push(index_, *id);
    s_.notify_work();
  } else {
    // The only scheduler thread keeps it for its next idle core: no queue
    // round trip per block.
    carry[c.type] = more ? *id : kNoTask;
  }
  return true;
}

bool SchedulerThread::dispatch() {
  bool progress = false;
  uint64_t id;
  for (int n = 0; n < kDummyBatch && s_.ready[kWorkerDummy]->pop(index_, &id); ++n) {
    if (s_.config.profiling) record(id, nullptr, now_ns());
    s_.complete(id, index_);
    progress = true;
  }
  bool empty[kNumWorkerTypes] = {false, false};
  uint64_t carry[kNumWorkerTypes] = {kNoTask, kNoTask};
  // With both shared queues found empty and nothing pinned, no idle core
  // further on can get a task: the pass ends there.
  const bool pinned = s_.pinned->any();
  for (int ci = 0; ci < static_cast<int>(cores_.size()); ++ci) {
    Core& c = cores_[ci];
    if (c.running != kNoTask) continue;
    // A type whose queue was found empty has no carry either (a carry comes
    // from a pop): only a pinned task could still be there for this core.
    if (empty[c.type] && !(pinned && c.cluster >= 0)) continue;
    int32_t block = 0;
    if (!take(c, empty, carry, &id, &block)) {
      if (empty[0] && empty[1] && !pinned) break;
      continue;
    }
    const TaskDescriptor& d = s_.descriptor_of(id);
    c.payload.task_id = id;
    c.payload.kernel_id = d.kernel_id;
    c.payload.function_bin_addr = d.function_bin_addr;
    c.payload.num_args = d.num_params;
    c.payload.args = const_cast<int64_t*>(d.args);
    c.payload.block_idx = block;
    c.payload.block_num = d.block_num;
    c.payload.uses_pipes = d.uses_pipes;
    c.payload.param_kinds = d.param_kind;
    // An expanded block's siblings sit right before it on its ring.
    c.payload.call_id = d.block_dim == 1 && d.block_num > 1 && d.block_base > 0
                            ? make_task_id(task_ring(id), task_seq(id) - static_cast<uint64_t>(d.block_base))
                            : id;
    c.running = id;
    busy_.push_back(ci);
    if (s_.config.profiling) c.dispatch_ns = now_ns();
    s_.platform.dispatch(c.id, c.payload);
    progress = true;
  }
  // A batch with blocks left and no idle core here to take them goes back to
  // the shared queue.
  for (int type = 0; type < kNumWorkerTypes; ++type) {
    if (carry[type] == kNoTask) continue;
    s_.ready[type]->push(index_, carry[type]);
    empty[type] = false;
  }
  // Ready work this thread has no idle core for: wake parked peers, whose
  // cores may be idle (a no-op when nobody is parked).
  for (int type = 0; type < kNumWorkerTypes; ++type) {
    if (!empty[type] && !s_.ready[type]->empty_hint()) {
      s_.sched_ec.notify();
      break;
    }
  }
  return progress;
}

void SchedulerThread::record(uint64_t id, const Core* c, uint64_t dispatch_ns) {
  // Read before complete(): after it the task may retire and its slot be reused.
  const TaskDescriptor& d = s_.descriptor_of(id);
  const int core = c ? c->id : -1;
  TaskRecord r;
  r.task_id = id;
  r.kernel_id = d.kernel_id;
  r.core = core;
  r.cluster = c ? c->cluster : -1;
  r.pinned_cluster = d.cluster_id;
  r.group = d.group_id;
  r.block_idx = c ? c->payload.block_idx : d.block_base;
  r.block_num = d.block_num;
  r.scheduler = index_;
  r.worker_type = d.worker_type;
  r.submit_ns = d.submit_ns;
  r.ready_ns = std::max(s_.slot_of(id).ready_ns, r.submit_ns);
  r.dispatch_ns = std::max(dispatch_ns, r.ready_ns);
  r.complete_ns = now_ns();
  if (core < 0 || !s_.platform.core_times(core, &r.start_ns, &r.end_ns)) {
    r.start_ns = r.dispatch_ns;
    r.end_ns = r.complete_ns;
  }
  records_.push_back(r);
}

bool SchedulerThread::step() {
  bool progress = poll_completions();
  progress |= drain_orchestrator_queue();
  progress |= scan();
  progress |= dispatch();
  return progress;
}

void SchedulerThread::run_until_drained() {
  const uint64_t spin_ns = uint64_t(s_.config.spin_before_park_us) * 1000;
  uint64_t idle_since = 0;
  // `spinning` counts threads in the idle-spin phase only: a thread that is
  // busy (running inline kernels, completing tasks) may not look at new work
  // for a while, so publishers must still wake parked peers.
  bool counted = false;
  auto stop_counting = [&] {
    if (counted) s_.spinning.fetch_sub(1, std::memory_order_seq_cst);
    counted = false;
  };
  // Between idle looks the thread pauses longer and longer (up to
  // kMaxBackoff pauses): every look reads lines the orchestrator is writing
  // (the ring head, the next slot), and looking at them as fast as possible
  // made every submit wait for those lines to come back.
  uint32_t backoff = 1;
  for (;;) {
    if (s_.abort.load(std::memory_order_acquire)) break;
    if (step()) {
      stop_counting();
      idle_since = 0;
      backoff = 1;
      continue;
    }
    if (busy_.empty() && s_.run_drained()) break;
    const uint64_t now = now_ns();
    if (idle_since == 0) idle_since = now;
    if (now - idle_since < spin_ns) {
      if (!counted) {
        // Counted before the next look for work (the next step()), so a
        // publisher either sees us spinning or we see its work.
        s_.spinning.fetch_add(1, std::memory_order_seq_cst);
        counted = true;
      }
      for (uint32_t i = 0; i < backoff; ++i) cpu_relax();
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    // Leave the spinning state *before* the last look for work: a publisher
    // either sees us uncounted and wakes us, or we see its work.
    stop_counting();
    const uint32_t key = s_.sched_ec.prepare_wait();
    const bool progress = step();
    const bool done = (busy_.empty() && s_.run_drained()) || s_.abort.load(std::memory_order_acquire);
    if (progress || done) {
      s_.sched_ec.cancel_wait();
    } else {
      s_.sched_ec.commit_wait(key, !busy_.empty() ? kParkBusyNs : kParkIdleNs);
    }
    if (done && !progress) break;
    idle_since = 0;
    backoff = 1;
  }
  stop_counting();
}

Scheduler::Scheduler(RuntimeState& state, int threads) : s_(state) {
  // Cores of each type are dealt round-robin, so every thread gets an equal
  // share of AICs and of AIVs (docs/runtime.md §9).
  std::vector<std::vector<int>> share(threads);
  int next[kNumWorkerTypes] = {0, 0};
  for (int c = 0; c < s_.platform.core_count(); ++c) {
    const int type = static_cast<int>(s_.platform.core_type(c));
    share[next[type]++ % threads].push_back(c);
  }
  for (int t = 0; t < threads; ++t) workers_.push_back(std::make_unique<SchedulerThread>(s_, t, share[t], threads > 1));
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { thread_main(t); });
}

void Scheduler::take_records(std::vector<TaskRecord>* out) {
  for (auto& w : workers_) w->take_records(out);
}

void Scheduler::abandon() {
  shutdown_.store(true, std::memory_order_seq_cst);
  s_.abort.store(1, std::memory_order_seq_cst);
  s_.sched_ec.notify();
  for (auto& t : threads_) t.detach();
  threads_.clear();
}

Scheduler::~Scheduler() {
  shutdown_.store(true, std::memory_order_seq_cst);
  s_.abort.store(1, std::memory_order_seq_cst);
  s_.sched_ec.notify();
  for (auto& t : threads_) t.join();
}

void Scheduler::thread_main(int index) {
  uint64_t seen = 0;
  const uint64_t spin_ns = uint64_t(s_.config.spin_before_park_us) * 1000;
  for (;;) {
    spin_then_park(
        s_.sched_ec, spin_ns, kParkBetweenRunsNs,
        [&] {
          return shutdown_.load(std::memory_order_acquire) || run_generation_.load(std::memory_order_acquire) != seen;
        },
        [] { return true; });
    if (shutdown_.load(std::memory_order_acquire)) return;
    seen = run_generation_.load(std::memory_order_acquire);
    workers_[index]->run_until_drained();
    threads_done_.fetch_add(1, std::memory_order_acq_rel);
    s_.run_ec.notify();
  }
}

void Scheduler::start_run() {
  threads_done_.store(0, std::memory_order_relaxed);
  run_generation_.fetch_add(1, std::memory_order_release);
  s_.sched_ec.notify();
}

bool Scheduler::wait_run_finished(const std::function<bool()>& on_slice) {
  const int n = threads();
  return spin_then_park(
      s_.run_ec, uint64_t(s_.config.spin_before_park_us) * 1000, kParkBusyNs,
      [&] { return threads_done_.load(std::memory_order_acquire) == n; }, on_slice);
}

}  // namespace pto2
