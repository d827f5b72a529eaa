// JobRecords alone (no daemon): group commit of job records into a real
// SQLite state database in a temporary directory, from many threads at once
// through write(), defer() and put(). Every record is committed exactly once
// and every continuation runs exactly once, after its commit.
#include <sys/resource.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <functional>
#include <thread>
#include <vector>

#include <cstdlib>
#include <string>

#include "job_records.h"
#include "state_db.h"

using namespace ptod;

namespace {
std::string temp_dir() {
  std::string t = "/tmp/ptod-records-XXXXXX";
  REQUIRE(mkdtemp(t.data()) != nullptr);
  return t;
}
}  // namespace

TEST_CASE("job records from many threads: each committed once, each continuation run once after its commit") {
  const std::string dir = temp_dir();
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  constexpr int kThreads = 6, kEach = 400;
  std::vector<std::atomic<int>> ran(kThreads * kEach);
  std::atomic<int> bad_status{0};
  {
    JobRecords records(db);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          const int n = t * kEach + i;
          JobRow row;
          row.id = uint64_t(n) + 1;
          row.owner = std::to_string(t);
          row.state = 3;
          row.record = std::string(64, char('a' + t));
          auto then = [&, n](const Status& s) {
            if (!s.ok()) ++bad_status;
            ++ran[size_t(n)];
          };
          switch ((t + i) % 3) {
            case 0: records.write({row}, {}, then); break;
            case 1: records.defer({row}, {}, then); break;
            default:
              if (!records.put({row}).ok()) ++bad_status;
              ++ran[size_t(n)];  // put returns after its commit
          }
        }
      });
    for (auto& t : ts) t.join();
    // Whatever was deferred is committed before the records object goes.
  }
  CHECK(bad_status == 0);
  for (auto& r : ran) REQUIRE(r.load() == 1);
  std::vector<JobRow> rows;
  REQUIRE(db.jobs(&rows).ok());
  REQUIRE(rows.size() == size_t(kThreads * kEach));
  for (size_t i = 0; i < rows.size(); ++i) REQUIRE(rows[i].id == i + 1);
}

TEST_CASE("job records: deletes go with a commit - a deferred record alone is committed after the gather") {
  const std::string dir = temp_dir();
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  JobRecords records(db);
  std::vector<JobRow> rows;
  const std::string owner(1, 'o');
  for (uint64_t id = 1; id <= 5; ++id) {
    JobRow r;
    r.id = id;
    r.owner = owner;
    rows.push_back(r);
  }
  REQUIRE(records.put(rows).ok());
  REQUIRE(records.put({}, {1, 2}).ok());
  std::atomic<bool> done{false};
  JobRow six;
  six.id = 6;
  six.owner = owner;
  records.defer({six}, {3}, [&](const Status& s) { done = s.ok(); });
  // The writer thread commits it within moments (kGather), no other caller needed.
  for (int i = 0; i < 500 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(done);
  std::vector<JobRow> left;
  REQUIRE(db.jobs(&left).ok());
  REQUIRE(left.size() == 3);
  CHECK(left[0].id == 4);
  CHECK(left[2].id == 6);
}

TEST_CASE("job records: a job's first record and its end in one commit - the end is what is written") {
  const std::string dir = temp_dir();
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  JobRecords records(db);
  const auto row = [](uint64_t id, int state, const std::string& record) {
    JobRow r;
    r.id = id;
    r.owner = "o";
    r.state = state;
    r.record = record;
    return r;
  };
  int ran = 0;
  const auto then = [&](const Status& s) { ran += s.ok() ? 1 : 100; };
  // Queued, as a waited-for job's first record and then its end are; the
  // flush commits them together.
  const uint64_t ticket = records.queue({row(7, 1, "queued"), row(8, 1, "other")}, {}, then);
  records.queue({row(9, 1, "third")}, {}, then);
  const uint64_t later = records.queue({row(7, 3, "ended"), row(9, 4, "failed")}, {}, then);
  CHECK(later >= ticket);
  const uint64_t before = records.commits();
  REQUIRE(records.flush(later).ok());
  CHECK(records.commits() == before + 1);
  CHECK(ran == 3);
  std::vector<JobRow> rows;
  REQUIRE(db.jobs(&rows).ok());
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].id == 7);
  CHECK(rows[0].state == 3);
  CHECK(rows[0].record == "ended");
  CHECK(rows[1].record == "other");
  CHECK(rows[2].state == 4);
  CHECK(rows[2].record == "failed");
}

// The disk fills while this object lives: a file-size limit of one byte on
// this process makes the state database's writes fail (EFBIG; SIGXFSZ
// ignored meanwhile, as ptod does).
struct DiskFull {
  rlimit was{};
  DiskFull() {
    std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(getrlimit(RLIMIT_FSIZE, &was) == 0);
    const rlimit full{1, was.rlim_max};
    REQUIRE(setrlimit(RLIMIT_FSIZE, &full) == 0);
  }
  ~DiskFull() {
    setrlimit(RLIMIT_FSIZE, &was);
    std::signal(SIGXFSZ, SIG_DFL);
  }
  DiskFull(const DiskFull&) = delete;
  DiskFull& operator=(const DiskFull&) = delete;
};

TEST_CASE("job records: a failed commit - flush answers for its own, records given back are committed later") {
  const std::string dir = temp_dir();
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  auto row = [](uint64_t id, const char* record) {
    JobRow r;
    r.id = id;
    r.owner = "o";
    r.state = 3;
    r.record = record;
    return r;
  };
  // A job's end, as JobManager gives it: back to the writer after a
  // failure, written once a commit succeeds. Its copies, on the writer
  // thread, refer to these: they outlive `records`.
  std::atomic<int> given_back{0}, written{0};
  // When it was given back the fifth time (its 1.6 s pause begins) and
  // when it was written: on the writer thread, read after the counts.
  std::atomic<int64_t> fifth_ns{0}, written_ns{0};
  const auto ns = [] {
    return int64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  };
  std::function<void(const Status&)> end;
  JobRecords records(db);
  end = [&](const Status& s) {
    if (s.ok()) {
      written_ns = ns();
      ++written;
      return;
    }
    if (given_back == 4) fifth_ns = ns();
    ++given_back;
    records.retry({row(3, "end")}, end);
  };
  const uint64_t first = records.queue({row(1, "one")}, {}, [](const Status&) {});
  REQUIRE(records.flush(first).ok());
  {
    DiskFull full;
    const uint64_t second = records.queue({row(2, "two")}, {}, [](const Status&) {});
    CHECK_FALSE(records.flush(second).ok());
    CHECK(records.flush(first).ok());  // its own commit succeeded: a later failure is not its
    CHECK(records.failures() == 1);
    records.write({row(3, "end")}, {}, end);
    // Given back five times while the disk stays full, each pause twice the
    // last (100 ms first: the failed flush above is one failure in the row
    // already): the next pause is 1.6 s.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (given_back < 5 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(given_back == 5);
    CHECK(written == 0);
  }
  // Space again: the next commit that succeeds brings the end forward,
  // well inside its 1.6 s pause.
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(records.put({row(4, "four")}).ok());
  const auto until = t0 + std::chrono::seconds(10);
  while (written == 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(written == 1);
  // From the fifth give-back: the pause would end 1,600 ms on; the test's
  // own steps to the commit and the two commits take 1-5 ms here.
  const double since_fifth_ms = double(written_ns - fifth_ns) / 1e6;
  const double since_commit_ms =
      double(written_ns -
             int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count())) /
      1e6;
  INFO("written " << since_fifth_ms << " ms after the fifth give-back, " << since_commit_ms
                  << " ms after the commit began");
  CHECK(since_fifth_ms < 1000);
  CHECK(given_back == 5);
  std::vector<JobRow> rows;
  REQUIRE(db.jobs(&rows).ok());
  REQUIRE(rows.size() == 3);  // the second was never written
  CHECK(rows[0].id == 1);
  CHECK(rows[1].id == 3);
  CHECK(rows[2].id == 4);
}

TEST_CASE("put_jobs: rows beyond one statement's worth, a row given twice, deletes in runs and apart") {
  const std::string dir = temp_dir();
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  // 37 rows, each row's owner, state and record its own, and two given
  // twice - 39 rows: two statements of 16 (StateDb::kRowsPerInsert) and one
  // of 7.
  std::vector<JobRow> rows;
  for (uint64_t id = 1; id <= 37; ++id) {
    JobRow r;
    r.id = id;
    r.owner = "owner-" + std::to_string(id);
    r.state = int(id % 7);
    r.record = std::string(size_t(id), char('a' + id % 26));
    rows.push_back(r);
  }
  // Id 8 again within the first statement and id 20 again in the last, each
  // after the first: the last one given is what stays.
  JobRow eight = rows[7];
  eight.owner = "later";
  eight.record = "replaced";
  rows.insert(rows.begin() + 12, eight);
  JobRow again = rows[20];
  REQUIRE(again.id == 20);
  again.owner = "later";
  again.record = "replaced";
  rows.push_back(again);
  REQUIRE(rows.size() == 39);
  REQUIRE(db.put_jobs(rows, {}).ok());
  // Runs (3-6, 30-32), lone ids (9, 17, 37), an id given twice, one that
  // was never written (40), out of order.
  REQUIRE(db.put_jobs({}, {32, 3, 9, 4, 5, 6, 17, 30, 31, 40, 9, 37}).ok());
  std::vector<JobRow> left;
  REQUIRE(db.jobs(&left).ok());
  std::vector<uint64_t> ids;
  for (const JobRow& r : left) ids.push_back(r.id);
  CHECK(ids == std::vector<uint64_t>{1,  2,  7,  8,  10, 11, 12, 13, 14, 15, 16, 18, 19, 20,
                                     21, 22, 23, 24, 25, 26, 27, 28, 29, 33, 34, 35, 36});
  for (const JobRow& r : left) {
    if (r.id == 8 || r.id == 20) {
      CHECK(r.owner == "later");
      CHECK(r.record == "replaced");
      continue;
    }
    CHECK(r.owner == "owner-" + std::to_string(r.id));
    CHECK(r.state == int(r.id % 7));
    CHECK(r.record == std::string(size_t(r.id), char('a' + r.id % 26)));
  }
  // Rows and deletes in one commit: a row written and deleted in the same
  // call is gone (the deletes follow the rows).
  JobRow fifty;
  fifty.id = 50;
  fifty.owner = "x";
  REQUIRE(db.put_jobs({fifty}, {50, 1, 2}).ok());
  REQUIRE(db.jobs(&left).ok());
  REQUIRE(left.size() == 25);
  CHECK(left.front().id == 7);
  CHECK(left.back().id == 36);
}

TEST_CASE("IdSequence: blocks used up quickly grow to kMaxBlock - ids never repeat across a reopen") {
  const std::string dir = temp_dir();
  uint64_t last = 0;
  {
    StateDb db;
    REQUIRE(db.open(dir, false).ok());
    IdSequence ids(db, "job");
    // Taken in one go: each block is used up at once, so each is twice the last.
    std::vector<uint64_t> blocks;
    for (uint64_t n = 0; n < 3 * IdSequence::kMaxBlock; ++n) {
      uint64_t id = 0;
      REQUIRE(ids.next(&id).ok());
      REQUIRE(id == last + 1);  // consecutive within this process
      last = id;
      if (blocks.empty() || ids.block() != blocks.back()) blocks.push_back(ids.block());
    }
    REQUIRE(blocks.size() >= 3);
    CHECK(blocks.front() == IdSequence::kBlock);
    CHECK(blocks[1] == 2 * IdSequence::kBlock);
    CHECK(blocks.back() == IdSequence::kMaxBlock);
  }
  // Reopened (as after a crash): the first id is past everything reserved,
  // and the first block is small again.
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  IdSequence ids(db, "job");
  uint64_t id = 0;
  REQUIRE(ids.next(&id).ok());
  CHECK(id > last);
  CHECK(ids.block() == IdSequence::kBlock);
}

TEST_CASE("IdSequence: a block that lasted more than twice `quick` is followed by one half its size") {
  const std::string dir = temp_dir();
  StateDb db;
  REQUIRE(db.open(dir, false).ok());
  IdSequence ids(db, "job", std::chrono::milliseconds(200));
  uint64_t id = 0, last = 0;
  auto take = [&](uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) {
      REQUIRE(ids.next(&id).ok());
      REQUIRE(id == last + 1);
      last = id;
    }
  };
  take(1);
  CHECK(ids.block() == IdSequence::kBlock);
  // Blocks of 1,000, 2,000 and 4,000 used up at once; the next is 8,000.
  take(IdSequence::kBlock + 2 * IdSequence::kBlock + 4 * IdSequence::kBlock);
  CHECK(ids.block() == 8 * IdSequence::kBlock);
  // That one used up slowly: the next is half its size.
  take(8 * IdSequence::kBlock - 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  take(1);  // the block's last id
  CHECK(ids.block() == 8 * IdSequence::kBlock);
  take(1);  // a new block
  CHECK(ids.block() == 4 * IdSequence::kBlock);
}
