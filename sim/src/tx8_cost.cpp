#include "tx8_cost.h"

#include <algorithm>
#include <cmath>

namespace pto2::sim {

namespace {
uint64_t bucket_length(double bytes_per_ns) {
  const double ns = std::ceil(DdrChannel::kMinBucketBytes / bytes_per_ns);
  return std::max<uint64_t>(DdrChannel::kBucketNs, static_cast<uint64_t>(ns));
}
}  // namespace

DdrChannel::DdrChannel(double bytes_per_ns, uint32_t latency_ns)
    : bucket_ns_(bucket_length(bytes_per_ns)), capacity_(bytes_per_ns * double(bucket_ns_)), latency_ns_(latency_ns) {}

void DdrChannel::reset() {
  std::lock_guard<std::mutex> g(mu_);
  used_.clear();
}

size_t DdrChannel::buckets_held() {
  std::lock_guard<std::mutex> g(mu_);
  return used_.size();
}

uint64_t DdrChannel::transfer(uint64_t t, uint64_t bytes) {
  t += latency_ns_;
  if (bytes == 0) return t;
  std::lock_guard<std::mutex> g(mu_);
  double left = double(bytes);
  uint64_t b = t / bucket_ns_;
  // The first bucket only after t: the part of it before t is gone.
  double from = double(t % bucket_ns_) / double(bucket_ns_);
  for (;; ++b, from = 0) {
    double& used = used_[b];
    const double room = std::min(capacity_ - used, capacity_ * (1.0 - from));
    if (room <= 0) continue;
    const double take = std::min(left, room);
    used += take;
    left -= take;
    if (left > 0) continue;
    // Its last byte: after its own bytes from its start, and no earlier
    // than the bytes the bucket now carries.
    const double frac = std::min(1.0, std::max(from + take / capacity_, used / capacity_));
    return std::max(t, static_cast<uint64_t>(std::ceil(double(b * bucket_ns_) + double(bucket_ns_) * frac)));
  }
}

bool view_span(const Tensor& v, uint64_t* lo, uint64_t* hi) {
  if (v.addr == 0 || pto2_is_pipe_tensor(&v)) return false;
  const uint64_t es = pto2_dtype_size(v.dtype);
  uint64_t last = 0;
  for (int32_t d = 0; d < v.ndim && d < PTO2_MAX_DIMS; ++d) {
    if (v.shapes[d] == 0) return false;
    last += uint64_t(v.shapes[d] - 1) * pto2_tensor_stride(&v, d);
  }
  *lo = pto2_tensor_start(&v) * es;
  *hi = *lo + (last + 1) * es;
  return true;
}

uint64_t RegionClocks::ready(const Tensor& view, bool writes, uint64_t call) {
  uint64_t lo, hi;
  if (!view_span(view, &lo, &hi)) return 0;
  std::lock_guard<std::mutex> g(mu_);
  auto it = buffers_.find(view.addr);
  if (it == buffers_.end()) return 0;
  uint64_t t = 0;
  for (const Span& s : it->second) {
    if (s.hi <= lo || hi <= s.lo) continue;
    t = std::max(t, s.written.for_call(call));
    if (writes) t = std::max(t, s.read.for_call(call));
  }
  return t;
}

void RegionClocks::note(const Tensor& view, bool writes, uint64_t end_ns, uint64_t call) {
  uint64_t lo, hi;
  if (!view_span(view, &lo, &hi)) return;
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Span>& spans = buffers_[view.addr];
  for (Span& s : spans) {
    if (s.lo != lo || s.hi != hi) continue;
    (writes ? s.written : s.read).note(call, end_ns);
    return;
  }
  if (spans.size() >= kSpansPerBuffer) {
    // One span for all, its times the latest (no call's own: conservative).
    Span all{~0ull, 0, {}, {}};
    for (const Span& s : spans) {
      all.lo = std::min(all.lo, s.lo);
      all.hi = std::max(all.hi, s.hi);
      all.written.at = std::max(all.written.at, s.written.at);
      all.read.at = std::max(all.read.at, s.read.at);
    }
    all.written.before = all.written.at;
    all.read.before = all.read.at;
    spans.assign(1, all);
  }
  Span fresh{lo, hi, {}, {}};
  (writes ? fresh.written : fresh.read).note(call, end_ns);
  spans.push_back(fresh);
}

void RegionClocks::reset() {
  std::lock_guard<std::mutex> g(mu_);
  buffers_.clear();
}

}  // namespace pto2::sim
