#include "pto2/host_thread_platform.h"

#include <bit>

#include "event_count.h"
#include "ready_queue.h"

namespace pto2 {

namespace {
constexpr uint64_t kExecutorParkNs = 50000000;  // 50 ms slices while idle
}

HostThreadPlatform::HostThreadPlatform(const HostThreadPlatformConfig& config) : config_(config) {
  for (int i = 0; i < config.cube_cores; ++i) {
    cores_.push_back(std::make_unique<Core>());
    cores_.back()->type = WorkerType::kCube;
  }
  for (int i = 0; i < config.vector_cores; ++i) {
    cores_.push_back(std::make_unique<Core>());
    cores_.back()->type = WorkerType::kVector;
  }
  if (config.executor_threads > 0) {
    // At most one job per core is outstanding.
    jobs_ = std::make_unique<MpmcQueue>(std::bit_ceil(static_cast<uint64_t>(cores_.size()) + 1));
    jobs_ec_ = std::make_unique<EventCount>();
    for (int i = 0; i < config.executor_threads; ++i) executors_.emplace_back([this] { executor_main(); });
  }
}

HostThreadPlatform::~HostThreadPlatform() {
  stop_.store(true, std::memory_order_seq_cst);
  if (jobs_ec_) jobs_ec_->notify();
  for (auto& t : executors_) t.join();
}

void HostThreadPlatform::register_kernel(int32_t kernel_id, WorkerType type, HostKernel kernel) {
  kernels_.push_back(std::move(kernel));
  by_id_[static_cast<int>(type)].emplace_back(kernel_id, &kernels_.back());
}

bool HostThreadPlatform::resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) {
  for (auto& [id, fn] : by_id_[static_cast<int>(type)]) {
    if (id == kernel_id) {
      *function_bin_addr = reinterpret_cast<uint64_t>(fn);
      return true;
    }
  }
  return false;
}

void HostThreadPlatform::execute(int core) {
  Core& c = *cores_[core];
  (*reinterpret_cast<HostKernel*>(c.payload.function_bin_addr))(c.payload.args);
  executed_.fetch_add(1, std::memory_order_relaxed);
  c.finished.store(c.payload.task_id + 1, std::memory_order_release);
}

void HostThreadPlatform::dispatch(int core, const DispatchPayload& payload) {
  cores_[core]->payload = payload;
  if (executors_.empty()) {
    execute(core);
    return;
  }
  while (!jobs_->try_push(static_cast<uint64_t>(core))) cpu_relax();
  jobs_ec_->notify();
}

bool HostThreadPlatform::poll_finished(int core, uint64_t* task_id) {
  Core& c = *cores_[core];
  const uint64_t v = c.finished.load(std::memory_order_acquire);
  if (v == 0) return false;
  c.finished.store(0, std::memory_order_relaxed);
  *task_id = v - 1;
  return true;
}

void HostThreadPlatform::executor_main() {
  const uint64_t spin_ns = uint64_t(config_.spin_before_park_us) * 1000;
  uint64_t core = 0;
  for (;;) {
    const bool got = spin_then_park(
        *jobs_ec_, spin_ns, kExecutorParkNs,
        [&] { return stop_.load(std::memory_order_acquire) || jobs_->try_pop(&core); }, [] { return true; });
    if (!got || stop_.load(std::memory_order_acquire)) return;
    execute(static_cast<int>(core));
    wakeup_.notify();
  }
}

}  // namespace pto2
