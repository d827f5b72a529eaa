#include "runtime_state.h"

#include <algorithm>
#include <bit>

#include <sys/mman.h>

namespace pto2 {

RuntimeState::RuntimeState(const RuntimeConfig& cfg, Platform& plat)
    : config(cfg), platform(plat), region(cfg), clusters(std::max(0, plat.cluster_count())) {
  pinned = std::make_unique<PinnedReadyQueues>(std::max(1, clusters), kNumWorkerTypes);
  cluster_outstanding = std::make_unique<std::atomic<int64_t>[]>(std::max(1, clusters));
  if (!region.valid()) return;
  heap_mapping_bytes = config.heap_size * kMaxRings;
  void* h =
      mmap(nullptr, heap_mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (h == MAP_FAILED) return;
  heap_base = static_cast<uint8_t*>(h);
  for (int r = 0; r < kMaxRings; ++r) {
    rings[r].init(r, region);
    dep_entries[r] = region.dep_pool(r);
  }
  const uint64_t in_flight = config.task_window * kMaxRings;
  for (auto& q : ready) q = std::make_unique<ShardedReadyQueue>(config.ready_queue_shards, in_flight);
  orch_ready = std::make_unique<MpmcQueue>(std::bit_ceil(in_flight));
}

RuntimeState::~RuntimeState() {
  if (leak_mappings) {
    region.leak();
    return;
  }
  if (heap_base) munmap(heap_base, heap_mapping_bytes);
}

void RuntimeState::push_ready(uint64_t id, int shard_hint) {
  TaskSlotState& st = slot_of(id);
  st.state.store(kSlotReady, std::memory_order_relaxed);
  if (config.profiling) st.ready_ns = now_ns();
  enqueue_ready(id, shard_hint);
  notify_work();
}

void RuntimeState::fault(int32_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(fault_mu_);
  if (fault_.ok()) fault_ = Status::Error(code, message);
}

Status RuntimeState::take_fault() {
  std::lock_guard<std::mutex> lock(fault_mu_);
  Status s = fault_;
  fault_ = Status::Ok();
  return s;
}

void RuntimeState::complete(uint64_t id, int shard_hint) {
  TaskSlotState& st = slot_of(id);
  const TaskDescriptor& d = descriptor_of(id);
  // Fanout lock (docs/runtime.md §6), scheduler side: after `completed` is set under the lock, the
  // orchestrator will not link new consumers, so the list read here is final.
  lock_fanout(st);
  st.completed = true;
  const int32_t fanout = st.fanout_head;
  unlock_fanout(st);
  st.state.store(kSlotCompleted, std::memory_order_release);
  // Read before the task can retire: after release(id) its slot may be reused.
  const int32_t cluster = d.cluster_id;

  for (int32_t link = fanout; link != 0;) {
    // Read the entry before the consumer can run: once it is ready it may
    // retire, and its ring may reuse this entry.
    const DepListEntry& e = dep_entry(link);
    const uint64_t consumer = e.task_id;
    link = e.next;
    if (slot_of(consumer).fanin_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) push_ready(consumer, shard_hint);
  }
  // This task no longer needs its producers (their buffers) ...
  for (int32_t link = d.fanin_head; link != 0;) {
    const DepListEntry& e = dep_entry(link);
    link = e.next;
    release(e.task_id);
  }
  // ... and drops the reference its own execution held.
  release(id);
  // The orchestrator waits on completions in two places only: for a cluster
  // whose tasks have all completed (allocate_cluster) and for one task
  // (read_tensor). Waking it on every completion cost the scheduler a futex
  // wake per task while it waited.
  if (cluster >= 0 && cluster_outstanding[cluster].fetch_sub(1, std::memory_order_acq_rel) == 1) orch_ec.notify();
  completed_count.fetch_add(1, std::memory_order_release);
  if (awaited_after_fence() == id) orch_ec.notify();
}

void RuntimeState::release(uint64_t id) {
  TaskSlotState& st = slot_of(id);
  if (st.refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  st.state.store(kSlotConsumed, std::memory_order_seq_cst);
  if (ring_of(id).retire_consumed()) {
    // Space came free: it matters to an orchestrator waiting for space, not
    // to one waiting for a task (read_tensor), which would wake per task.
    if (awaited_after_fence() == kNoTask) orch_ec.notify();
    // Parked schedulers care about retirement only when it ends the run.
    if (run_drained()) sched_ec.notify();
  }
}

bool RuntimeState::run_drained() {
  if (region.header()->orchestrator_done.load(std::memory_order_acquire) == 0) return false;
  for (auto& r : rings) {
    RingFlowControl& fc = r.flow();
    if (fc.last_task_alive.load(std::memory_order_acquire) != fc.current_task_index.load(std::memory_order_acquire))
      return false;
  }
  return true;
}

}  // namespace pto2
