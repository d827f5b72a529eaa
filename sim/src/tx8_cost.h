// tx8sim's cost model state (docs/tx8sim.md, "Cost model"): the chip's DDR
// bandwidth, shared in time, and when each piece of data was last written
// and read in simulated time. Both are reset when a run starts; both are
// thread-safe (tasks on different engines charge them at once).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pto2/orchestration_api.h"

namespace pto2::sim {

// DDR bandwidth as buckets of simulated time, each able to carry
// bucket_ns x bandwidth bytes. A transfer fills the buckets from its start on
// and ends where its last byte fits, so concurrent transfers share the
// bandwidth whatever order the host runs them in.
class DdrChannel {
 public:
  DdrChannel(double bytes_per_ns, uint32_t latency_ns);
  // A transfer of bytes asked at simulated time t: its end.
  uint64_t transfer(uint64_t t, uint64_t bytes);
  void reset();
  static constexpr uint64_t kBucketNs = 100;

 private:
  const double capacity_;  // bytes per bucket
  const uint32_t latency_ns_;
  std::mutex mu_;
  std::vector<double> used_;  // bytes carried per bucket
};

// Simulated times of the last write and last read of byte spans of buffers,
// so that a task starts after what it reads was written and what it writes
// was read. Spans are a view's first to last byte (a strided view counts as
// its whole span: conservative). The blocks of one block task name the same
// tensors and share them out among themselves, so a task never waits for
// its own blocks: each span keeps the last task's time and the time before
// it. At most kSpansPerBuffer spans per buffer; beyond, they merge into one.
class RegionClocks {
 public:
  // When task may start given the view: reads wait for the last write,
  // writes for the last write and the last read (by other tasks).
  uint64_t ready(const Tensor& view, bool writes, uint64_t task);
  void note(const Tensor& view, bool writes, uint64_t end_ns, uint64_t task);
  void reset();
  static constexpr size_t kSpansPerBuffer = 32;

 private:
  // The last task to write (or read) a span, its time, and the time of the
  // tasks before it.
  struct Use {
    uint64_t task = ~0ull, at = 0, before = 0;
    uint64_t for_task(uint64_t t) const { return t == task ? before : at; }
    void note(uint64_t t, uint64_t end) {
      if (t != task) {
        before = at;
        task = t;
      }
      at = std::max(at, end);
    }
  };
  struct Span {
    uint64_t lo, hi;  // [lo, hi) bytes from the buffer's base
    Use written, read;
  };
  static bool span_of(const Tensor& view, uint64_t* lo, uint64_t* hi);
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<Span>> buffers_;
};

}  // namespace pto2::sim
