// The clusters' local pipes (docs/sim.md, "Pipes"): per cluster
// PTO2_PIPES_PER_CLUSTER bounded byte FIFOs between its cores, the simulated
// counterpart of the cube -> vector path kernels reach with TPUSH / TPOP.
//
// One producer and one consumer at a time: the runtime orders the users of
// each end (docs/runtime.md §15), so a pipe is a single-producer,
// single-consumer ring of bytes. push waits for room and pop for data — spin,
// then park on the pipe's EventCount — up to the timeout. A wait that runs
// out breaks the pipe: the call returns STALLED with a diagnosis for the run,
// and every later call on that pipe fails at once, so a kernel stuck on a
// pipe nobody serves ends instead of hanging the chip.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pto/base/event_count.h"
#include "pto2/orchestration_api.h"

namespace pto2::sim {

class ClusterPipes {
 public:
  ClusterPipes(int clusters, uint64_t capacity_bytes, uint32_t timeout_ms, uint32_t spin_us);

  // Who calls: the diagnosis names them.
  struct Caller {
    int core;
    int cluster;
    uint64_t task_id;
    int32_t kernel_id;
  };
  // 0, or a PTO2 error code with *diagnosis saying why (INVALID_ARGUMENT: not
  // a pipe of the caller's cluster, or more bytes than the pipe holds;
  // STALLED: the wait ran out, or the pipe broke earlier).
  int32_t push(const Caller& who, const Tensor* pipe, const void* src, uint64_t bytes, std::string* diagnosis);
  int32_t pop(const Caller& who, const Tensor* pipe, void* dst, uint64_t bytes, std::string* diagnosis);

  uint64_t capacity() const { return capacity_; }
  // Between runs (no kernel running): empties every pipe and mends broken ones.
  void reset();
  // The same for one cluster's pipes, when no kernel of it is running.
  void reset_cluster(int cluster);
  // At shutdown: breaks every pipe so no kernel waits on one any longer.
  void break_all();
  // Bytes pushed and not yet popped (tests).
  uint64_t queued(int cluster, int pipe) const;

 private:
  struct Pipe {
    std::unique_ptr<uint8_t[]> ring;
    alignas(64) std::atomic<uint64_t> pushed{0};  // bytes ever pushed (the producer's)
    alignas(64) std::atomic<uint64_t> popped{0};  // bytes ever popped (the consumer's)
    std::atomic<bool> broken{false};
    pto::EventCount ec;  // both ends park here
  };
  // The caller's pipe, or null with *diagnosis set.
  Pipe* find(const Caller& who, const Tensor* pipe, uint64_t bytes, const char* op, std::string* diagnosis);
  // Waits until ready() or the timeout. On a timeout (or a pipe broken
  // earlier) breaks the pipe and returns false; *broke_it says whether this
  // call broke it.
  template <typename Ready>
  bool wait(Pipe& p, Ready&& ready, bool* broke_it);

  uint64_t capacity_;
  uint64_t timeout_ns_;
  uint64_t spin_ns_;
  std::vector<std::unique_ptr<Pipe>> pipes_;
};

}  // namespace pto2::sim
