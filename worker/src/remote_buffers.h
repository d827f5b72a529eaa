// Remote buffers (Worker::alloc_remote, docs/remote.md): memory on a remote
// L3 worker's peer, named here by a placeholder address in a reserved range
// that no mapping backs. Because the placeholders are ordinary addresses, the
// L3 TensorMap orders tasks on remote buffers by byte-range overlap exactly
// as it does local tensors, and submit pins a task that names one to the
// worker that holds it. Thread-safe (its own lock).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "pto/remote.h"
#include "pto/worker.h"

namespace pto {

class RemoteBuffers {
 public:
  ~RemoteBuffers() { release(); }
  // Reserves the placeholder range (address space only, PROT_NONE).
  Status reserve();
  void release();
  bool active() const { return base_ != 0; }

  // The buffer holding [lo, hi): true with its endpoint and reference at lo
  // when the range is in the placeholder range; *error is set when it is
  // there but not inside a live buffer. False when it is not a placeholder.
  bool find(uint64_t lo, uint64_t hi, int* endpoint, RemoteBufferRef* ref, Status* error) const;
  // A placeholder for a buffer of `bytes` on endpoint `worker`; 0 when the
  // range is used up (placeholders are never reused: a stale one cannot alias).
  uint64_t add(int worker, const RemoteBufferRef& ref, uint64_t bytes);
  // Forgets the buffer at placeholder `addr`; false when there is none.
  bool take(uint64_t addr, int* worker, RemoteBufferRef* ref);

 private:
  struct Buffer {
    int endpoint;
    RemoteBufferRef ref;
    uint64_t bytes;
  };
  mutable std::mutex mu_;
  std::map<uint64_t, Buffer> buffers_;  // placeholder address -> buffer
  uint64_t base_ = 0, size_ = 0, next_ = 0;
};

}  // namespace pto
