#include "tensor_map.h"

#include <algorithm>
#include <bit>

#include <sys/mman.h>

#include "task_ref.h"

namespace pto2 {

namespace {

bool same_grid(const Tensor& a, const Tensor& b) {
  if (a.ndim != b.ndim || pto2_dtype_size(a.dtype) != pto2_dtype_size(b.dtype)) return false;
  for (int32_t d = 0; d < a.ndim; ++d)
    if (a.raw_shape[d] != b.raw_shape[d]) return false;
  return true;
}

bool is_whole_buffer(const Tensor& t) {
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.offsets[d] != 0 || t.shapes[d] != t.raw_shape[d]) return false;
  return true;
}

// [lo, hi) bytes of the buffer that the view's elements span (one pass,
// innermost dimension first, so each stride is one multiply).
void byte_span(const Tensor& t, uint64_t* lo, uint64_t* hi) {
  const uint64_t esz = pto2_dtype_size(t.dtype);
  uint64_t first = 0, last = 0, stride = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    first += static_cast<uint64_t>(t.offsets[d]) * stride;
    last += static_cast<uint64_t>(t.offsets[d] + (t.shapes[d] ? t.shapes[d] - 1 : 0)) * stride;
    stride *= t.raw_shape[d];
  }
  *lo = first * esz;
  *hi = (last + 1) * esz;
}

}  // namespace

Overlap view_overlap(const Tensor& outer, const Tensor& inner) {
  if (pto2_tensor_numel(&outer) == 0 || pto2_tensor_numel(&inner) == 0) return Overlap::kNone;
  if (same_grid(outer, inner)) {
    bool covered = true;
    for (int32_t d = 0; d < outer.ndim; ++d) {
      const uint64_t olo = outer.offsets[d], ohi = olo + outer.shapes[d];
      const uint64_t ilo = inner.offsets[d], ihi = ilo + inner.shapes[d];
      if (olo >= ihi || ilo >= ohi) return Overlap::kNone;  // disjoint in one dimension
      if (ilo < olo || ihi > ohi) covered = false;
    }
    return covered ? Overlap::kCovered : Overlap::kOther;
  }
  // Different shapes over one buffer (a reshape): compare byte spans. Only a
  // view of the whole buffer is known to cover every byte of its span.
  uint64_t olo, ohi, ilo, ihi;
  byte_span(outer, &olo, &ohi);
  byte_span(inner, &ilo, &ihi);
  if (olo >= ihi || ilo >= ohi) return Overlap::kNone;
  return (is_whole_buffer(outer) && olo <= ilo && ihi <= ohi) ? Overlap::kCovered : Overlap::kOther;
}

TensorMap::TensorMap(uint64_t pool_size, uint64_t num_buckets, uint64_t window,
                     std::atomic<uint64_t>* const* last_alive)
    : heads_(num_buckets * kChains, -1), window_mask_(window - 1) {
  void* p = mmap(nullptr, pool_size * sizeof(Entry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    pool_ = static_cast<Entry*>(p);
    pool_size_ = pool_size;
  }
  bucket_shift_ = 64 - static_cast<uint64_t>(std::countr_zero(num_buckets));
  for (int r = 0; r < kMaxRings; ++r) {
    last_alive_[r] = last_alive[r];
    task_entry_head_[r].assign(window, -1);
    cleaned_upto_[r] = last_alive[r]->load(std::memory_order_acquire);
    last_alive_snapshot_[r] = cleaned_upto_[r];
  }
}

TensorMap::~TensorMap() {
  if (pool_ != nullptr) munmap(pool_, pool_size_ * sizeof(Entry));
}

uint32_t TensorMap::bucket_of(uint64_t addr) const {
  if (bucket_shift_ >= 64) return 0;
  return static_cast<uint32_t>((addr * 0x9E3779B97F4A7C15ull) >> bucket_shift_);
}

bool TensorMap::stale(const Entry& e) const { return task_seq(e.task_id) < last_alive_snapshot_[e.ring]; }

void TensorMap::unlink(int32_t idx) {
  Entry& e = pool_[idx];
  if (!e.in_chain) return;
  if (e.prev_in_chain >= 0)
    pool_[e.prev_in_chain].next_in_chain = e.next_in_chain;
  else
    head(e.bucket, e.kind, e.ring) = e.next_in_chain;
  if (e.next_in_chain >= 0) pool_[e.next_in_chain].prev_in_chain = e.prev_in_chain;
  e.in_chain = false;
  --linked_;
}

template <typename Visit>
void TensorMap::walk(uint64_t addr, bool with_readers, Visit&& visit) {
  const uint32_t b = bucket_of(addr);
  const int kinds = with_readers ? 2 : 1;
  for (int kind = 0; kind < kinds; ++kind) {
    for (int ring = 0; ring < kMaxRings; ++ring) {
      int32_t idx = head(b, kind, ring);
      while (idx >= 0) {
        Entry& e = pool_[idx];
        if (stale(e)) {
          // Layer 1: this and everything after it in the chain is older, so
          // stale too. Cut the chain here; the entries stay on their task's
          // chain and go back to the pool at cleanup.
          if (e.prev_in_chain >= 0)
            pool_[e.prev_in_chain].next_in_chain = -1;
          else
            head(b, kind, ring) = -1;
          for (int32_t s = idx; s >= 0; s = pool_[s].next_in_chain) {
            pool_[s].in_chain = false;
            --linked_;
          }
          break;
        }
        const int32_t next = e.next_in_chain;
        visit(idx);
        idx = next;
      }
    }
  }
}

void TensorMap::lookup(const Tensor& t, bool as_writer, uint64_t task_id, std::vector<uint64_t>* tasks) {
  uint64_t lo, hi;
  byte_span(t, &lo, &hi);
  walk(t.addr, as_writer, [&](int32_t idx) {
    const Entry& e = pool_[idx];
    // Disjoint byte spans cannot overlap: rejected without the view.
    if (e.addr != t.addr || lo >= e.span_hi || e.span_lo >= hi) return;
    const Overlap o = view_overlap(t, e.view);
    if (o == Overlap::kNone) return;
    tasks->push_back(e.task_id);
    if (as_writer && o == Overlap::kCovered) unlink(idx);
  });
  if (t.owner != 0) return;  // runtime-allocated: no other base reaches its bytes
  const uint32_t base = bases_.touch(t.addr, pto2_tensor_buffer_bytes(&t), task_id, last_alive_snapshot_);
  const std::vector<uint32_t>& aliases = bases_.at(base).aliases;
  if (aliases.empty()) return;
  // Other bases over some of the same memory: absolute byte ranges decide.
  const uint64_t abs_lo = t.addr + lo, abs_hi = t.addr + hi;
  for (uint32_t a : aliases) {
    const uint64_t other = bases_.at(a).addr;
    walk(other, as_writer, [&](int32_t idx) {
      const Entry& e = pool_[idx];
      if (e.addr == other && abs_lo < other + e.span_hi && other + e.span_lo < abs_hi) tasks->push_back(e.task_id);
    });
  }
}

bool TensorMap::reserve(uint64_t n) {
  if (free_entries() >= n) return true;
  sync(/*force=*/true);
  return free_entries() >= n;
}

void TensorMap::insert(const Tensor& t, uint64_t task_id, Kind kind) {
  int32_t idx;
  if (!free_list_.empty()) {
    idx = free_list_.back();
    free_list_.pop_back();
  } else {
    idx = static_cast<int32_t>(bump_++);
  }
  const uint32_t ring = task_ring(task_id);
  const uint64_t slot = task_seq(task_id) & window_mask_;
  Entry& e = pool_[idx];
  e.addr = t.addr;
  byte_span(t, &e.span_lo, &e.span_hi);
  e.view = t;
  e.task_id = task_id;
  e.bucket = bucket_of(t.addr);
  e.ring = static_cast<uint8_t>(ring);
  e.kind = kind;
  e.in_chain = true;
  int32_t& h = head(e.bucket, kind, ring);
  e.prev_in_chain = -1;
  e.next_in_chain = h;
  if (h >= 0) pool_[h].prev_in_chain = idx;
  h = idx;
  e.next_in_task = task_entry_head_[ring][slot];
  task_entry_head_[ring][slot] = idx;
  ++in_use_[ring];
  ++linked_;
}

void TensorMap::prefetch_next(uint32_t ring, uint64_t seq) const {
  __builtin_prefetch(&task_entry_head_[ring][seq & window_mask_], 1, 3);
  const size_t n = free_list_.size();
  for (size_t k = 0; k < 3; ++k) {
    const Entry* e = nullptr;
    if (k < n)
      e = &pool_[free_list_[n - 1 - k]];
    else if (bump_ + (k - n) < pool_size_)
      e = &pool_[bump_ + (k - n)];
    if (e == nullptr) break;
    __builtin_prefetch(e, 1, 3);
    __builtin_prefetch(reinterpret_cast<const char*>(e) + 64, 1, 3);
  }
}

void TensorMap::cleanup_ring(uint32_t ring, uint64_t upto) {
  for (uint64_t seq = cleaned_upto_[ring]; seq < upto; ++seq) {
    int32_t& h = task_entry_head_[ring][seq & window_mask_];
    for (int32_t idx = h; idx >= 0;) {
      const int32_t next = pool_[idx].next_in_task;
      unlink(idx);
      free_list_.push_back(idx);
      --in_use_[ring];
      idx = next;
    }
    h = -1;
  }
  if (upto > cleaned_upto_[ring]) cleaned_upto_[ring] = upto;
}

void TensorMap::sync(bool force) {
  for (uint32_t r = 0; r < kMaxRings; ++r) {
    const uint64_t la = last_alive_[r]->load(std::memory_order_acquire);
    last_alive_snapshot_[r] = la;
    if (force ? la > cleaned_upto_[r] : la - cleaned_upto_[r] >= cleanup_interval_) cleanup_ring(r, la);
  }
}

void TensorMap::before_slot_reuse(uint32_t ring, uint64_t seq) {
  const uint64_t window = window_mask_ + 1;
  if (seq < window || cleaned_upto_[ring] > seq - window) return;
  // The slot's previous occupant (seq - window) has retired, or the slot could
  // not have been allocated; free its entries before its per-task chain is reused.
  const uint64_t la = last_alive_[ring]->load(std::memory_order_acquire);
  last_alive_snapshot_[ring] = la;
  cleanup_ring(ring, la);
}

}  // namespace pto2
