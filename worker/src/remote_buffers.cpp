// Remote buffers (Worker::alloc_remote, docs/remote.md): memory on a remote
// L3 worker's peer, named here by a placeholder address in a reserved range
// that no mapping backs (init() reserves it with PROT_NONE). Because the
// placeholders are ordinary addresses, the L3 TensorMap orders tasks on
// remote buffers by byte-range overlap exactly as it does local tensors, and
// submit pins a task that names one to the worker that holds it.
#include <fmt/format.h>

#include "worker_impl.h"

namespace pto {

bool WorkerImpl::remote_buffer_of(uint64_t lo, uint64_t hi, int* endpoint, RemoteBufferRef* ref, Status* error) const {
  if (!rbuf_base_ || lo < rbuf_base_ || lo >= rbuf_base_ + rbuf_size_) return false;
  std::lock_guard<std::mutex> g(rbuf_mu_);
  auto it = rbufs_.upper_bound(lo);
  if (it != rbufs_.begin()) {
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

Result<ContinuousTensor> WorkerImpl::alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype) {
  Result<ContinuousTensor> r;
  auto bad = [&](int32_t code, const std::string& m) {
    r.status = Status::Error(code, "alloc_remote: " + m);
    return r;
  };
  if (!initialized_ || closed_) return bad(kWorkerClosed, "needs an initialised, open Worker");
  if (worker < 0 || worker >= static_cast<int>(l3s_.size()) || !l3s_[worker]->is_remote())
    return bad(kWorkerInvalidArgument, fmt::format("worker {} is not a remote worker of this Worker", worker));
  if (shape.size() > PTO_TENSOR_MAX_DIMS || pto2_dtype_size(dtype) == 0)
    return bad(kWorkerInvalidArgument,
               fmt::format("{} dims (at most {}) and dtype {}", shape.size(), PTO_TENSOR_MAX_DIMS, dtype));
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  const uint64_t bytes = tensor_bytes(t);
  if (bytes == 0 || bytes > (uint64_t(1) << 36))
    return bad(kWorkerInvalidArgument, fmt::format("{} bytes is outside 1..2^36", bytes));
  Endpoint& ep = *l3s_[worker];
  RemoteBufferRef ref;
  if (Status s = ep.link->buffer_alloc(bytes, &ref, cfg_.control_timeout_ms); !s.ok())
    return bad(s.code, fmt::format("{}: {}", ep.label(), s.message));
  const uint64_t span = (bytes + 4095) / 4096 * 4096;
  {
    std::lock_guard<std::mutex> g(rbuf_mu_);
    if (rbuf_next_ + span <= rbuf_base_ + rbuf_size_) {  // placeholders are never reused: a stale one cannot alias
      t.data = rbuf_next_;
      rbuf_next_ += span;
      rbufs_[t.data] = RemoteBuffer{worker, ref, bytes};
    }
  }
  if (t.data == 0) {
    (void)ep.link->buffer_free(ref, cfg_.control_timeout_ms);
    return bad(kWorkerHeapExhausted, "the remote-buffer address range is used up");
  }
  r.value = t;
  return r;
}

Status WorkerImpl::free_remote(const ContinuousTensor& t) {
  RemoteBuffer b;
  {
    std::lock_guard<std::mutex> g(rbuf_mu_);
    auto it = rbufs_.find(t.data);
    if (it == rbufs_.end())
      return Status::Error(kWorkerInvalidArgument,
                           fmt::format("free_remote: 0x{:x} is not a live remote buffer", t.data));
    b = it->second;
    rbufs_.erase(it);
  }
  // The peer frees it once no task of its uses it any more.
  return l3s_[b.endpoint]->link->buffer_free(b.ref, cfg_.control_timeout_ms);
}

Status WorkerImpl::move_remote(const ContinuousTensor& t, void* host, bool write) {
  const char* what = write ? "write_remote" : "read_remote";
  if (!initialized_ || closed_)
    return Status::Error(kWorkerClosed, fmt::format("{}: needs an initialised, open Worker", what));
  const uint64_t bytes = tensor_bytes(t);
  int ep = -1;
  RemoteBufferRef ref;
  Status err;
  if (!remote_buffer_of(t.data, t.data + bytes, &ep, &ref, &err))
    return Status::Error(kWorkerInvalidArgument, fmt::format("{}: 0x{:x} is not a remote buffer", what, t.data));
  if (!err.ok()) return Status::Error(err.code, fmt::format("{}: {}", what, err.message));
  RemoteLink& link = *l3s_[ep]->link;
  return write ? link.buffer_write(ref, host, bytes, cfg_.control_timeout_ms)
               : link.buffer_read(ref, host, bytes, cfg_.control_timeout_ms);
}

}  // namespace pto
