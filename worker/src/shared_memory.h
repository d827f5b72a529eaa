// Memory that parent and children share (docs/worker.md, "Scopes and the shared heap").
//
//  * SharedMapping: a MAP_SHARED | MAP_NORESERVE mapping, made before fork
//    so every child sees it at the same address; pages are backed lazily.
//    Anonymous, or a file (whose bytes then outlive the process: the
//    daemon's arena, re-attached after a restart).
//  * The process-wide list of shared regions that tensors may live in. Fork
//    copies it, so a grandchild knows its grandparent's regions.
//  * L3HeapRing: the L3 heap ring of one scope depth. Virtual positions grow
//    forever; an allocation never straddles the end (it restarts at offset 0
//    and the skipped tail counts as used); allocations are freed in FIFO
//    order when their owner is consumed.
//  * Arena: first-fit allocator over a mapping for buffers that live until
//    freed (Worker::alloc).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pto/base/status.h"

namespace pto {

class SharedMapping {
 public:
  SharedMapping() = default;
  ~SharedMapping() { reset(); }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  // `confined`: a mapping for one forked process only (a runner's channel):
  // not a shared region (no tensor may lie in it), and every other process
  // engine_fork() makes unmaps it at once.
  Status map(uint64_t bytes, const char* what, bool confined = false);
  // The file (created 0600 if absent) sized to `bytes` and mapped. Its
  // blocks are reserved per range with reserve() (so a full disk is an
  // error, never a SIGBUS on a write fault) and returned with release(),
  // which says whether the range now reads as zeros (false: the file system
  // cannot punch holes, its bytes are still there).
  Status map_file(const std::string& path, uint64_t bytes, const char* what);
  Status reserve(uint64_t offset, uint64_t bytes);
  bool release(uint64_t offset, uint64_t bytes);
  // Writes the range's dirty pages to the file and waits (msync).
  Status sync(uint64_t offset, uint64_t bytes);
  // Copies the pieces, one after another, from offset on, into the mapping.
  Status write(uint64_t offset, const std::vector<iovec>& pieces);
  bool file_backed() const { return fd_ >= 0; }
  void reset();
  uint8_t* data() const { return base_; }
  uint64_t size() const { return bytes_; }

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  bool confined_ = false;  // listed as confined (map(..., true))
  int fd_ = -1;
  std::string path_;
};

void add_shared_region(const void* base, uint64_t bytes);
void remove_shared_region(const void* base);
// The caller holds lock_shared_regions() (SharedMapping maps or unmaps under it).
void add_confined_region_locked(const std::unique_lock<std::mutex>& held, const void* base, uint64_t bytes);
void remove_confined_region_locked(const std::unique_lock<std::mutex>& held, const void* base);
// True when [addr, addr+bytes) lies inside one registered region.
bool in_shared_region(uint64_t addr, uint64_t bytes);
// Held across fork() so that a child never inherits the list's lock taken.
std::unique_lock<std::mutex> lock_shared_regions();
// The confined mappings (SharedMapping::map(..., true)) but `keep`, as
// (base, bytes); the caller holds lock_shared_regions().
std::vector<std::pair<uint64_t, uint64_t>> confined_regions_but(const std::unique_lock<std::mutex>& held,
                                                                const void* keep);

inline constexpr uint64_t kHeapAlign = 64;

class L3HeapRing {
 public:
  void attach(uint8_t* base, uint64_t size) {
    base_ = base;
    size_ = size;
    top_ = tail_ = 0;
  }
  // kOk with *offset, kFull (wait for reclamation) or kTooLarge.
  enum class Alloc { kOk, kFull, kTooLarge };
  Alloc alloc(uint64_t bytes, uint64_t* end_position, uint8_t** ptr);
  // Frees everything up to end_position (FIFO).
  void release_to(uint64_t end_position) { tail_ = end_position; }
  void reset() { top_ = tail_ = 0; }
  uint64_t used() const { return top_ - tail_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t top_ = 0, tail_ = 0;
};

class Arena {
 public:
  void attach(uint8_t* base, uint64_t size);
  Status alloc(uint64_t bytes, uint8_t** ptr);
  // Exactly [offset, offset + bytes) (rounded up to kHeapAlign), which must
  // be free: a buffer re-attached at the place it had before a restart.
  Status alloc_at(uint64_t offset, uint64_t bytes, uint8_t** ptr);
  // The length a live buffer holds (0 if ptr is not one).
  uint64_t length_of(const void* ptr) const;
  Status free(const void* ptr);
  uint64_t bytes_in_use() const;

 private:
  mutable std::mutex mu_;
  uint8_t* base_ = nullptr;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
  std::map<uint64_t, uint64_t> used_;  // offset -> length
  uint64_t in_use_ = 0;
};

}  // namespace pto
