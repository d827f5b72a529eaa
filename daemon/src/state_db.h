// The daemon's durable state (docs/daemon.md, "State"): an SQLite database,
// <state_dir>/ptod.db, in WAL mode. Today it holds the sequences that must
// never go back — job ids — so that a restarted daemon never gives an id a
// client has seen to another job (and never overwrites its trace).
#pragma once

#include <cstdint>
#include <string>

#include "pto/base/status.h"

struct sqlite3;

namespace ptod {

using pto::Status;

class StateDb {
 public:
  StateDb() = default;
  ~StateDb();
  StateDb(const StateDb&) = delete;
  StateDb& operator=(const StateDb&) = delete;

  // Opens (creating) <dir>/ptod.db and its schema.
  Status open(const std::string& dir);
  // Reserves `count` consecutive values of sequence `name` (starting at 1)
  // and returns the first; the reservation is durable before it returns, so
  // values handed out are never handed out again, even after a crash (a
  // crash leaves a gap instead).
  Status reserve(const std::string& name, uint64_t count, uint64_t* first);

 private:
  Status exec(const char* sql);
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace ptod
