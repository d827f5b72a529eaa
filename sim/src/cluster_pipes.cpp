#include "cluster_pipes.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "pto/base/status.h"

namespace pto2::sim {

namespace {
constexpr uint64_t kParkSliceNs = 1000000;  // 1 ms: the timeout is checked between parks
}

ClusterPipes::ClusterPipes(int clusters, uint64_t capacity_bytes, uint32_t timeout_ms, uint32_t spin_us)
    : capacity_(capacity_bytes), timeout_ns_(uint64_t(timeout_ms) * 1000000), spin_ns_(uint64_t(spin_us) * 1000) {
  for (int i = 0; i < clusters * PTO2_PIPES_PER_CLUSTER; ++i) {
    pipes_.push_back(std::make_unique<Pipe>());
    // Not make_unique, which zero-fills: a pipe's pages are touched only when used.
    pipes_.back()->ring = std::unique_ptr<uint8_t[]>(new uint8_t[capacity_]);
  }
}

void ClusterPipes::reset() {
  for (auto& p : pipes_) {
    p->pushed.store(0, std::memory_order_relaxed);
    p->popped.store(0, std::memory_order_relaxed);
    p->broken.store(false, std::memory_order_release);
  }
}

void ClusterPipes::reset_cluster(int cluster) {
  for (int i = 0; i < PTO2_PIPES_PER_CLUSTER; ++i) {
    Pipe& p = *pipes_[static_cast<size_t>(cluster) * PTO2_PIPES_PER_CLUSTER + i];
    p.pushed.store(0, std::memory_order_relaxed);
    p.popped.store(0, std::memory_order_relaxed);
    p.broken.store(false, std::memory_order_release);
  }
}

void ClusterPipes::break_all() {
  for (auto& p : pipes_) {
    p->broken.store(true, std::memory_order_release);
    p->ec.notify();
  }
}

uint64_t ClusterPipes::queued(int cluster, int pipe) const {
  const Pipe& p = *pipes_[static_cast<size_t>(cluster) * PTO2_PIPES_PER_CLUSTER + pipe];
  return p.pushed.load(std::memory_order_acquire) - p.popped.load(std::memory_order_acquire);
}

ClusterPipes::Pipe* ClusterPipes::find(const Caller& who, const Tensor* pipe, uint64_t bytes, const char* op,
                                       std::string* diagnosis) {
  if (pipe == nullptr || !pto2_is_pipe_tensor(pipe) || pto2_pipe_cluster(pipe) != who.cluster) {
    *diagnosis = fmt::format("pto2_pipe_{} by task {} (kernel {}) on core {}: the tensor is not a pipe of its cluster "
                             "{}",
                             op, who.task_id, who.kernel_id, who.core, who.cluster);
    return nullptr;
  }
  if (bytes > capacity_) {
    *diagnosis = fmt::format("pto2_pipe_{} of {} bytes by task {} (kernel {}): pipe {} of cluster {} holds {} bytes; "
                             "move the data in pieces of at most that (or raise pipe_bytes)",
                             op, bytes, who.task_id, who.kernel_id, pto2_pipe_index(pipe), who.cluster, capacity_);
    return nullptr;
  }
  return pipes_[static_cast<size_t>(who.cluster) * PTO2_PIPES_PER_CLUSTER + pto2_pipe_index(pipe)].get();
}

template <typename Ready>
bool ClusterPipes::wait(Pipe& p, Ready&& ready, bool* broke_it) {
  const uint64_t start = pto::now_ns();
  if (pto::spin_then_park(
          p.ec, spin_ns_, kParkSliceNs, [&] { return p.broken.load(std::memory_order_acquire) || ready(); },
          [&] { return pto::now_ns() - start < timeout_ns_; }) &&
      !p.broken.load(std::memory_order_acquire))
    return true;
  // Timed out, or the pipe broke earlier: it is broken now, and the peer,
  // if it waits, hears so at once.
  *broke_it = !p.broken.exchange(true, std::memory_order_acq_rel);
  p.ec.notify();
  return false;
}

int32_t ClusterPipes::push(const Caller& who, const Tensor* pipe, const void* src, uint64_t bytes,
                           std::string* diagnosis) {
  Pipe* p = find(who, pipe, bytes, "push", diagnosis);
  if (p == nullptr) return pto::kInvalidArgument;
  const uint64_t pushed = p->pushed.load(std::memory_order_relaxed);
  bool first = false;
  if (!wait(*p, [&] { return capacity_ - (pushed - p->popped.load(std::memory_order_acquire)) >= bytes; }, &first)) {
    *diagnosis = fmt::format(
        "STALLED: task {} (kernel {}) on core {} waited {} ms to push {} bytes into pipe {} of cluster {}, which "
        "holds {} of {} bytes, and nobody popped. {}The consumer (a task of cluster {} with this pipe as PIPE_IN) "
        "pops less than the producer pushes, or never started. Recommendation: pop every byte that is pushed, "
        "or raise pipe_bytes / pipe_timeout_ms.",
        who.task_id, who.kernel_id, who.core, timeout_ns_ / 1000000, bytes, pto2_pipe_index(pipe), who.cluster,
        pushed - p->popped.load(std::memory_order_acquire), capacity_,
        first ? "" : "(The pipe broke earlier.) ", who.cluster);
    return pto::kStalled;
  }
  const uint64_t at = pushed % capacity_;
  const uint64_t first_part = std::min(bytes, capacity_ - at);
  std::memcpy(p->ring.get() + at, src, first_part);
  std::memcpy(p->ring.get(), static_cast<const uint8_t*>(src) + first_part, bytes - first_part);
  p->pushed.store(pushed + bytes, std::memory_order_release);
  p->ec.notify();
  return pto::kOk;
}

int32_t ClusterPipes::pop(const Caller& who, const Tensor* pipe, void* dst, uint64_t bytes, std::string* diagnosis) {
  Pipe* p = find(who, pipe, bytes, "pop", diagnosis);
  if (p == nullptr) return pto::kInvalidArgument;
  const uint64_t popped = p->popped.load(std::memory_order_relaxed);
  bool first = false;
  if (!wait(*p, [&] { return p->pushed.load(std::memory_order_acquire) - popped >= bytes; }, &first)) {
    *diagnosis = fmt::format(
        "STALLED: task {} (kernel {}) on core {} waited {} ms to pop {} bytes from pipe {} of cluster {}, which "
        "holds {}, and nobody pushed. {}Its producer (a task of cluster {} with this pipe as PIPE_OUT) was never "
        "submitted, pushes less than is popped, or waits for something that waits for this task. "
        "Recommendation: give every PIPE_IN a PIPE_OUT task on the same cluster and pipe that pushes at least as "
        "many bytes, or raise pipe_timeout_ms if its producer legitimately takes longer.",
        who.task_id, who.kernel_id, who.core, timeout_ns_ / 1000000, bytes, pto2_pipe_index(pipe), who.cluster,
        p->pushed.load(std::memory_order_acquire) - popped, first ? "" : "(The pipe broke earlier.) ",
        who.cluster);
    return pto::kStalled;
  }
  const uint64_t at = popped % capacity_;
  const uint64_t first_part = std::min(bytes, capacity_ - at);
  std::memcpy(dst, p->ring.get() + at, first_part);
  std::memcpy(static_cast<uint8_t*>(dst) + first_part, p->ring.get(), bytes - first_part);
  p->popped.store(popped + bytes, std::memory_order_release);
  p->ec.notify();
  return pto::kOk;
}

}  // namespace pto2::sim
