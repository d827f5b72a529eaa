#include "shared_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "pto/worker.h"

namespace pto {

Status SharedMapping::map(uint64_t bytes, const char* what) {
  reset();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return Status::Error(kWorkerHeapExhausted, std::string("mapping ") + std::to_string(bytes) + " bytes for " + what +
                                                   ": " + errno_text(errno));
  base_ = static_cast<uint8_t*>(p);
  bytes_ = bytes;
  add_shared_region(base_, bytes_);
  return Status::Ok();
}

void SharedMapping::reset() {
  if (!base_) return;
  remove_shared_region(base_);
  munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

namespace {
struct Regions {
  std::mutex mu;
  std::map<uint64_t, uint64_t> by_base;  // base -> bytes
};
Regions& regions() {
  static Regions* r = new Regions;  // never destroyed: children _exit without running destructors
  return *r;
}
}  // namespace

void add_shared_region(const void* base, uint64_t bytes) {
  std::lock_guard<std::mutex> g(regions().mu);
  regions().by_base[reinterpret_cast<uint64_t>(base)] = bytes;
}
void remove_shared_region(const void* base) {
  std::lock_guard<std::mutex> g(regions().mu);
  regions().by_base.erase(reinterpret_cast<uint64_t>(base));
}
std::unique_lock<std::mutex> lock_shared_regions() { return std::unique_lock<std::mutex>(regions().mu); }

bool in_shared_region(uint64_t addr, uint64_t bytes) {
  std::lock_guard<std::mutex> g(regions().mu);
  auto& m = regions().by_base;
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return false;
  --it;
  return addr >= it->first && addr + bytes >= addr && addr + bytes <= it->first + it->second;
}

Status register_shared_memory(void* base, uint64_t bytes) {
  if (!base || bytes == 0)
    return Status::Error(kWorkerInvalidArgument, "register_shared_memory: base must be non-null and bytes > 0");
  add_shared_region(base, bytes);
  return Status::Ok();
}

L3HeapRing::Alloc L3HeapRing::alloc(uint64_t bytes, uint64_t* end_position, uint8_t** ptr) {
  bytes = (bytes + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  if (bytes == 0) bytes = kHeapAlign;
  if (bytes > size_) return Alloc::kTooLarge;
  uint64_t start = top_;
  const uint64_t off = start % size_;
  if (off + bytes > size_) start += size_ - off;  // never straddle the end
  if (start + bytes - tail_ > size_) return Alloc::kFull;
  top_ = start + bytes;
  *end_position = top_;
  *ptr = base_ + start % size_;
  return Alloc::kOk;
}

void Arena::attach(uint8_t* base, uint64_t size) {
  std::lock_guard<std::mutex> g(mu_);
  base_ = base;
  free_.clear();
  used_.clear();
  in_use_ = 0;
  if (size) free_[0] = size;
}

Status Arena::alloc(uint64_t bytes, uint8_t** ptr) {
  const uint64_t need = (bytes + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > need) free_[off + need] = len - need;
    used_[off] = need;
    in_use_ += need;
    *ptr = base_ + off;
    return Status::Ok();
  }
  return Status::Error(kWorkerHeapExhausted, "buffer arena has no free block of " + std::to_string(need) + " bytes (" +
                                                 std::to_string(in_use_) + " bytes in use)");
}

Status Arena::free(const void* ptr) {
  std::lock_guard<std::mutex> g(mu_);
  const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(ptr) - base_);
  auto it = used_.find(off);
  if (!base_ || it == used_.end())
    return Status::Error(
        kWorkerInvalidArgument, "free: 0x" + [&] {
          char b[32];
          snprintf(b, sizeof b, "%llx", (unsigned long long)reinterpret_cast<uintptr_t>(ptr));
          return std::string(b);
        }() + " is not a live buffer of this Worker's arena");
  const uint64_t freed = it->second;
  uint64_t len = freed;
  in_use_ -= len;
  used_.erase(it);
  // Coalesce with the neighbours.
  uint64_t start = off;
  auto next = free_.lower_bound(off);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + freed) {
    len += next->second;
    free_.erase(next);
  }
  free_[start] = len;
  return Status::Ok();
}

uint64_t Arena::bytes_in_use() const {
  std::lock_guard<std::mutex> g(mu_);
  return in_use_;
}

}  // namespace pto
