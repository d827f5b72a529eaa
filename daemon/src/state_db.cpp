#include "state_db.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>

namespace ptod {

namespace {
constexpr const char* kSchema = R"(
CREATE TABLE IF NOT EXISTS sequences (name TEXT PRIMARY KEY, next INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tensors (
  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, dtype INTEGER NOT NULL,
  shape TEXT NOT NULL, arena_offset INTEGER NOT NULL, bytes INTEGER NOT NULL, synced INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS callables (
  digest TEXT PRIMARY KEY, request BLOB NOT NULL, stored TEXT NOT NULL, owners TEXT NOT NULL,
  published INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY, owner TEXT NOT NULL, state INTEGER NOT NULL, record BLOB NOT NULL);
)";

// Each id sequence past the highest id its table holds ("WHERE true": an
// INSERT ... SELECT with an upsert needs a WHERE to parse).
constexpr const char* kRaiseSequences = R"(
INSERT INTO sequences (name, next) SELECT 'tensor', COALESCE(MAX(id), 0) + 1 FROM tensors WHERE true
  ON CONFLICT(name) DO UPDATE SET next = MAX(next, excluded.next);
INSERT INTO sequences (name, next) SELECT 'job', COALESCE(MAX(id), 0) + 1 FROM jobs WHERE true
  ON CONFLICT(name) DO UPDATE SET next = MAX(next, excluded.next);
)";

std::string join(const std::vector<std::string>& v, char sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? std::string(1, sep) : "") + v[i];
  return out;
}
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, sep);)
    if (!x.empty()) out.push_back(x);
  return out;
}
std::string text(sqlite3_stmt* s, int col) {
  const auto* p = sqlite3_column_text(s, col);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, col))) : "";
}
std::string blob(sqlite3_stmt* s, int col) {
  const void* p = sqlite3_column_blob(s, col);
  return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, col))) : "";
}
int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }
}  // namespace

StateDb::~StateDb() {
  for (auto& [sql, s] : stmts_) sqlite3_finalize(s);
  if (db_) sqlite3_close(db_);
}

// Errors name no path: a failed commit reaches clients ("the job is not
// queued: ..."), who have no business with the daemon's state directory.
Status StateDb::error(const std::string& what) {
  return Status::Error(pto::kStorageError,
                       fmt::format("the state database: {}: {}", what, db_ ? sqlite3_errmsg(db_) : "not open"));
}

Status StateDb::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    Status s = Status::Error(pto::kStorageError, fmt::format("the state database: {}", err ? err : "?"));
    sqlite3_free(err);
    return s;
  }
  return Status::Ok();
}

sqlite3_stmt* StateDb::stmt(const char* sql, Status* st) {
  if (!db_) {
    *st = Status::Error(pto::kStorageError, "state database: not open");
    return nullptr;
  }
  auto it = stmts_.find(sql);
  if (it == stmts_.end()) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) {
      *st = error("preparing a statement");
      return nullptr;
    }
    it = stmts_.emplace(sql, s).first;
  }
  sqlite3_reset(it->second);
  sqlite3_clear_bindings(it->second);
  return it->second;
}

Status StateDb::step_done(sqlite3_stmt* s, const char* what) {
  const int rc = sqlite3_step(s);
  Status st = rc == SQLITE_DONE ? Status::Ok() : error(what);
  sqlite3_reset(s);
  return st;
}

Status StateDb::open(const std::string& dir, bool durable) {
  std::lock_guard<std::mutex> g(mu_);
  path_ = dir + "/ptod.db";
  durable_ = durable;
  // NOMUTEX: mu_ serializes every use of the connection, so SQLite's own
  // lock around each call would only be taken uncontended, a few per row.
  if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) !=
      SQLITE_OK)
    return error("cannot open " + path_);  // at start-up, for the operator: the path helps

  sqlite3_busy_timeout(db_, 5000);  // bounded: another process holding it is an error, not a hang
  // Exclusive: this process alone uses the database (it holds the state
  // directory's lock), so no file lock is taken per transaction. WAL: a
  // commit is one append.
  if (Status s = exec(durable ? "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                              : "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
      !s.ok())
    return s;
  if (Status s = exec(kSchema); !s.ok()) return s;
  // A sequence never hands out an id a row already has: one lost or set back
  // (a restored backup, an edited database) would give a new tensor or job
  // the id of another principal's, and its row would replace theirs.
  return exec(kRaiseSequences);
}

// One transaction, always fsynced (synchronous = FULL for it alone when the
// daemon is not durable); rolled back when `body` or the commit fails. mu_ held.
Status StateDb::fsynced_transaction(const std::function<Status()>& body) {
  if (!db_) return Status::Error(pto::kStorageError, "state database: not open");
  if (!durable_)
    if (Status s = exec("PRAGMA synchronous=FULL"); !s.ok()) return s;
  Status s = exec("BEGIN IMMEDIATE");
  if (s.ok()) s = body();
  if (s.ok()) s = exec("COMMIT");
  if (!s.ok()) (void)exec("ROLLBACK");
  if (!durable_) (void)exec("PRAGMA synchronous=NORMAL");
  return s;
}

Status StateDb::reserve(const std::string& name, uint64_t count, uint64_t* first) {
  std::lock_guard<std::mutex> g(mu_);
  // Always fsynced, whatever [daemon] durable says: the one write that must
  // survive a power loss for ids never to go back.
  uint64_t next = 1;
  Status s = fsynced_transaction([&] {
    Status st;
    sqlite3_stmt* q = stmt("SELECT next FROM sequences WHERE name = ?1", &st);
    if (!q) return st;
    sqlite3_bind_text(q, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) next = static_cast<uint64_t>(sqlite3_column_int64(q, 0));
    sqlite3_reset(q);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return error("reading a sequence");
    sqlite3_stmt* w =
        stmt("INSERT INTO sequences (name, next) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET next = ?2", &st);
    if (!w) return st;
    sqlite3_bind_text(w, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(w, 2, i64(next + count));
    return step_done(w, "writing a sequence");
  });
  if (s.ok()) *first = next;
  return s;
}

Status StateDb::get_meta(const std::string& key, std::string* value) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q = stmt("SELECT value FROM meta WHERE key = ?1", &st);
  if (!q) return st;
  sqlite3_bind_text(q, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  value->clear();
  const int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) *value = text(q, 0);
  sqlite3_reset(q);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? Status::Ok() : error("reading meta");
}

Status StateDb::set_meta(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q =
      stmt("INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2", &st);
  if (!q) return st;
  sqlite3_bind_text(q, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 2, value.c_str(), -1, SQLITE_TRANSIENT);
  return step_done(q, "writing meta");
}

Status StateDb::put_tensor(const TensorRow& r) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q = stmt(
      "INSERT OR REPLACE INTO tensors (id, owner, name, dtype, shape, arena_offset, bytes, synced) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
      &st);
  if (!q) return st;
  std::vector<std::string> dims;
  for (uint32_t d : r.shape) dims.push_back(std::to_string(d));
  const std::string shape = join(dims, ',');
  sqlite3_bind_int64(q, 1, i64(r.id));
  sqlite3_bind_text(q, 2, r.owner.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 3, r.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q, 4, r.dtype);
  sqlite3_bind_text(q, 5, shape.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(q, 6, i64(r.arena_offset));
  sqlite3_bind_int64(q, 7, i64(r.bytes));
  sqlite3_bind_int(q, 8, r.synced ? 1 : 0);
  return step_done(q, "writing a tensor");
}

Status StateDb::delete_row(const char* sql, uint64_t id, const char* what) {
  std::lock_guard<std::mutex> g(mu_);
  return delete_row_locked(sql, id, what);
}

Status StateDb::delete_row_locked(const char* sql, uint64_t id, const char* what) {
  Status st;
  sqlite3_stmt* q = stmt(sql, &st);
  if (!q) return st;
  sqlite3_bind_int64(q, 1, i64(id));
  return step_done(q, what);
}

Status StateDb::delete_tensor(uint64_t id, bool fsynced) {
  if (!fsynced) return delete_row("DELETE FROM tensors WHERE id = ?1", id, "deleting a tensor");
  std::lock_guard<std::mutex> g(mu_);
  return fsynced_transaction(
      [&] { return delete_row_locked("DELETE FROM tensors WHERE id = ?1", id, "deleting a tensor"); });
}

Status StateDb::set_tensors_synced(const std::vector<uint64_t>& ids, bool synced) {
  std::lock_guard<std::mutex> g(mu_);
  return fsynced_transaction([&] {
    Status st;
    sqlite3_stmt* q = stmt("UPDATE tensors SET synced = ?1 WHERE id = ?2", &st);
    if (!q) return st;
    for (uint64_t id : ids) {
      sqlite3_bind_int(q, 1, synced ? 1 : 0);
      sqlite3_bind_int64(q, 2, i64(id));
      if (Status s = step_done(q, "marking whether a tensor's bytes are on disk"); !s.ok()) return s;
    }
    return Status::Ok();
  });
}

Status StateDb::tensors(std::vector<TensorRow>* out) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q =
      stmt("SELECT id, owner, name, dtype, shape, arena_offset, bytes, synced FROM tensors ORDER BY id", &st);
  if (!q) return st;
  out->clear();
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    TensorRow r;
    r.id = static_cast<uint64_t>(sqlite3_column_int64(q, 0));
    r.owner = text(q, 1);
    r.name = text(q, 2);
    r.dtype = sqlite3_column_int(q, 3);
    for (const std::string& d : split(text(q, 4), ','))
      r.shape.push_back(static_cast<uint32_t>(std::strtoul(d.c_str(), nullptr, 10)));
    r.arena_offset = static_cast<uint64_t>(sqlite3_column_int64(q, 5));
    r.bytes = static_cast<uint64_t>(sqlite3_column_int64(q, 6));
    r.synced = sqlite3_column_int(q, 7) != 0;
    out->push_back(std::move(r));
  }
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? Status::Ok() : error("reading tensors");
}

Status StateDb::put_callable(const CallableRow& r) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q = stmt(
      "INSERT OR REPLACE INTO callables (digest, request, stored, owners, published) VALUES (?1, ?2, ?3, ?4, ?5)", &st);
  if (!q) return st;
  const std::string owners = join(r.owners, ' ');
  sqlite3_bind_text(q, 1, r.digest.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_blob(q, 2, r.request.data(), static_cast<int>(r.request.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 3, r.stored.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 4, owners.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q, 5, r.published ? 1 : 0);
  return step_done(q, "writing a registration");
}

Status StateDb::delete_callable(const std::string& digest) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q = stmt("DELETE FROM callables WHERE digest = ?1", &st);
  if (!q) return st;
  sqlite3_bind_text(q, 1, digest.c_str(), -1, SQLITE_TRANSIENT);
  return step_done(q, "deleting a registration");
}

Status StateDb::callables(std::vector<CallableRow>* out) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q = stmt("SELECT digest, request, stored, owners, published FROM callables ORDER BY rowid", &st);
  if (!q) return st;
  out->clear();
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    CallableRow r;
    r.digest = text(q, 0);
    r.request = blob(q, 1);
    r.stored = text(q, 2);
    r.owners = split(text(q, 3), ' ');
    r.published = sqlite3_column_int(q, 4) != 0;
    out->push_back(std::move(r));
  }
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? Status::Ok() : error("reading registrations");
}

Status StateDb::put_job(const JobRow& r) {
  std::lock_guard<std::mutex> g(mu_);
  return insert_jobs_locked(&r, 1);
}

Status StateDb::put_jobs(const std::vector<JobRow>& rows, const std::vector<uint64_t>& gone) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* begin = stmt("BEGIN", &st);
  sqlite3_stmt* commit = begin ? stmt("COMMIT", &st) : nullptr;
  if (!commit) return st;
  if (st = step_done(begin, "beginning a transaction"); !st.ok()) return st;
  for (size_t i = 0; st.ok() && i < rows.size(); i += kRowsPerInsert)
    st = insert_jobs_locked(&rows[i], std::min(kRowsPerInsert, rows.size() - i));
  // Trimmed jobs end in order, so their ids mostly run consecutively: one
  // statement per run of ids, not one per record.
  std::vector<uint64_t> ids(gone);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (size_t a = 0; st.ok() && a < ids.size();) {
    size_t b = a;
    while (b + 1 < ids.size() && ids[b + 1] == ids[b] + 1) ++b;
    st = delete_jobs_locked(ids[a], ids[b]);
    a = b + 1;
  }
  if (!st.ok()) {
    (void)exec("ROLLBACK");
    return st;
  }
  st = step_done(commit, "committing job records");
  // SQLite rolls back a COMMIT that failed for a full disk or an I/O error
  // itself; one that failed otherwise (SQLITE_BUSY) leaves its transaction
  // open, and every later BEGIN would fail too.
  if (!st.ok() && !sqlite3_get_autocommit(db_)) (void)exec("ROLLBACK");
  return st;
}

Status StateDb::insert_jobs_locked(const JobRow* rows, size_t n) {
  // One statement per count of rows, 1 to kRowsPerInsert, each prepared
  // once: a statement's fixed cost (its program's start and end) is shared
  // by its rows. The keys of stmts_ are these strings' addresses.
  static const std::array<std::string, kRowsPerInsert + 1> kSql = [] {
    std::array<std::string, kRowsPerInsert + 1> sql;
    for (size_t k = 1; k <= kRowsPerInsert; ++k) {
      sql[k] = "INSERT OR REPLACE INTO jobs (id, owner, state, record) VALUES ";
      for (size_t i = 0; i < k; ++i)
        sql[k] += fmt::format("{}(?{}, ?{}, ?{}, ?{})", i ? ", " : "", 4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4);
    }
    return sql;
  }();
  Status st;
  sqlite3_stmt* q = stmt(kSql[n].c_str(), &st);
  if (!q) return st;
  // SQLITE_STATIC: the rows outlive the statement's step (no copy of each
  // record into SQLite first); the bindings left behind are cleared before
  // the statement's next use (stmt()).
  for (size_t i = 0; i < n; ++i) {
    const JobRow& r = rows[i];
    const int at = static_cast<int>(4 * i);
    sqlite3_bind_int64(q, at + 1, i64(r.id));
    sqlite3_bind_text(q, at + 2, r.owner.data(), static_cast<int>(r.owner.size()), SQLITE_STATIC);
    sqlite3_bind_int(q, at + 3, r.state);
    sqlite3_bind_blob(q, at + 4, r.record.data(), static_cast<int>(r.record.size()), SQLITE_STATIC);
  }
  return step_done(q, "writing a job record");
}

// Ids come from a sequence SQLite keeps as a signed 64-bit integer: the
// casts below never wrap.
Status StateDb::delete_jobs_locked(uint64_t first, uint64_t last) {
  Status st;
  sqlite3_stmt* q = stmt("DELETE FROM jobs WHERE id BETWEEN ?1 AND ?2", &st);
  if (!q) return st;
  sqlite3_bind_int64(q, 1, i64(first));
  sqlite3_bind_int64(q, 2, i64(last));
  return step_done(q, "deleting a job record");
}

Status StateDb::delete_job(uint64_t id) {
  return delete_row("DELETE FROM jobs WHERE id = ?1", id, "deleting a job record");
}

Status StateDb::jobs(std::vector<JobRow>* out) {
  std::lock_guard<std::mutex> g(mu_);
  Status st;
  sqlite3_stmt* q = stmt("SELECT id, owner, state, record FROM jobs ORDER BY id", &st);
  if (!q) return st;
  out->clear();
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    JobRow r;
    r.id = static_cast<uint64_t>(sqlite3_column_int64(q, 0));
    r.owner = text(q, 1);
    r.state = sqlite3_column_int(q, 2);
    r.record = blob(q, 3);
    out->push_back(std::move(r));
  }
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? Status::Ok() : error("reading job records");
}

Status IdSequence::next(uint64_t* id) {
  if (next_ == limit_) {  // a new block, on disk before any of it is used
    const auto lasted = std::chrono::steady_clock::now() - reserved_at_;
    uint64_t block = kBlock;
    if (block_ != 0)
      block = lasted < quick_       ? std::min(block_ * 2, kMaxBlock)
              : lasted > 2 * quick_ ? std::max(block_ / 2, kBlock)
                                    : block_;
    uint64_t first = 0;
    if (Status s = db_.reserve(name_, block, &first); !s.ok()) return s;
    next_ = first;
    limit_ = first + block;
    block_ = block;
    reserved_at_ = std::chrono::steady_clock::now();
  }
  *id = next_++;
  return Status::Ok();
}

}  // namespace ptod
