#include "pto2/sim/device_memory.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace pto2::sim {

namespace {
constexpr uint64_t kAlign = 1024;
uint64_t rounded(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

DeviceMemory::~DeviceMemory() {
  for (auto& [base, size] : live_) std::free(reinterpret_cast<void*>(base));
}

Status DeviceMemory::alloc(uint64_t bytes, void** ptr) {
  if (ptr == nullptr) return Status::Error(kInvalidArgument, "device alloc: ptr is null");
  *ptr = nullptr;
  if (bytes == 0) return Status::Error(kInvalidArgument, "device alloc of 0 bytes");
  if (bytes > capacity_)
    return Status::Error(kInvalidArgument,
                         fmt::format("device out of memory: requested {} bytes, capacity {}", bytes, capacity_));
  const uint64_t size = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (size > capacity_ - in_use_)
    return Status::Error(kInvalidArgument,
                         fmt::format("device out of memory: requested {} bytes, {} of {} in use ({} free)", bytes,
                                     in_use_, capacity_, capacity_ - in_use_));
  void* p = std::aligned_alloc(kAlign, size);
  if (p == nullptr)
    return Status::Error(kInvalidArgument, fmt::format("device out of memory: host could not back {} bytes", size));
  const auto base = reinterpret_cast<uintptr_t>(p);
  live_[base] = bytes;  // copies are checked against what was asked for
  in_use_ += size;
  freed_.erase(base);
  *ptr = p;
  return Status::Ok();
}

Status DeviceMemory::free(void* ptr) {
  const auto base = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(base);
  if (it == live_.end()) {
    if (freed_.count(base)) return Status::Error(kInvalidArgument, fmt::format("device double free of {:#x}", base));
    return Status::Error(kInvalidArgument,
                         fmt::format("device free of {:#x}: not an address this device allocated", base));
  }
  in_use_ -= rounded(it->second);
  live_.erase(it);
  std::free(ptr);
  freed_.insert(base);
  freed_order_.push_back(base);
  if (freed_order_.size() > kFreedMemory) {
    freed_.erase(freed_order_.front());
    freed_order_.pop_front();
  }
  return Status::Ok();
}

Status DeviceMemory::check_range(const void* p, uint64_t bytes, const char* what) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = live_.upper_bound(addr);
  if (it == live_.begin())
    return Status::Error(kInvalidArgument, fmt::format("{}: {:#x} is not in device memory", what, addr));
  --it;
  if (addr < it->first || bytes > it->second || addr - it->first > it->second - bytes)
    return Status::Error(kInvalidArgument, fmt::format("{}: [{:#x}, +{}) leaves the allocation [{:#x}, +{})", what,
                                                       addr, bytes, it->first, it->second));
  return Status::Ok();
}

// Copies hold the lock so a concurrent free() cannot release the memory
// mid-copy (copies of one device serialize, as on a single DMA engine).
Status DeviceMemory::copy_to_device(void* device_dst, const void* host_src, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status st = check_range(device_dst, bytes, "copy to device"); !st.ok()) return st;
  std::memcpy(device_dst, host_src, bytes);
  return Status::Ok();
}

Status DeviceMemory::copy_from_device(void* host_dst, const void* device_src, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Status st = check_range(device_src, bytes, "copy from device"); !st.ok()) return st;
  std::memcpy(host_dst, device_src, bytes);
  return Status::Ok();
}

uint64_t DeviceMemory::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

uint64_t DeviceMemory::allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

}  // namespace pto2::sim
