// LatencyHistogram (pto/worker.h): the log-linear buckets behind
// Worker::stats and the daemon's latency metrics.
#include <bit>

#include "pto/worker.h"

namespace pto {

// Bucket 0 holds [0, 64) ns; then four buckets per power of two.
int LatencyHistogram::bucket_of(uint64_t ns) {
  if (ns < 64) return 0;
  const int e = 63 - std::countl_zero(ns);  // 2^e <= ns < 2^(e+1), e >= 6
  const int sub = static_cast<int>((ns >> (e - 2)) & 3);
  const int b = (e - 6) * 4 + sub + 1;
  return b < kBuckets ? b : kBuckets - 1;
}

uint64_t LatencyHistogram::bucket_upper_ns(int b) {
  if (b <= 0) return 64;
  const int e = (b - 1) / 4 + 6, sub = (b - 1) % 4;
  return (uint64_t(1) << e) + (uint64_t(sub + 1) << (e - 2));
}

void LatencyHistogram::record(uint64_t ns) {
  ++counts[bucket_of(ns)];
  ++count;
  sum_ns += ns;
}

uint64_t LatencyHistogram::percentile_ns(double q) const {
  if (count == 0) return 0;
  const uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(count - 1)) + 1;
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts[b];
    if (seen >= rank) return bucket_upper_ns(b);
  }
  return bucket_upper_ns(kBuckets - 1);
}

}  // namespace pto
