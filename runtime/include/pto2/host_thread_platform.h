// HostThreadPlatform: a Platform whose cores run kernels as host C++ functions.
//
// It is the in-process platform the runtime's tests and benchmarks use: a set
// of logical CUBE and VECTOR cores, and a bounded number of OS threads that
// execute what is dispatched to them.
//   * executor_threads == 0: a kernel runs inline on the scheduler thread that
//     dispatches it (no extra threads; what a busy small machine wants).
//   * executor_threads  > 0: kernels run on that many executor threads, so a
//     kernel's completion races the scheduler and orchestrator for real.
// Executors spin briefly, then park, when there is nothing to run.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "pto2/platform.h"

namespace pto {
class EventCount;
class MpmcQueue;
}  // namespace pto

namespace pto2 {


// A kernel: receives the dispatch payload's args (tensor params are Tensor*,
// scalars are values).
using HostKernel = std::function<void(int64_t* args)>;

struct HostThreadPlatformConfig {
  int cube_cores = 4;
  int vector_cores = 8;
  int executor_threads = 0;
  uint32_t spin_before_park_us = 50;
};

class HostThreadPlatform : public Platform {
 public:
  explicit HostThreadPlatform(const HostThreadPlatformConfig& config);
  ~HostThreadPlatform() override;

  // Registers kernel_id for cores of `type`. Call before the runtime runs.
  void register_kernel(int32_t kernel_id, WorkerType type, HostKernel kernel);

  int core_count() const override { return static_cast<int>(cores_.size()); }
  WorkerType core_type(int core) const override { return cores_[core]->type; }
  bool resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) override;
  void dispatch(int core, const DispatchPayload& payload) override;
  bool poll_finished(int core, uint64_t* task_id) override;
  void set_wakeup(Wakeup* wakeup) override { wakeup_.set(wakeup); }

  uint64_t tasks_executed() const { return executed_.load(std::memory_order_relaxed); }

 private:
  struct alignas(64) Core {
    WorkerType type;
    DispatchPayload payload;
    std::atomic<uint64_t> finished{0};  // task id + 1 once done, 0 otherwise
  };
  void execute(int core);
  void executor_main();

  HostThreadPlatformConfig config_;
  std::vector<std::unique_ptr<Core>> cores_;
  std::deque<HostKernel> kernels_;  // stable addresses: function_bin_addr points here
  std::vector<std::pair<int64_t, HostKernel*>> by_id_[kNumWorkerTypes];
  std::unique_ptr<pto::MpmcQueue> jobs_;
  std::unique_ptr<pto::EventCount> jobs_ec_;
  std::vector<std::thread> executors_;
  std::atomic<bool> stop_{false};
  WakeupSlot wakeup_;
  std::atomic<uint64_t> executed_{0};
};

}  // namespace pto2
