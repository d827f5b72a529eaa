#include "tensor_store.h"

#include "names.h"

#include <fmt/format.h>

#include <cstring>

namespace ptod {

namespace {
Status bad(std::string m) { return Status::Error(pto::kWorkerInvalidArgument, std::move(m)); }
Status not_found(std::string m) { return Status::Error(pto::kWorkerNotRegistered, std::move(m)); }
}  // namespace

Status TensorStore::create(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype, TensorEntry* out,
                           bool uploading) {
  if (Status s = check_name("tensor name", name); !s.ok()) return s;
  if (shape.empty() || shape.size() > PTO_TENSOR_MAX_DIMS)
    return bad(fmt::format("shape has {} dims; a tensor has 1..{}", shape.size(), PTO_TENSOR_MAX_DIMS));
  uint64_t n = 1;
  for (uint32_t d : shape) {
    if (d == 0) return bad(fmt::format("shape [{}] has a zero dimension", fmt::join(shape, ", ")));
    if (__builtin_mul_overflow(n, uint64_t(d), &n) || n > (uint64_t(1) << 40))
      return bad(fmt::format("shape [{}] is too large", fmt::join(shape, ", ")));
  }
  if (pto_dtype_size(dtype) == 0) return bad(fmt::format("unknown dtype {}", dtype));
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!name.empty() && by_name_.count(name)) return bad(fmt::format("a tensor named '{}' exists", name));
  }
  auto r = w_.alloc(shape, dtype);
  if (!r.ok()) return r.status;
  std::memset(reinterpret_cast<void*>(r.value.data), 0, pto::tensor_bytes(r.value));
  std::lock_guard<std::mutex> g(mu_);
  if (!name.empty() && by_name_.count(name)) {
    (void)w_.free(r.value);
    return bad(fmt::format("a tensor named '{}' exists", name));
  }
  TensorEntry e;
  e.id = next_id_++;
  e.name = name;
  e.tensor = r.value;
  e.bytes = pto::tensor_bytes(r.value);
  by_id_[e.id] = e;
  if (!name.empty()) by_name_[name] = e.id;
  by_id_[e.id].committed = !uploading;
  *out = by_id_[e.id];
  return Status::Ok();
}

void TensorStore::commit(uint64_t id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it != by_id_.end()) it->second.committed = true;
}

void TensorStore::abandon(uint64_t id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.committed) return;
  (void)w_.free(it->second.tensor);
  if (!it->second.name.empty()) by_name_.erase(it->second.name);
  by_id_.erase(it);
}

Status TensorStore::find_and_pin(uint64_t id, const std::string& name, TensorEntry* out) {
  std::lock_guard<std::mutex> g(mu_);
  const TensorEntry* e = nullptr;
  if (Status s = find_locked(id, name, &e); !s.ok()) return s;
  ++by_id_[e->id].pins;
  *out = *e;
  return Status::Ok();
}

Status TensorStore::find_locked(uint64_t id, const std::string& name, const TensorEntry** out) const {
  if (id == 0 && name.empty()) return bad("a tensor handle needs an id or a name");
  if (id == 0) {
    auto n = by_name_.find(name);
    if (n == by_name_.end()) return not_found(fmt::format("no tensor named '{}'", name));
    id = n->second;
  }
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return not_found(fmt::format("no tensor with id {}", id));
  if (!it->second.committed)
    return not_found(fmt::format("tensor {} is still being uploaded: it exists once its upload completes and is checked",
                                 it->second.name.empty() ? std::to_string(id) : "'" + it->second.name + "'"));
  *out = &it->second;
  return Status::Ok();
}

Status TensorStore::free(uint64_t id, const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  const TensorEntry* e = nullptr;
  if (Status s = find_locked(id, name, &e); !s.ok()) return s;
  if (e->pins > 0)
    return Status::Error(
        pto::kInUse, fmt::format("tensor {} is used by {} queued or running job(s) or transfer(s)", e->id, e->pins));
  if (Status s = w_.free(e->tensor); !s.ok()) return s;
  if (!e->name.empty()) by_name_.erase(e->name);
  by_id_.erase(e->id);
  return Status::Ok();
}

std::vector<TensorEntry> TensorStore::list() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<TensorEntry> out;
  for (const auto& [id, e] : by_id_)
    if (e.committed) out.push_back(e);
  return out;
}

Status TensorStore::view_and_pin(uint64_t id, const std::string& name, uint64_t offset_bytes,
                                 const std::vector<uint32_t>& shape, int32_t dtype, bool has_dtype,
                                 pto::ContinuousTensor* out, TensorEntry* entry) {
  std::lock_guard<std::mutex> g(mu_);
  const TensorEntry* e = nullptr;
  if (Status s = find_locked(id, name, &e); !s.ok()) return s;
  if (Status s = view_of(*e, offset_bytes, shape, dtype, has_dtype, out); !s.ok()) return s;
  ++by_id_[e->id].pins;
  if (entry) *entry = *e;
  return Status::Ok();
}

Status TensorStore::view_of(const TensorEntry& e, uint64_t offset_bytes, const std::vector<uint32_t>& shape,
                            int32_t dtype, bool has_dtype, pto::ContinuousTensor* out) {
  pto::ContinuousTensor t = e.tensor;
  if (has_dtype) t.dtype = dtype;
  if (pto_dtype_size(t.dtype) == 0) return bad(fmt::format("unknown dtype {}", t.dtype));
  if (!shape.empty()) {
    if (shape.size() > PTO_TENSOR_MAX_DIMS) return bad(fmt::format("a view has at most {} dims", PTO_TENSOR_MAX_DIMS));
    t.ndims = static_cast<int32_t>(shape.size());
    for (int i = 0; i < PTO_TENSOR_MAX_DIMS; ++i) t.shape[i] = i < t.ndims ? shape[i] : 0;
  } else if (has_dtype && offset_bytes == 0 && pto_dtype_size(t.dtype) != pto_dtype_size(e.tensor.dtype)) {
    return bad("a dtype of another size needs an explicit shape");
  }
  uint64_t bytes = pto_dtype_size(t.dtype);
  for (int i = 0; i < t.ndims; ++i)
    if (__builtin_mul_overflow(bytes, uint64_t(t.shape[i]), &bytes))
      return bad(fmt::format("view shape [{}] overflows", fmt::join(shape, ", ")));
  if (offset_bytes > e.bytes || bytes > e.bytes - offset_bytes)
    return bad(fmt::format("view of {} bytes at offset {} exceeds tensor {} ({} bytes)", bytes, offset_bytes,
                           e.name.empty() ? std::to_string(e.id) : "'" + e.name + "'", e.bytes));
  t.data += offset_bytes;
  *out = t;
  return Status::Ok();
}

void TensorStore::pin(uint64_t id, int delta) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it != by_id_.end()) it->second.pins += delta;
}

}  // namespace ptod
