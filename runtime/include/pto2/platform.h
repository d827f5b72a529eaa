// The platform interface: how the runtime reaches cores. The runtime knows
// nothing of processes, sockets or registers; a platform (the simulated chip in
// sim/, the host-thread platform for tests, a real chip) implements this.
//
// Threading contract:
//  * dispatch() and poll_finished() for one core are called only by the one
//    scheduler thread that owns that core, never concurrently.
//  * dispatch() is only called for an idle core (nothing dispatched, or the
//    last task's completion was already reported by poll_finished()).
//  * The platform calls Wakeup::notify() after a core finishes so that a
//    parked scheduler thread looks again. It may call it from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "pto2/orchestration_api.h"

namespace pto2 {

enum class WorkerType : int32_t { kCube = PTO2_WORKER_CUBE, kVector = PTO2_WORKER_VECTOR };
inline constexpr int kNumWorkerTypes = 2;

// What a scheduler hands a core (docs/sim.md, register protocol). args points at the task
// descriptor's argument array: tensor parameters are pointers to Tensor,
// scalars are the values. It stays valid until the core's completion is seen.
// args[num_args] exists and is the platform's to use while the task runs.
struct DispatchPayload {
  uint64_t task_id = 0;
  int32_t kernel_id = 0;
  uint64_t function_bin_addr = 0;
  int32_t num_args = 0;
  int64_t* args = nullptr;
  // The logical block this dispatch runs (PTO2KernelContext::block_idx /
  // block_num): one of a block_incore task's blocks, or 0 / 1.
  int32_t block_idx = 0;
  int32_t block_num = 1;
  // The task names a cluster pipe (PIPE_IN / PIPE_OUT): the platform must run
  // it so that it can wait for its peer on the cluster's other core without
  // holding up anything else (a2a3sim: on the core's own thread).
  bool uses_pipes = false;
  // Each argument's PTOParamType (INPUT, OUTPUT, INOUT, SCALAR, PIPE_*),
  // num_args of them; valid as long as args. tx8sim checks its kernels' DMA
  // against them and follows data in simulated time.
  const uint8_t* param_kinds = nullptr;
  // The SPMD call this dispatch belongs to: the task id of a plain task or a
  // batch descriptor, the first block's id for the blocks of an expanded call
  // (consecutive ids). tx8sim lets a call's blocks share their tensors.
  uint64_t call_id = 0;
};

// A way to wake parked scheduler threads; implemented by the runtime.
class Wakeup {
 public:
  virtual ~Wakeup() = default;
  virtual void notify() = 0;
  // A platform found a task's run broken in a way its kernel could not report
  // (a pipe nobody serves): the run fails with this error. Any thread.
  virtual void fault(int32_t code, const std::string& message) {
    (void)code;
    (void)message;
  }
};

// What a platform keeps of the runtime's Wakeup: implements the contract of
// Platform::set_wakeup for it. notify() may be called from any thread.
class WakeupSlot {
 public:
  // Dekker-style with notify(): either set() sees a notify in flight and
  // waits for it (a few instructions and at most one futex wake), or the
  // notify sees the new value.
  void set(Wakeup* wakeup) {
    wakeup_.store(wakeup, std::memory_order_seq_cst);
    while (notifying_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  }
  void notify() {
    notifying_.fetch_add(1, std::memory_order_seq_cst);
    if (Wakeup* w = wakeup_.load(std::memory_order_seq_cst)) w->notify();
    notifying_.fetch_sub(1, std::memory_order_release);
  }
  void fault(int32_t code, const std::string& message) {
    notifying_.fetch_add(1, std::memory_order_seq_cst);
    if (Wakeup* w = wakeup_.load(std::memory_order_seq_cst)) w->fault(code, message);
    notifying_.fetch_sub(1, std::memory_order_release);
  }

 private:
  std::atomic<Wakeup*> wakeup_{nullptr};
  std::atomic<int> notifying_{0};
};

class Platform {
 public:
  virtual ~Platform() = default;

  virtual int core_count() const = 0;
  virtual WorkerType core_type(int core) const = 0;
  // Clusters: groups of cores that run together and share local pipes
  // (a2a3: 1 AIC + 2 AIV). A platform without clusters reports 0, and the
  // runtime refuses cluster allocation on it.
  virtual int cluster_count() const { return 0; }
  virtual int core_cluster(int core) const {
    (void)core;
    return -1;
  }
  // Whether kernels learn their logical block (DispatchPayload::block_idx,
  // a2a3sim: the kernel context). Without it the runtime refuses block tasks:
  // every block would run the whole kernel.
  virtual bool passes_block_index() const { return false; }

  // func_id_to_addr: the address a core needs to run kernel_id on a core of
  // `type`. False if the platform has no such kernel for that core type.
  virtual bool resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) = 0;

  // Starts payload on an idle core. Must not wait for the kernel to finish,
  // though a platform may run it inline (the host-thread platform does).
  virtual void dispatch(int core, const DispatchPayload& payload) = 0;

  // True once the core has finished the task last dispatched to it; reports
  // that task's id. Non-blocking.
  virtual bool poll_finished(int core, uint64_t* task_id) = 0;

  // Optional, for profiling: when the task poll_finished() last reported on
  // this core started and ended, in steady_clock nanoseconds.
  virtual bool core_times(int core, uint64_t* start_ns, uint64_t* end_ns) {
    (void)core;
    (void)start_ns;
    (void)end_ns;
    return false;
  }

  // A run starts (the last one drained): per-run state may be reset
  // (a2a3sim empties its pipes).
  virtual void run_starting() {}
  // The cluster goes to a new function group; none of the previous group's
  // tasks is running. a2a3sim checks that its pipes were drained (a fault
  // when not) and empties them.
  virtual void cluster_claimed(int cluster) { (void)cluster; }

  // Installed by the runtime before the first dispatch; nullptr detaches.
  // Once set_wakeup(nullptr) returns, no call to the previous Wakeup may be
  // in progress or start later (the runtime frees it next).
  virtual void set_wakeup(Wakeup* wakeup) = 0;
};

}  // namespace pto2
