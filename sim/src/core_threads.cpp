#include "core_threads.h"

namespace pto2::sim {

namespace {
constexpr uint64_t kIdleParkNs = 50000000;  // 50 ms slices while idle
}

CoreThreads::CoreThreads(int cores, std::function<void(int)> run, uint32_t spin_us)
    : run_(std::move(run)), spin_ns_(uint64_t(spin_us) * 1000) {
  for (int i = 0; i < cores; ++i) slots_.push_back(std::make_unique<Slot>());
}

CoreThreads::~CoreThreads() {
  stop_.store(true, std::memory_order_seq_cst);
  for (auto& s : slots_) {
    s->ec.notify();
    if (s->thread.joinable()) s->thread.join();
  }
}

void CoreThreads::start(int core) {
  Slot& s = *slots_[core];
  s.doorbell.store(true, std::memory_order_release);
  if (!s.thread.joinable()) {
    s.thread = std::thread([this, core] { main(core); });
    started_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  s.ec.notify();
}

void CoreThreads::main(int core) {
  Slot& s = *slots_[core];
  for (;;) {
    pto::spin_then_park(
        s.ec, spin_ns_, kIdleParkNs,
        [&] { return stop_.load(std::memory_order_acquire) || s.doorbell.load(std::memory_order_acquire); },
        [] { return true; });
    if (s.doorbell.exchange(false, std::memory_order_acq_rel)) run_(core);
    if (stop_.load(std::memory_order_acquire)) return;
  }
}

}  // namespace pto2::sim
