// Job records written with group commit. A job's record is committed before
// the change it records is acknowledged (a job id returned, a final state
// shown), and many jobs submitted or ending at once share one SQLite
// transaction.
//
// Two ways in. write() commits on the caller's thread when no commit is
// under way (a lone job pays one commit and no thread hop): one round, with
// whatever others queued meanwhile; what they queue during it goes to the
// writer thread. defer() queues for the writer thread, which gathers
// for a moment (kGather) and commits everything in one transaction: for a
// caller with more work waiting (a Worker run thread with more jobs queued),
// which must not spend its time on commits of one record each. Either way a
// caller that finds a commit under way only queues; the record's
// continuation runs on the committing thread.
//
// A commit that fails (a full disk, a file-size limit) hands its records'
// continuations the error. One whose record must still be written - a job's
// end, unseen until it is - gives it back with retry(): the writer thread
// commits it again after a pause that grows while commits keep failing, or
// as soon as a commit succeeds.
// Trimmed records' deletes of a failed commit go with the next one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "state_db.h"

namespace ptod {

class JobRecords {
 public:
  using Then = std::function<void(const Status&)>;
  explicit JobRecords(StateDb& db);
  ~JobRecords();  // commits what is queued, then stops the writer thread
  JobRecords(const JobRecords&) = delete;
  JobRecords& operator=(const JobRecords&) = delete;

  // Writes `rows` and deletes `gone` (trimmed records); `then` runs once
  // they are committed (or the commit failed), on this thread or on the
  // thread committing them. `then` must not call write(), defer() or put().
  void write(std::vector<JobRow> rows, std::vector<uint64_t> gone, Then then);
  // The same through the writer thread: returns at once.
  void defer(std::vector<JobRow> rows, std::vector<uint64_t> gone, Then then);
  // Queued for whichever commit comes next (a write(), defer() or put() of
  // anyone): nobody is woken. For a record whose caller commits before it
  // acknowledges anything: flush(the ticket returned) at the latest.
  uint64_t queue(std::vector<JobRow> rows, std::vector<uint64_t> gone, Then then);
  // Commits what is queued; an error if the commit that carried the records
  // of `ticket` failed (the round numbered `ticket`: rounds take everything
  // queued when they start).
  Status flush(uint64_t ticket);
  // write() and wait for the commit.
  Status put(std::vector<JobRow> rows, std::vector<uint64_t> gone = {});
  // Records whose commit failed, to be committed again by the writer thread
  // after a pause: kRetryFirst after one failed commit, doubled by each
  // further one in a row, up to kRetryMost; at once after a commit (of any
  // records) succeeds; once more when the writer stops. `then` as for
  // write(). False, and nothing kept, once the writer is stopping.
  bool retry(std::vector<JobRow> rows, Then then);

  // Whether records wait for a commit (queued, or taken by none yet).
  bool queued();
  // SQLite transactions that wrote records so far, and that failed (the
  // daemon's metrics).
  uint64_t commits() const { return commits_.load(std::memory_order_relaxed); }
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

  // How long the writer thread gathers records before a commit.
  static constexpr std::chrono::microseconds kGather{200};
  static constexpr std::chrono::milliseconds kRetryFirst{50};
  static constexpr std::chrono::milliseconds kRetryMost{2000};

 private:
  void push_locked(std::vector<JobRow>& rows, std::vector<uint64_t>& gone, Then then);
  // Commits one round, or rounds until none is queued; mu_ held on entry
  // and exit.
  void commit_rounds(std::unique_lock<std::mutex>& lk, bool until_empty);
  void writer();
  // Whether round `round` committed (finished), or its failure.
  Status round_status_locked(uint64_t round) const;
  // Moves the records given to retry() to the queue, for the next commit.
  void take_retries_locked();

  StateDb& db_;
  std::mutex mu_;
  std::condition_variable wake_;  // the writer thread: deferred records, or stop
  std::vector<JobRow> rows_;      // queued for the next commit
  std::vector<uint64_t> gone_;
  std::vector<Then> then_;
  bool committing_ = false;
  bool deferred_ = false;  // defer() queued something the writer thread has not taken
  bool stop_ = false;
  uint64_t rounds_ = 0;        // rounds started
  uint64_t finished_rounds_ = 0;  // rounds whose commit is done (their continuations may still run)
  // The newest rounds whose commit failed, and why (flush's answer).
  static constexpr size_t kFailedKept = 256;
  std::deque<std::pair<uint64_t, Status>> failed_;
  std::vector<JobRow> retry_rows_;  // given to retry(), committed again at retry_at_
  std::vector<Then> retry_then_;
  std::chrono::steady_clock::time_point retry_at_;
  uint32_t failed_streak_ = 0;  // commits failed in a row
  std::atomic<uint64_t> commits_{0};
  std::atomic<uint64_t> failures_{0};
  std::thread writer_;
};

}  // namespace ptod
