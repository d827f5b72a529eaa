// Simulated global memory (GM) of one chip: a tracked allocator plus the
// host<->device copies of a real chip's host API (rtMalloc / rtFree /
// rtMemcpy), so host code written for a chip runs unchanged on the simulator.
// Errors (out of memory, double free, a pointer GM never returned, a copy that
// leaves its allocation) are returned as Status with the values named.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include "pto2/errors.h"

namespace pto2::sim {

class DeviceMemory {
 public:
  explicit DeviceMemory(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // 1024-byte aligned (the runtime's output alignment); bytes > 0.
  Status alloc(uint64_t bytes, void** ptr);
  Status free(void* ptr);
  Status copy_to_device(void* device_dst, const void* host_src, uint64_t bytes);
  Status copy_from_device(void* host_dst, const void* device_src, uint64_t bytes);

  uint64_t capacity() const { return capacity_; }
  uint64_t bytes_in_use() const;
  uint64_t allocations() const;

 private:
  // The live allocation containing [p, p+bytes), or an error naming why not.
  Status check_range(const void* p, uint64_t bytes, const char* what) const;

  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::map<uintptr_t, uint64_t> live_;  // base -> bytes requested (capacity counts them rounded to 1024)
  // Recently freed bases (the last kFreedMemory), to tell a double free from
  // a pointer GM never returned.
  static constexpr size_t kFreedMemory = 4096;
  std::set<uintptr_t> freed_;
  std::deque<uintptr_t> freed_order_;
  uint64_t in_use_ = 0;
};

}  // namespace pto2::sim
