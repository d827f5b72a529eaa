// Remote buffers: the placeholder index (remote_buffers.h) and the Worker's
// alloc_remote / free_remote / write_remote / read_remote on top of it.
#include "remote_buffers.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include "worker_impl.h"

namespace pto {

Status RemoteBuffers::reserve() {
  size_ = 64ull << 30;
  void* p = mmap(nullptr, size_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    size_ = 0;
    return Status::Error(kWorkerHeapExhausted, "cannot reserve the remote-buffer address range");
  }
  base_ = next_ = reinterpret_cast<uint64_t>(p);
  return Status::Ok();
}

void RemoteBuffers::release() {
  if (base_) munmap(reinterpret_cast<void*>(base_), size_);
  base_ = 0;
}

bool RemoteBuffers::find(uint64_t lo, uint64_t hi, int* endpoint, RemoteBufferRef* ref, Status* error) const {
  if (!base_ || lo < base_ || lo >= base_ + size_) return false;
  std::lock_guard<std::mutex> g(mu_);
  auto it = buffers_.upper_bound(lo);
  if (it != buffers_.begin()) {
    --it;
    if (lo >= it->first && hi <= it->first + it->second.bytes) {
      *endpoint = it->second.endpoint;
      *ref = it->second.ref;
      ref->offset = lo - it->first;
      return true;
    }
  }
  *error = Status::Error(kWorkerInvalidArgument,
                         fmt::format("[0x{:x}, +{} bytes) is a remote-buffer address but not inside a live remote "
                                     "buffer (freed, or a view past its end)",
                                     lo, hi - lo));
  return true;
}

uint64_t RemoteBuffers::add(int worker, const RemoteBufferRef& ref, uint64_t bytes) {
  const uint64_t span = (bytes + 4095) / 4096 * 4096;
  std::lock_guard<std::mutex> g(mu_);
  if (next_ + span > base_ + size_) return 0;
  const uint64_t addr = next_;
  next_ += span;
  buffers_[addr] = Buffer{worker, ref, bytes};
  return addr;
}

bool RemoteBuffers::take(uint64_t addr, int* worker, RemoteBufferRef* ref) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = buffers_.find(addr);
  if (it == buffers_.end()) return false;
  *worker = it->second.endpoint;
  *ref = it->second.ref;
  buffers_.erase(it);
  return true;
}

Result<ContinuousTensor> WorkerImpl::alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype) {
  Result<ContinuousTensor> r;
  auto bad = [&](int32_t code, const std::string& m) {
    r.status = Status::Error(code, "alloc_remote: " + m);
    return r;
  };
  if (!life_.initialized || life_.closed) return bad(kWorkerClosed, "needs an initialised, open Worker");
  const auto& l3s = pool_.l3s();
  if (worker < 0 || worker >= static_cast<int>(l3s.size()) || !l3s[worker]->is_remote())
    return bad(kWorkerInvalidArgument, fmt::format("worker {} is not a remote worker of this Worker", worker));
  if (Status s = check_alloc_shape(shape, dtype); !s.ok()) return bad(s.code, s.message);
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  const uint64_t bytes = tensor_bytes(t);
  if (bytes == 0 || bytes > (uint64_t(1) << 36))
    return bad(kWorkerInvalidArgument, fmt::format("{} bytes is outside 1..2^36", bytes));
  Endpoint& ep = *l3s[worker];
  RemoteBufferRef ref;
  if (Status s = ep.link->buffer_alloc(bytes, &ref, cfg_.control_timeout_ms); !s.ok())
    return bad(s.code, fmt::format("{}: {}", ep.label(), s.message));
  t.data = rbufs_.add(worker, ref, bytes);
  if (t.data == 0) {
    (void)ep.link->buffer_free(ref, cfg_.control_timeout_ms);
    return bad(kWorkerHeapExhausted, "the remote-buffer address range is used up");
  }
  r.value = t;
  return r;
}

Status WorkerImpl::free_remote(const ContinuousTensor& t) {
  int worker = -1;
  RemoteBufferRef ref;
  if (!rbufs_.take(t.data, &worker, &ref))
    return Status::Error(kWorkerInvalidArgument, fmt::format("free_remote: 0x{:x} is not a live remote buffer", t.data));
  // The peer frees it once no task of its uses it any more.
  return pool_.l3s()[worker]->link->buffer_free(ref, cfg_.control_timeout_ms);
}

Status WorkerImpl::move_remote(const ContinuousTensor& t, void* host, bool write) {
  const char* what = write ? "write_remote" : "read_remote";
  if (!life_.initialized || life_.closed)
    return Status::Error(kWorkerClosed, fmt::format("{}: needs an initialised, open Worker", what));
  const uint64_t bytes = tensor_bytes(t);
  int ep = -1;
  RemoteBufferRef ref;
  Status err;
  if (!rbufs_.find(t.data, t.data + bytes, &ep, &ref, &err))
    return Status::Error(kWorkerInvalidArgument, fmt::format("{}: 0x{:x} is not a remote buffer", what, t.data));
  if (!err.ok()) return Status::Error(err.code, fmt::format("{}: {}", what, err.message));
  RemoteLink& link = *pool_.l3s()[ep]->link;
  return write ? link.buffer_write(ref, host, bytes, cfg_.control_timeout_ms)
               : link.buffer_read(ref, host, bytes, cfg_.control_timeout_ms);
}

}  // namespace pto
