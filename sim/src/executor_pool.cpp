#include "executor_pool.h"

#include <bit>

#include "pto/base/event_count.h"
#include "pto/base/mpmc_queue.h"

namespace pto2::sim {

namespace {
constexpr uint64_t kExecutorParkNs = 50000000;  // 50 ms slices while idle
}

struct ExecutorPool::Doorbells {
  explicit Doorbells(uint64_t capacity) : queue(capacity) {}
  pto::MpmcQueue queue;
  pto::EventCount ec;
};

ExecutorPool::ExecutorPool(int threads, int cores, uint32_t spin_us, std::function<void(int)> run)
    : doorbells_(std::make_unique<Doorbells>(std::bit_ceil(static_cast<uint64_t>(cores) + 1))),
      run_(std::move(run)),
      spin_ns_(uint64_t(spin_us) * 1000) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { main(); });
}

ExecutorPool::~ExecutorPool() {
  stop_.store(true, std::memory_order_seq_cst);
  doorbells_->ec.notify();
  for (auto& t : threads_) t.join();
}

void ExecutorPool::ring(int core) {
  // Each core has at most one doorbell pending and the queue holds more than
  // the cores, so a push only fails while a popper is mid-way: retry.
  while (!doorbells_->queue.try_push(static_cast<uint64_t>(core))) pto::cpu_relax();
  doorbells_->ec.notify();
}

void ExecutorPool::main() {
  uint64_t core = 0;
  for (;;) {
    const bool got = pto::spin_then_park(
        doorbells_->ec, spin_ns_, kExecutorParkNs,
        [&] { return stop_.load(std::memory_order_acquire) || doorbells_->queue.try_pop(&core); }, [] { return true; });
    if (!got || stop_.load(std::memory_order_acquire)) return;
    run_(static_cast<int>(core));
  }
}

}  // namespace pto2::sim
