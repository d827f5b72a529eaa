#include "tensor_store.h"

#include <algorithm>

#include "log.h"
#include "names.h"

#include <fmt/format.h>

#include <cstring>

namespace ptod {

namespace {
Status bad(std::string m) { return Status::Error(pto::kWorkerInvalidArgument, std::move(m)); }
Status taken(std::string m) { return Status::Error(pto::kAlreadyExists, std::move(m)); }
Status not_found(std::string m) { return Status::Error(pto::kWorkerNotRegistered, std::move(m)); }
std::string label(const TensorEntry& e) { return e.name.empty() ? std::to_string(e.id) : "'" + e.name + "'"; }
}  // namespace

Status TensorStore::restore(bool drop_unsynced) {
  std::vector<TensorRow> rows;
  if (Status s = db_.tensors(&rows); !s.ok()) return s;
  size_t kept = 0;
  for (const TensorRow& r : rows) {
    std::string why;
    if (drop_unsynced && !r.synced) why = "the host restarted without a clean stop and its bytes were not fsynced";
    pto::Result<pto::ContinuousTensor> t;
    if (why.empty()) {
      t = w_.alloc_at(r.arena_offset, r.shape, r.dtype);
      if (!t.ok())
        why = t.status.message;
      else if (pto::tensor_bytes(t.value) != r.bytes)
        why = "its shape and dtype do not give its size";
    }
    if (!why.empty()) {
      if (t.ok()) (void)w_.free(t.value);
      log("tensors")->warn("tensor {} ('{}' of {}) is dropped: {}", r.id, r.name, r.owner, why);
      (void)db_.delete_tensor(r.id);
      continue;
    }
    std::lock_guard<std::mutex> g(mu_);
    TensorEntry e;
    e.id = r.id;
    e.owner = r.owner;
    e.name = r.name;
    e.tensor = t.value;
    e.bytes = r.bytes;
    e.synced = r.synced;
    if (e.synced) synced_count_.fetch_add(1, std::memory_order_relaxed);
    by_id_[e.id] = e;
    if (!e.name.empty()) by_name_[name_key(e.owner, e.name)] = e.id;
    bytes_by_owner_[e.owner] += e.bytes;
    ++kept;
  }
  if (!rows.empty()) log("tensors")->info("restored {} of {} tensor(s) from the state directory", kept, rows.size());
  return Status::Ok();
}

Status TensorStore::create(const Principal& who, const std::string& name, const std::vector<uint32_t>& shape,
                           int32_t dtype, TensorEntry* out, bool uploading) {
  if (Status s = check_tensor_name(name); !s.ok()) return s;
  if (shape.empty() || shape.size() > PTO_TENSOR_MAX_DIMS)
    return bad(fmt::format("shape has {} dims; a tensor has 1..{}", shape.size(), PTO_TENSOR_MAX_DIMS));
  uint64_t n = 1;
  for (uint32_t d : shape) {
    if (d == 0) return bad(fmt::format("shape [{}] has a zero dimension", fmt::join(shape, ", ")));
    if (__builtin_mul_overflow(n, uint64_t(d), &n) || n > (uint64_t(1) << 40))
      return bad(fmt::format("shape [{}] is too large", fmt::join(shape, ", ")));
  }
  if (pto_dtype_size(dtype) == 0) return bad(fmt::format("unknown dtype {}", dtype));
  const uint64_t bytes = n * pto_dtype_size(dtype);
  const uint64_t quota = cfg_.quota_for(who.name).arena_bytes;
  // Checked (and the space counted) under the lock, before the allocation:
  // two uploads at once cannot both pass the quota.
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!name.empty() && by_name_.count(name_key(who.name, name)))
      return taken(fmt::format("a tensor named '{}' exists", name));
    const uint64_t held = bytes_by_owner_[who.name];
    if (quota && held + bytes > quota)
      return Status::Error(pto::kQuotaExceeded,
                           fmt::format("{} holds {} bytes of tensors; {} more would pass its quota of {} bytes "
                                       "([quotas] arena_bytes)",
                                       who.name, held, bytes, quota));
    bytes_by_owner_[who.name] = held + bytes;
  }
  auto unreserve = [&] {
    std::lock_guard<std::mutex> g(mu_);
    bytes_by_owner_[who.name] -= bytes;
  };
  // An upload writes every byte before the tensor is visible, so it may lie
  // on warm pages as they are; anything else reads as zeros (the arena is a
  // file: Worker::alloc zeroes what it takes).
  auto r = uploading ? w_.alloc_to_overwrite(shape, dtype) : w_.alloc(shape, dtype);
  if (!r.ok()) {
    unreserve();
    return r.status;
  }
  TensorEntry e;
  e.owner = who.name;
  e.name = name;
  e.tensor = r.value;
  e.bytes = bytes;
  e.committed = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    Status s = !name.empty() && by_name_.count(name_key(who.name, name))
                   ? taken(fmt::format("a tensor named '{}' exists", name))
                   : ids_.next(&e.id);
    if (!s.ok()) {
      bytes_by_owner_[who.name] -= bytes;
      (void)w_.free(r.value);
      return s;
    }
    by_id_[e.id] = e;
    if (!name.empty()) by_name_[name_key(who.name, name)] = e.id;
  }
  if (!uploading)
    if (Status s = commit(e.id); !s.ok()) {
      abandon(e.id);
      return s;
    }
  *out = e;
  out->committed = !uploading;
  return Status::Ok();
}

Status TensorStore::commit(uint64_t id) {
  TensorRow row;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return not_found(fmt::format("no tensor with id {}", id));
    const TensorEntry& e = it->second;
    row.id = e.id;
    row.owner = e.owner;
    row.name = e.name;
    row.dtype = e.tensor.dtype;
    row.shape.assign(e.tensor.shape, e.tensor.shape + e.tensor.ndims);
    row.arena_offset = w_.arena_offset(e.tensor);
    row.bytes = e.bytes;
  }
  // [daemon] durable: the bytes are on disk before the record says they exist.
  if (cfg_.durable) {
    pto::ContinuousTensor t{};
    {
      std::lock_guard<std::mutex> g(mu_);
      t = by_id_[id].tensor;
    }
    if (Status s = w_.sync(t); !s.ok()) return s;
    row.synced = true;
  }
  if (Status s = db_.put_tensor(row); !s.ok()) return s;
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    it->second.committed = true;
    it->second.synced = row.synced;
    if (row.synced) synced_count_.fetch_add(1, std::memory_order_relaxed);
  }
  return Status::Ok();
}

void TensorStore::erase_locked(std::map<uint64_t, TensorEntry>::iterator it) {
  if (auto l = lent_.find(it->first); l != lent_.end())
    l->second.freed = true;  // give_back() frees the range
  else
    (void)w_.free(it->second.tensor);
  if (!it->second.name.empty()) by_name_.erase(name_key(it->second.owner, it->second.name));
  bytes_by_owner_[it->second.owner] -= it->second.bytes;
  if (it->second.synced) synced_count_.fetch_sub(1, std::memory_order_relaxed);
  by_id_.erase(it);
}

void TensorStore::abandon(uint64_t id) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.committed) return;
  erase_locked(it);
}

Status TensorStore::find_and_pin(const Principal& who, uint64_t id, const std::string& name, TensorEntry* out) {
  std::lock_guard<std::mutex> g(mu_);
  const TensorEntry* e = nullptr;
  if (Status s = find_locked(who, id, name, &e); !s.ok()) return s;
  ++by_id_[e->id].pins;
  *out = *e;
  return Status::Ok();
}

// Another principal's tensor is "not found", word for word as a missing one:
// its existence is not told.
Status TensorStore::find_locked(const Principal& who, uint64_t id, const std::string& name,
                                const TensorEntry** out) const {
  if (id == 0 && name.empty()) return bad("a tensor handle needs an id or a name");
  if (id == 0) {
    auto n = by_name_.find(name_key(who.name, name));
    if (n == by_name_.end()) return not_found(fmt::format("no tensor named '{}'", name));
    id = n->second;
  }
  auto it = by_id_.find(id);
  if (it == by_id_.end() || !who.may_use(it->second.owner)) return not_found(fmt::format("no tensor with id {}", id));
  if (!it->second.committed)
    return not_found(fmt::format(
        "tensor {} is still being uploaded: it exists once its upload completes and is checked", label(it->second)));
  *out = &it->second;
  return Status::Ok();
}

Status TensorStore::free(const Principal& who, uint64_t id, const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  const TensorEntry* e = nullptr;
  if (Status s = find_locked(who, id, name, &e); !s.ok()) return s;
  if (e->pins > 0)
    return Status::Error(
        pto::kInUse, fmt::format("tensor {} is used by {} queued or running job(s) or transfer(s)", e->id, e->pins));
  // The record goes first: a crash between the two leaves space unused
  // until the restart, never a record of a tensor whose space was reused.
  // One whose record says its bytes are on disk goes in an fsynced commit:
  // a power loss could otherwise bring it back, "synced", over the bytes of
  // the tensor placed in its space since.
  if (Status s = db_.delete_tensor(e->id, e->synced && !cfg_.durable); !s.ok()) return s;
  erase_locked(by_id_.find(e->id));
  return Status::Ok();
}

std::vector<TensorEntry> TensorStore::list(const Principal& who) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<TensorEntry> out;
  for (const auto& [id, e] : by_id_)
    if (e.committed && who.may_use(e.owner)) out.push_back(e);
  return out;
}

uint64_t TensorStore::bytes_of(const std::string& owner) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = bytes_by_owner_.find(owner);
  return it == bytes_by_owner_.end() ? 0 : it->second;
}

Status TensorStore::view_and_pin(const Principal& who, uint64_t id, const std::string& name, uint64_t offset_bytes,
                                 const std::vector<uint32_t>& shape, int32_t dtype, bool has_dtype,
                                 pto::ContinuousTensor* out, TensorEntry* entry) {
  std::lock_guard<std::mutex> g(mu_);
  const TensorEntry* e = nullptr;
  if (Status s = find_locked(who, id, name, &e); !s.ok()) return s;
  if (Status s = view_of(*e, offset_bytes, shape, dtype, has_dtype, out); !s.ok()) return s;
  ++by_id_[e->id].pins;
  if (entry) *entry = *e;
  return Status::Ok();
}

void TensorStore::pin(uint64_t id, int delta) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_id_.find(id);
  if (it != by_id_.end()) it->second.pins += delta;
}

TensorStore::TensorStore(pto::Worker& w, const DaemonConfig& cfg, StateDb& db)
    : w_(w), cfg_(cfg), db_(db), ids_(db, "tensor"), book_(std::make_shared<LendBook>()) {
  book_->store = this;
}

TensorStore::~TensorStore() {
  std::lock_guard<std::mutex> g(book_->mu);
  book_->store = nullptr;
}

TensorStore::Lend* TensorStore::lend(uint64_t id, const pto::ContinuousTensor& t) {
  std::lock_guard<std::mutex> g(mu_);
  Lent& l = lent_[id];
  ++l.slices;
  l.tensor = t;
  return new Lend{book_, id};
}

void TensorStore::give_back(Lend* l) {
  {
    std::lock_guard<std::mutex> b(l->book->mu);
    if (TensorStore* s = l->book->store) {
      std::lock_guard<std::mutex> g(s->mu_);
      s->give_back_locked(l->id);
    }
  }
  delete l;
}

void TensorStore::give_back_locked(uint64_t id) {
  auto l = lent_.find(id);
  if (l == lent_.end() || --l->second.slices > 0) return;
  if (l->second.freed) (void)w_.free(l->second.tensor);
  lent_.erase(l);
  if (lent_.empty()) lent_cv_.notify_all();
}

bool TensorStore::wait_lent(std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lk(mu_);
  return lent_cv_.wait_for(lk, bound, [&] { return lent_.empty(); });
}

bool TensorStore::sync_all() {
  std::vector<TensorEntry> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [id, e] : by_id_)
      if (e.committed) all.push_back(e);
  }
  bool ok = true;
  std::vector<uint64_t> on_disk;
  for (const TensorEntry& e : all) {
    if (Status s = w_.sync(e.tensor); !s.ok()) {
      log("tensors")->warn("tensor {}: {}", e.id, s.message);
      ok = false;
      continue;
    }
    if (!e.synced) on_disk.push_back(e.id);
  }
  // Their records say so: a power loss before a job changes them keeps them
  // (they used to be dropped by the restart after it, as never fsynced).
  // Not written, they are dropped then: the stop is clean all the same.
  if (!on_disk.empty()) {
    if (Status s = db_.set_tensors_synced(on_disk, true); !s.ok()) {
      log("tensors")->warn("the records of {} tensors written to disk do not say so: {}", on_disk.size(), s.message);
    } else {
      std::lock_guard<std::mutex> g(mu_);
      for (uint64_t id : on_disk)
        if (auto it = by_id_.find(id); it != by_id_.end() && !it->second.synced) {
          it->second.synced = true;
          synced_count_.fetch_add(1, std::memory_order_relaxed);
        }
    }
  }
  return ok;
}

Status TensorStore::unsync(const std::vector<uint64_t>& outputs) {
  if (!unsync_may_be_needed()) return Status::Ok();
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (uint64_t id : outputs)
      if (auto it = by_id_.find(id); it != by_id_.end() && it->second.synced) ids.push_back(id);
  }
  if (ids.empty()) return Status::Ok();
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (Status s = db_.set_tensors_synced(ids, false); !s.ok())
    return Status::Error(s.code, fmt::format("the record of tensor {} cannot say that a job may change its bytes: {}",
                                             ids.front(), s.message));
  std::lock_guard<std::mutex> g(mu_);
  for (uint64_t id : ids)
    if (auto it = by_id_.find(id); it != by_id_.end() && it->second.synced) {
      it->second.synced = false;
      synced_count_.fetch_sub(1, std::memory_order_relaxed);
    }
  return Status::Ok();
}

void TensorStore::sync(const std::vector<TensorEntry>& written) {
  if (!cfg_.durable) return;
  for (const TensorEntry& e : written)
    if (Status s = w_.sync(e.tensor); !s.ok()) log("tensors")->warn("tensor {}: {}", e.id, s.message);
}

}  // namespace ptod
