// The daemon's durable state (docs/daemon.md, "State"): an SQLite database,
// <state_dir>/ptod.db, in WAL mode. It holds the sequences that must never
// go back (job and tensor ids), the registrations, the tensor index (where
// each tensor lies in the arena file) and the job records, so that a daemon
// restarted on the same state directory carries on where the last one
// stopped.
//
// A write returns once SQLite has committed it: with [daemon] durable the
// commit is fsynced (synchronous = FULL), otherwise it is in the OS's hands
// (NORMAL: it survives a crash of ptod, not a power loss). Id reservations
// are always fsynced: an id a client saw is never handed out again.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pto/base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace ptod {

using pto::Status;

struct TensorRow {
  uint64_t id = 0;
  std::string owner, name;
  int32_t dtype = 0;
  std::vector<uint32_t> shape;
  uint64_t arena_offset = 0, bytes = 0;
  bool synced = false;  // its bytes were fsynced before it was acknowledged
};

struct CallableRow {
  std::string digest;   // hex
  std::string request;  // the RegisterRequest, its payload bytes left out (they are in the stored files)
  std::string stored;   // the stored bundle directory or blob file, "" for an import
  std::vector<std::string> owners;
  bool published = false;
};

struct JobRow {
  uint64_t id = 0;
  std::string owner;
  int state = 0;       // pto.v1.JobState
  std::string record;  // the pto.v1.JobResult as clients see it
};

class StateDb {
 public:
  StateDb() = default;
  ~StateDb();
  StateDb(const StateDb&) = delete;
  StateDb& operator=(const StateDb&) = delete;

  // Opens (creating) <dir>/ptod.db and its schema.
  Status open(const std::string& dir, bool durable);
  // Reserves `count` consecutive values of sequence `name` (starting at 1)
  // and returns the first; the reservation is on disk before it returns, so
  // values handed out are never handed out again, even after a crash or a
  // power loss (either leaves a gap instead).
  Status reserve(const std::string& name, uint64_t count, uint64_t* first);

  Status get_meta(const std::string& key, std::string* value);  // "" when absent
  Status set_meta(const std::string& key, const std::string& value);

  Status put_tensor(const TensorRow& r);
  // `fsynced`: in an fsynced commit whatever [daemon] durable says.
  Status delete_tensor(uint64_t id, bool fsynced = false);
  // Sets the tensors' `synced` in one commit, fsynced whatever [daemon]
  // durable says: cleared before a job may change bytes that are on disk,
  // it must be there before they change.
  Status set_tensors_synced(const std::vector<uint64_t>& ids, bool synced);
  Status tensors(std::vector<TensorRow>* out);

  Status put_callable(const CallableRow& r);
  Status delete_callable(const std::string& digest);
  Status callables(std::vector<CallableRow>* out);

  Status put_job(const JobRow& r);
  // Writes `rows` and deletes the records `gone` in one transaction: one
  // commit for many jobs (JobRecords' group commit).
  Status put_jobs(const std::vector<JobRow>& rows, const std::vector<uint64_t>& gone);
  Status delete_job(uint64_t id);
  // Every record, oldest first.
  Status jobs(std::vector<JobRow>* out);

 private:
  Status exec(const char* sql);
  // A cached prepared statement (reset, bindings cleared); mu_ held.
  sqlite3_stmt* stmt(const char* sql, Status* st);
  Status fsynced_transaction(const std::function<Status()>& body);
  Status step_done(sqlite3_stmt* s, const char* what);
  Status delete_row(const char* sql, uint64_t id, const char* what);
  // Rows per INSERT in put_jobs.
  static constexpr size_t kRowsPerInsert = 16;
  // Writes rows[0, n), n from 1 to kRowsPerInsert, with one statement.
  Status insert_jobs_locked(const JobRow* rows, size_t n);
  Status delete_jobs_locked(uint64_t first, uint64_t last);  // ids first..last
  Status delete_row_locked(const char* sql, uint64_t id, const char* what);
  Status error(const std::string& what);
  std::mutex mu_;
  sqlite3* db_ = nullptr;
  std::string path_;
  bool durable_ = false;
  std::map<const char*, sqlite3_stmt*> stmts_;
};

// Ids from a StateDb sequence, reserved in blocks: never one handed out
// before, also across restarts. Not thread-safe (its owner's lock).
//
// A reservation is an fsynced commit (about a millisecond here, taken under
// its owner's lock, which every job's start and end wait for), so a block
// used up within `quick` (kQuick) is followed by one twice as large, up to
// kMaxBlock, one that lasted more than twice that by one half as large (at
// least kBlock), and one in between by one of its size: a stream of jobs
// pays a reservation every one or two seconds rather than one per thousand
// jobs. A restart (a crash or not) leaves the rest of the block unused: a
// gap in the ids, never a reuse.
class IdSequence {
 public:
  static constexpr uint64_t kBlock = 1000, kMaxBlock = 64 * 1024;
  static constexpr std::chrono::milliseconds kQuick{1000};
  IdSequence(StateDb& db, std::string name, std::chrono::milliseconds quick = kQuick)
      : db_(db), name_(std::move(name)), quick_(quick) {}
  Status next(uint64_t* id);
  uint64_t block() const { return block_; }  // the size of the block reserved last

 private:
  StateDb& db_;
  std::string name_;
  uint64_t next_ = 0, limit_ = 0;  // [next_, limit_) are reserved
  std::chrono::milliseconds quick_;
  uint64_t block_ = 0;
  // When the last block was on disk (after its fsync: a slow disk does not
  // make a block look slowly used).
  std::chrono::steady_clock::time_point reserved_at_;
};

}  // namespace ptod
