// Tensors the daemon holds for clients: buffers in the Worker's shared
// arena (so chip and sub children read and write them in place), by id and
// optional name. A tensor a queued or running job uses is pinned: it cannot
// be freed until the job ends. A tensor being uploaded holds its space and
// its name but exists for nobody (list, jobs, downloads) until its upload
// is committed: complete and checked.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pto/worker.h"

namespace ptod {

using pto::Status;

struct TensorEntry {
  uint64_t id = 0;
  std::string name;
  pto::ContinuousTensor tensor{};  // the whole buffer
  uint64_t bytes = 0;
  int64_t pins = 0;  // jobs and transfers using it
  bool committed = true;  // false while its upload is in progress
};

class TensorStore {
 public:
  explicit TensorStore(pto::Worker& w) : w_(w) {}

  // A zero-filled buffer; the error names the shape, dtype or name. With
  // `uploading`, it is invisible until commit(id), or dropped by abandon(id).
  Status create(const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype, TensorEntry* out,
                bool uploading = false);
  void commit(uint64_t id);
  void abandon(uint64_t id);
  // find() and one pin in one step (a download in progress).
  Status find_and_pin(uint64_t id, const std::string& name, TensorEntry* out);
  Status free(uint64_t id, const std::string& name);
  std::vector<TensorEntry> list() const;
  // A view of a stored tensor, offset and shape checked against the buffer,
  // and the tensor pinned in the same step (a job will use it).
  Status view_and_pin(uint64_t id, const std::string& name, uint64_t offset_bytes, const std::vector<uint32_t>& shape,
                      int32_t dtype, bool has_dtype, pto::ContinuousTensor* out, TensorEntry* entry);
  void pin(uint64_t id, int delta);
  // The checks of view_and_pin alone: a view of e's buffer (a pure function).
  static Status view_of(const TensorEntry& e, uint64_t offset_bytes, const std::vector<uint32_t>& shape, int32_t dtype,
                        bool has_dtype, pto::ContinuousTensor* out);

 private:
  Status find_locked(uint64_t id, const std::string& name, const TensorEntry** out) const;
  pto::Worker& w_;
  mutable std::mutex mu_;
  std::map<uint64_t, TensorEntry> by_id_;
  std::map<std::string, uint64_t> by_name_;
  uint64_t next_id_ = 1;
};

}  // namespace ptod
