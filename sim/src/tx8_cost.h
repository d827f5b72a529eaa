// tx8sim's cost model state (docs/tx8sim.md, "Cost model"): the chip's DDR
// bandwidth, shared in time, and when each piece of data was last written
// and read in simulated time. Both are reset when a run starts; both are
// thread-safe (tasks on different engines charge them at once).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "pto2/orchestration_api.h"

namespace pto2::sim {

// A view's bytes from its first to its last element, relative to its
// buffer's base (a strided view counts as its whole span). False for an
// empty view, a pipe or a tensor without storage.
bool view_span(const Tensor& view, uint64_t* lo, uint64_t* hi);

// DDR bandwidth as buckets of simulated time, each able to carry
// bucket_ns() x bandwidth bytes. A transfer takes what each bucket has left
// from its start on (in the first bucket, at most the part after its start)
// and ends where its last byte fits, so concurrent transfers share the
// bandwidth. Only touched buckets are kept. A bucket is kBucketNs long, or
// longer where that would carry less than kMinBucketBytes: a transfer walks
// (and keeps) one bucket per kMinBucketBytes at most - at 0.001 GB/s a
// 100 ns bucket held a tenth of a byte, and a 16 MiB load walked 1.7e8 of
// them under the channel's lock.
class DdrChannel {
 public:
  DdrChannel(double bytes_per_ns, uint32_t latency_ns);
  // A transfer of bytes asked at simulated time t: its end.
  uint64_t transfer(uint64_t t, uint64_t bytes);
  void reset();
  static constexpr uint64_t kBucketNs = 100;
  static constexpr double kMinBucketBytes = 4096;
  uint64_t bucket_ns() const { return bucket_ns_; }
  size_t buckets_held();

 private:
  const uint64_t bucket_ns_;
  const double capacity_;  // bytes per bucket
  const uint32_t latency_ns_;
  std::mutex mu_;
  std::map<uint64_t, double> used_;  // bytes carried, by bucket
};

// Simulated times of the last write and last read of byte spans of buffers,
// so that a task starts after what it reads was written and what it writes
// was read. Spans are a view's first to last byte (a strided view counts as
// its whole span: conservative). The blocks of one SPMD call name the same
// tensors and share them out among themselves, so a call never waits for
// its own blocks: each span keeps the last call's time and the time before
// it. At most kSpansPerBuffer spans per buffer; beyond, they merge into one
// (conservative: a later task then waits for all of them).
class RegionClocks {
 public:
  // When a task of SPMD call `call` may start given the view: reads wait
  // for the last write, writes for the last write and the last read (by
  // other calls).
  uint64_t ready(const Tensor& view, bool writes, uint64_t call);
  void note(const Tensor& view, bool writes, uint64_t end_ns, uint64_t call);
  void reset();
  static constexpr size_t kSpansPerBuffer = 128;

 private:
  // The last call to write (or read) a span, its time, and the time of the
  // calls before it.
  struct Use {
    uint64_t call = ~0ull, at = 0, before = 0;
    uint64_t for_call(uint64_t c) const { return c == call ? before : at; }
    void note(uint64_t c, uint64_t end) {
      if (c != call) {
        before = at;
        call = c;
      }
      at = std::max(at, end);
    }
  };
  struct Span {
    uint64_t lo, hi;  // [lo, hi) bytes from the buffer's base
    Use written, read;
  };
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<Span>> buffers_;
};

}  // namespace pto2::sim
