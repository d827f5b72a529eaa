// Tensors the daemon holds for clients: buffers in the Worker's shared
// arena (so chip and sub children read and write them in place), by id and
// optional name. Each belongs to the principal that made it: names are per
// owner, and another principal is told it does not exist unless it is admin.
// A tensor a queued or running job uses is pinned: it cannot be freed until
// the job ends. A tensor being uploaded holds its space and its name but
// exists for nobody (list, jobs, downloads) until its upload is committed:
// complete and checked. Committed tensors are in the state database (their
// place in the arena file), so a restarted daemon takes them back.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "principal.h"
#include "pto/worker.h"
#include "state_db.h"

namespace ptod {

using pto::Status;

struct TensorEntry {
  uint64_t id = 0;
  std::string owner;
  std::string name;
  pto::ContinuousTensor tensor{};  // the whole buffer
  uint64_t bytes = 0;
  int64_t pins = 0;       // jobs and transfers using it
  bool committed = true;  // false while its upload is in progress
  // Its bytes on disk are its bytes (its record says so): fsynced since a
  // job last could change them (TensorStore::unsync).
  bool synced = false;
};

class TensorStore {
 public:
  TensorStore(pto::Worker& w, const DaemonConfig& cfg, StateDb& db);
  ~TensorStore();
  TensorStore(const TensorStore&) = delete;
  TensorStore& operator=(const TensorStore&) = delete;

  // Takes back the tensors of the state database at their places in the
  // arena file. Those whose bytes may be lost (`drop_unsynced`: the host
  // restarted without a clean stop, and they were not fsynced) and those
  // that no longer fit the arena are dropped; the log says which.
  Status restore(bool drop_unsynced);

  // A zero-filled buffer owned by `who`; the error names the shape, dtype,
  // name or quota. With `uploading`, it is invisible until commit(id) (and
  // not zeroed: the upload writes every byte), or dropped by abandon(id).
  Status create(const Principal& who, const std::string& name, const std::vector<uint32_t>& shape, int32_t dtype,
                TensorEntry* out, bool uploading = false);
  // Visible from now on, and recorded (fsynced first with [daemon] durable).
  Status commit(uint64_t id);
  void abandon(uint64_t id);
  // find() and one pin in one step (a download in progress).
  Status find_and_pin(const Principal& who, uint64_t id, const std::string& name, TensorEntry* out);
  Status free(const Principal& who, uint64_t id, const std::string& name);
  // Its own tensors (an admin: everyone's).
  std::vector<TensorEntry> list(const Principal& who) const;
  // A view of a stored tensor, offset and shape checked against the buffer,
  // and the tensor pinned in the same step (a job will use it).
  Status view_and_pin(const Principal& who, uint64_t id, const std::string& name, uint64_t offset_bytes,
                      const std::vector<uint32_t>& shape, int32_t dtype, bool has_dtype, pto::ContinuousTensor* out,
                      TensorEntry* entry);
  void pin(uint64_t id, int delta);
  // Pages of a tensor that a finished download's slices may still reference
  // (gRPC lets go of them after the call's end, tensor_streams.h). A tensor
  // freed meanwhile is gone at once, but its arena range is given back only
  // with the last lent slice: no later tensor's bytes can lie under it.
  // lend() returns the slice's hold, for give_back() from gRPC's destroy
  // callback: it outlives the store (a late release after the daemon's
  // stop does nothing).
  struct LendBook;
  struct Lend {
    std::shared_ptr<LendBook> book;
    uint64_t id;
  };
  Lend* lend(uint64_t id, const pto::ContinuousTensor& t);
  static void give_back(Lend* l);
  // The stop: waits (bounded) until gRPC has let go of every lent slice, so
  // that the arena is unmapped under none; false if some are still out.
  bool wait_lent(std::chrono::milliseconds bound);
  // An upload's bytes into its (not yet committed) tensor, `at` bytes in.
  Status write(const TensorEntry& e, uint64_t at, const void* src, uint64_t bytes) {
    return w_.write(e.tensor, at, src, bytes);
  }
  // [daemon] durable: a job wrote these tensors; their bytes go to disk.
  void sync(const std::vector<TensorEntry>& written);
  // [daemon] durable = false: a job may change these tensors. Those whose
  // records say their bytes are on disk (a clean stop wrote them) say so no
  // longer, fsynced before it returns: a power loss before the next clean
  // stop drops them rather than serve bytes older than the job's. Nothing to
  // do when no tensor is so marked (unsync_may_be_needed: a caller need not
  // even gather the outputs).
  Status unsync(const std::vector<uint64_t>& outputs);
  bool unsync_may_be_needed() const { return !cfg_.durable && synced_count_.load(std::memory_order_relaxed) != 0; }
  // A clean stop: every tensor's bytes to disk, and their records say so
  // (they survive a power loss before a job changes them); false if one
  // failed.
  bool sync_all();
  // The bytes `owner` holds (its arena quota's measure).
  uint64_t bytes_of(const std::string& owner) const;
  // A view of e's buffer (a pure function: the checks of view_and_pin).
  static Status view_of(const TensorEntry& e, uint64_t offset_bytes, const std::vector<uint32_t>& shape, int32_t dtype,
                        bool has_dtype, pto::ContinuousTensor* out);

 private:
  Status find_locked(const Principal& who, uint64_t id, const std::string& name, const TensorEntry** out) const;
  void erase_locked(std::map<uint64_t, TensorEntry>::iterator it);
  static std::string name_key(const std::string& owner, const std::string& name) { return owner + '\n' + name; }
  pto::Worker& w_;
  const DaemonConfig& cfg_;
  StateDb& db_;
  mutable std::mutex mu_;
  std::map<uint64_t, TensorEntry> by_id_;
  std::map<std::string, uint64_t> by_name_;  // name_key(owner, name) -> id
  std::map<std::string, uint64_t> bytes_by_owner_;
  std::atomic<uint64_t> synced_count_{0};  // entries with synced set (mu_ for writes)
  IdSequence ids_;
  void give_back_locked(uint64_t id);
  struct Lent {
    int slices = 0;
    bool freed = false;  // its tensor was freed: the range goes with the last slice
    pto::ContinuousTensor tensor{};
  };
  std::map<uint64_t, Lent> lent_;
  std::condition_variable lent_cv_;  // the last slice came back
  std::shared_ptr<LendBook> book_;
};

struct TensorStore::LendBook {
  std::mutex mu;
  TensorStore* store = nullptr;  // null once the store is gone
};

}  // namespace ptod
