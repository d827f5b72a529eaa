#include "capture.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <queue>

#include <fmt/format.h>

namespace pto2 {

namespace {

// Everything of a tensor but where its buffer is.
bool same_geometry(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.ndim == b.ndim && std::memcmp(a.raw_shape, b.raw_shape, sizeof(a.raw_shape)) == 0 &&
         std::memcmp(a.offsets, b.offsets, sizeof(a.offsets)) == 0 &&
         std::memcmp(a.shapes, b.shapes, sizeof(a.shapes)) == 0;
}

std::string dims(const uint32_t* d, int32_t n) {
  std::string s = "[";
  for (int32_t i = 0; i < n && i < PTO2_MAX_DIMS; ++i) s += fmt::format("{}{}", i ? "," : "", d[i]);
  return s + "]";
}

std::string describe(const Tensor& t) {
  return fmt::format("dtype {} raw_shape {} offsets {} shapes {}", t.dtype, dims(t.raw_shape, t.ndim),
                     dims(t.offsets, t.ndim), dims(t.shapes, t.ndim));
}

// The bytes from the buffer's base that a view's elements span, [lo, hi).
void view_span(const Tensor& v, uint64_t* lo, uint64_t* hi) {
  const uint64_t esz = pto2_dtype_size(v.dtype);
  uint64_t first = 0, last = 0;
  for (int32_t d = 0; d < v.ndim && d < PTO2_MAX_DIMS; ++d) {
    if (v.shapes[d] == 0) {
      *lo = *hi = 0;
      return;
    }
    const uint64_t stride = pto2_tensor_stride(&v, d);
    first += uint64_t(v.offsets[d]) * stride;
    last += uint64_t(v.offsets[d] + v.shapes[d] - 1) * stride;
  }
  *lo = first * esz;
  *hi = (last + 1) * esz;
}

}  // namespace

bool buffers_overlap(const Tensor& a, const Tensor& b) {
  const uint64_t ea = a.addr + pto2_tensor_buffer_bytes(&a), eb = b.addr + pto2_tensor_buffer_bytes(&b);
  return a.addr < eb && b.addr < ea;
}

CapturedRegion::CapturedRegion(uint64_t k, Tensor* const* b, int32_t n) : key(k) {
  for (int32_t i = 0; i < n; ++i) bindings.push_back(*b[i]);
  binding_written.assign(static_cast<size_t>(n), 0);
  accesses.assign(static_cast<size_t>(n), {});
  overlaps.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
  deltas.assign(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t j = 0; j < n; ++j) {
      overlaps[i * n + j] = i != j && buffers_overlap(*b[i], *b[j]);
      if (overlaps[i * n + j]) deltas[i * n + j] = static_cast<int64_t>(b[j]->addr - b[i]->addr);
    }
  }
}

std::string CapturedRegion::mismatch(Tensor* const* b, int32_t n) const {
  if (static_cast<size_t>(n) != bindings.size())
    return fmt::format("{} bindings, recorded with {}", n, bindings.size());
  for (int32_t i = 0; i < n; ++i) {
    if (!same_geometry(*b[i], bindings[i]))
      return fmt::format("binding {} is {}, recorded as {}", i, describe(*b[i]), describe(bindings[i]));
  }
  // The recorded edges between tasks on different bindings came from how
  // the bindings overlapped then; a replay is exact only if they still
  // overlap the same way: not at all, or at the same distance.
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t j = i + 1; j < n; ++j) {
      const bool now = buffers_overlap(*b[i], *b[j]), then = overlaps[i * n + j] != 0;
      if (now != then)
        return fmt::format("bindings {} and {} {} overlap, and did {}when recorded", i, j, then ? "no longer" : "now",
                           then ? "" : "not ");
      const auto delta = static_cast<int64_t>(b[j]->addr - b[i]->addr);
      if (now && delta != deltas[i * n + j])
        return fmt::format("bindings {} and {} overlap {} bytes apart, {} when recorded", i, j, delta,
                           deltas[i * n + j]);
    }
  }
  return {};
}

int32_t CapturedRegion::kernel_slot(int32_t id, int32_t worker_type) {
  for (size_t i = 0; i < kernels.size(); ++i)
    if (kernels[i].id == id && kernels[i].worker_type == worker_type) return static_cast<int32_t>(i);
  kernels.push_back({id, worker_type});
  return static_cast<int32_t>(kernels.size() - 1);
}

namespace {

using Access = CapturedRegion::Access;

// Appends the accesses of `list` that conflict with [lo, hi) - a writer with
// anything, a reader with writers - shifted by `shift` bytes into the
// caller's coordinates.
void conflicts(const std::vector<Access>& list, int64_t shift, uint32_t task, uint64_t lo, uint64_t hi, bool writer,
               std::vector<uint32_t>* producers) {
  // Signed: an access of a binding that starts below the caller's base (a
  // writer of all of A, read through B inside it) starts below 0 here.
  const auto slo = static_cast<int64_t>(lo), shi = static_cast<int64_t>(hi);
  for (const Access& a : list) {
    const int64_t alo = static_cast<int64_t>(a.lo) + shift, ahi = static_cast<int64_t>(a.hi) + shift;
    if (alo < shi && slo < ahi && (writer || a.writer) && a.task != task) producers->push_back(a.task);
  }
}

// Orders an access of one buffer against the earlier ones, then records it.
// A writer's access drops the older ones it covers: later accesses are
// ordered through it.
void order_access(std::vector<Access>& list, uint32_t task, uint64_t lo, uint64_t hi, bool writer,
                  std::vector<uint32_t>* producers) {
  conflicts(list, 0, task, lo, hi, writer, producers);
  if (writer)
    list.erase(std::remove_if(list.begin(), list.end(), [&](const Access& a) { return lo <= a.lo && a.hi <= hi; }),
               list.end());
  list.push_back({task, lo, hi, writer});
}

}  // namespace

void CapturedRegion::binding_edges(uint32_t binding, uint32_t task, const Tensor& view, bool writer,
                                   std::vector<uint32_t>* producers) {
  uint64_t lo = 0, hi = 0;
  view_span(view, &lo, &hi);
  if (lo == hi) return;
  const size_t n = bindings.size();
  for (size_t j = 0; j < n; ++j)  // an access of binding j at x is at x + (base j - base b) from b's base
    if (overlaps[binding * n + j]) conflicts(accesses[j], deltas[binding * n + j], task, lo, hi, writer, producers);
  order_access(accesses[binding], task, lo, hi, writer, producers);
}

void CapturedRegion::internal_edges(uint32_t owner, uint32_t task, uint64_t offset, const Tensor& view, bool writer,
                                    std::vector<uint32_t>* producers) {
  uint64_t lo = 0, hi = 0;
  view_span(view, &lo, &hi);
  if (lo == hi) return;
  order_access(internal_accesses[owner], task, offset + lo, offset + hi, writer, producers);
}

void CapturedRegion::finalize() {
  // Entry: a task that touches a binding waits for the entry task (which
  // waits for everything outside the region that touched the bindings)
  // unless one of its producers already does, directly or through its own
  // producers. Tasks are in submission order, so producers come first.
  const size_t n = tasks.size();
  for (CapturedTask& t : tasks) t.num_consumers = 0;
  for (const CapturedTask& t : tasks)
    for (uint32_t k = 0; k < t.num_producers; ++k) ++tasks[producers[t.first_producer + k]].num_consumers;
  std::vector<uint8_t> reached(n, 0);
  for (size_t i = 0; i < n; ++i) {
    CapturedTask& t = tasks[i];
    bool via = false;
    for (uint32_t k = 0; k < t.num_producers && !via; ++k) via = reached[producers[t.first_producer + k]] != 0;
    t.after_entry = t.touches_binding && !via;
    reached[i] = t.after_entry || via;
  }
  // Exit: the exit task (which everything after the region that touches a
  // binding finds in the TensorMap) waits for every binding-touching task,
  // through one of its consumers where it can.
  std::vector<uint8_t> feeds(n, 0);  // some consumer is, or leads to, an exit edge
  std::vector<uint8_t> exit_edge(n, 0);
  for (size_t i = n; i-- > 0;) {
    exit_edge[i] = tasks[i].touches_binding && !feeds[i];
    if (exit_edge[i] || feeds[i]) {
      const CapturedTask& t = tasks[i];
      for (uint32_t k = 0; k < t.num_producers; ++k) feeds[producers[t.first_producer + k]] = 1;
    }
  }
  exit_deps.clear();
  for (size_t i = 0; i < n; ++i)
    if (exit_edge[i]) exit_deps.push_back(static_cast<uint32_t>(i));
  measure_ring_needs();
  index_of.clear();
  packed_base.clear();
  packed_base.shrink_to_fit();
  accesses.clear();
  accesses.shrink_to_fit();
  internal_accesses.clear();
}

void CapturedRegion::measure_ring_needs() {
  const size_t n = tasks.size();
  // Each task's scope depth in the region, and the last task naming it as a producer.
  std::vector<uint32_t> depth(n), last_consumer(n, 0);
  uint32_t d = 0, depths = 1;
  size_t ev = 0;
  for (size_t i = 0; i < n; ++i) {
    for (; ev < scopes.size() && scopes[ev].before_task == i; ++ev) d = scopes[ev].begin ? d + 1 : d - 1;
    depth[i] = d;
    depths = std::max(depths, d + 1);
    const CapturedTask& t = tasks[i];
    for (uint32_t k = 0; k < t.num_producers; ++k) {
      uint32_t& c = last_consumer[producers[t.first_producer + k]];
      c = std::max(c, static_cast<uint32_t>(i));
    }
  }
  // One sweep per grouping of depths into rings: ring_of(depth) -> group.
  auto sweep = [&](auto ring_of, size_t groups) {
    std::vector<RingNeed> need(groups);
    struct Group {
      std::vector<uint32_t> tasks;                                                // in order
      std::vector<uint64_t> bytes{0}, deps{0};                                    // prefix sums over `tasks`
      std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> held;  // positions in `tasks`
    };
    std::vector<Group> g(groups);
    for (size_t i = 0; i < n; ++i) {
      const size_t gi = ring_of(depth[i]);
      Group& r = g[gi];
      const auto pos = static_cast<uint32_t>(r.tasks.size());
      while (!r.held.empty() && last_consumer[r.tasks[r.held.top()]] < i) r.held.pop();
      const uint32_t oldest = r.held.empty() ? pos : r.held.top();
      const CapturedTask& t = tasks[i];
      const uint64_t own_deps = 2 * (uint64_t{t.num_producers} + (t.after_entry ? 1 : 0));
      RingNeed& m = need[gi];
      m.slots = std::max<uint64_t>(m.slots, pos - oldest + 1);
      m.bytes = std::max(m.bytes, r.bytes[pos] - r.bytes[oldest] + t.out_bytes);
      m.deps = std::max(m.deps, r.deps[pos] - r.deps[oldest] + own_deps);
      m.held = std::max(m.held, static_cast<uint32_t>(r.held.size()));
      r.tasks.push_back(static_cast<uint32_t>(i));
      r.bytes.push_back(r.bytes[pos] + t.out_bytes);
      r.deps.push_back(r.deps[pos] + own_deps);
      if (last_consumer[i] > i) r.held.push(pos);
    }
    return need;
  };
  separate = sweep([](uint32_t dd) { return size_t{dd}; }, depths);
  merged.assign(depths + 1, RingNeed{});
  for (uint32_t m = 0; m < depths; ++m)
    merged[m] = sweep([m](uint32_t dd) { return dd >= m ? size_t{1} : size_t{0}; }, 2)[1];
}

std::string CapturedRegion::first_difference(const CapturedRegion& o) const {
  if (tasks.size() != o.tasks.size())
    return fmt::format("it submitted {} tasks, recorded {}", o.tasks.size(), tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    const CapturedTask &a = tasks[i], &b = o.tasks[i];
    if (a.kernel_id != b.kernel_id || a.worker_type != b.worker_type || a.num_params != b.num_params ||
        a.block_dim != b.block_dim || a.block_base != b.block_base || a.block_num != b.block_num)
      return fmt::format(
          "task {} is kernel {} (worker type {}, {} params, block_dim {}), recorded kernel {} (worker "
          "type {}, {} params, block_dim {})",
          i, b.kernel_id, b.worker_type, b.num_params, b.block_dim, a.kernel_id, a.worker_type, a.num_params,
          a.block_dim);
    for (int32_t k = 0; k < a.num_params; ++k) {
      const CapturedParam &p = params[a.first_param + k], &q = o.params[b.first_param + k];
      if (p.kind != q.kind) return fmt::format("task {} param {} has kind {}, recorded {}", i, k, q.kind, p.kind);
      if (p.kind == PTO_PARAM_SCALAR) {
        if (p.scalar != q.scalar)
          return fmt::format("task {} param {} is scalar {:#x}, recorded {:#x}", i, k, q.scalar, p.scalar);
        continue;
      }
      if (p.source != q.source || p.ref != q.ref || p.offset != q.offset || !same_geometry(p.view, q.view))
        return fmt::format("task {} param {} is {}, recorded {}", i, k, describe(q.view), describe(p.view));
    }
    if (a.num_producers != b.num_producers ||
        !std::equal(producers.begin() + a.first_producer, producers.begin() + a.first_producer + a.num_producers,
                    o.producers.begin() + b.first_producer))
      return fmt::format("task {} depends on other tasks of the region than recorded", i);
  }
  if (scopes.size() != o.scopes.size()) return "its scopes differ";
  for (size_t i = 0; i < scopes.size(); ++i)
    if (scopes[i].before_task != o.scopes[i].before_task || scopes[i].begin != o.scopes[i].begin)
      return "its scopes differ";
  return {};
}

CapturedRegion* CaptureCache::find(uint64_t key) {
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->get();
}

bool CaptureCache::insert(std::unique_ptr<CapturedRegion> region) {
  erase(region->key);
  const uint64_t n = std::max<uint64_t>(region->tasks.size(), 1);
  if (n > budget_) return false;
  while (held_ + n > budget_ && !lru_.empty()) erase(lru_.back()->key);
  held_ += n;
  const uint64_t key = region->key;
  lru_.push_front(std::move(region));
  map_[key] = lru_.begin();
  return true;
}

void CaptureCache::erase(uint64_t key) {
  auto it = map_.find(key);
  if (it == map_.end()) return;
  held_ -= std::max<uint64_t>((*it->second)->tasks.size(), 1);
  lru_.erase(it->second);
  map_.erase(it);
}

}  // namespace pto2
