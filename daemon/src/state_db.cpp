#include "state_db.h"

#include <fmt/format.h>
#include <sqlite3.h>

namespace ptod {

namespace {
Status db_error(const std::string& path, const std::string& what, sqlite3* db) {
  return Status::Error(pto::kStorageError,
                       fmt::format("state database {}: {}: {}", path, what, db ? sqlite3_errmsg(db) : "out of memory"));
}
}  // namespace

StateDb::~StateDb() {
  if (db_) sqlite3_close(db_);
}

Status StateDb::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    Status s = Status::Error(pto::kStorageError, fmt::format("state database {}: {}", path_, err ? err : "?"));
    sqlite3_free(err);
    return s;
  }
  return Status::Ok();
}

Status StateDb::open(const std::string& dir) {
  path_ = dir + "/ptod.db";
  if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK)
    return db_error(path_, "cannot open", db_);
  sqlite3_busy_timeout(db_, 5000);  // bounded: another process holding it is an error, not a hang
  // WAL: readers never block the writer; FULL: a committed reservation is on
  // disk before it is used.
  if (Status s = exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"); !s.ok()) return s;
  return exec("CREATE TABLE IF NOT EXISTS sequences (name TEXT PRIMARY KEY, next INTEGER NOT NULL)");
}

Status StateDb::reserve(const std::string& name, uint64_t count, uint64_t* first) {
  if (!db_) return Status::Error(pto::kStorageError, "state database: not open");
  if (Status s = exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  auto rollback = [&](Status s) {
    (void)exec("ROLLBACK");
    return s;
  };
  sqlite3_stmt* st = nullptr;
  uint64_t next = 1;
  if (sqlite3_prepare_v2(db_, "SELECT next FROM sequences WHERE name = ?1", -1, &st, nullptr) != SQLITE_OK)
    return rollback(db_error(path_, "reading a sequence", db_));
  sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) next = static_cast<uint64_t>(sqlite3_column_int64(st, 0));
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return rollback(db_error(path_, "reading a sequence", db_));
  if (sqlite3_prepare_v2(db_,
                         "INSERT INTO sequences (name, next) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET next = ?2",
                         -1, &st, nullptr) != SQLITE_OK)
    return rollback(db_error(path_, "writing a sequence", db_));
  sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  const uint64_t after = next + count;
  sqlite3_bind_int64(st, 2, static_cast<sqlite3_int64>(after));
  const int w = sqlite3_step(st);
  sqlite3_finalize(st);
  if (w != SQLITE_DONE) return rollback(db_error(path_, "writing a sequence", db_));
  if (Status s = exec("COMMIT"); !s.ok()) return rollback(s);
  *first = next;
  return Status::Ok();
}

}  // namespace ptod
