#include "job_records.h"

#include <algorithm>
#include <unordered_set>

namespace ptod {
namespace {

// The last row of each id, in order: a job's first record and its end
// queued for the same commit (a waited-for job that ended in time) are
// written as its end alone, which would replace the first anyway.
void keep_last_of_each(std::vector<JobRow>& rows) {
  if (rows.size() < 2) return;
  std::unordered_set<uint64_t> later;
  std::vector<bool> keep(rows.size());
  for (size_t i = rows.size(); i-- > 0;) keep[i] = later.insert(rows[i].id).second;
  size_t out = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    if (keep[i]) {
      if (out != i) rows[out] = std::move(rows[i]);
      ++out;
    }
  rows.resize(out);
}

}  // namespace

JobRecords::JobRecords(StateDb& db) : db_(db), writer_([this] { writer(); }) {}

JobRecords::~JobRecords() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  writer_.join();
}

void JobRecords::push_locked(std::vector<JobRow>& rows, std::vector<uint64_t>& gone, Then then) {
  for (JobRow& r : rows) rows_.push_back(std::move(r));
  gone_.insert(gone_.end(), gone.begin(), gone.end());
  then_.push_back(std::move(then));
}

void JobRecords::commit_rounds(std::unique_lock<std::mutex>& lk, bool until_empty) {
  // Every round takes all that is queued. The writer thread goes on until a
  // round finds none; a caller of write() commits one round — its own
  // record's — and leaves what others queued meanwhile to the writer thread,
  // so that a stream of job ends cannot keep it from its own work.
  do {
    std::vector<JobRow> batch;
    std::vector<uint64_t> batch_gone;
    std::vector<Then> done;
    batch.swap(rows_);
    batch_gone.swap(gone_);
    done.swap(then_);
    deferred_ = false;
    const uint64_t round = ++rounds_;
    lk.unlock();
    keep_last_of_each(batch);
    const bool any = !batch.empty() || !batch_gone.empty();
    const Status s = any ? db_.put_jobs(batch, batch_gone) : Status::Ok();
    if (any) (s.ok() ? commits_ : failures_).fetch_add(1, std::memory_order_relaxed);
    lk.lock();
    if (!s.ok()) {
      failed_.emplace_back(round, s);
      if (failed_.size() > kFailedKept) failed_.pop_front();
      gone_.insert(gone_.end(), batch_gone.begin(), batch_gone.end());  // still to delete
      ++failed_streak_;
    } else if (any) {
      failed_streak_ = 0;
      // The database takes commits again: what waits out a pause goes now.
      if (!retry_then_.empty()) take_retries_locked();
    }
    // Before the continuations: what they make visible (a job's end), a
    // flush() then finds committed without a round of its own.
    finished_rounds_ = round;  // rounds run one at a time, in order
    lk.unlock();
    for (auto& f : done) f(s);
    lk.lock();
  } while (until_empty && !then_.empty());
  committing_ = false;
  if (!then_.empty()) deferred_ = true;  // the writer thread takes the rest
  if (stop_ || deferred_) wake_.notify_one();
}

void JobRecords::write(std::vector<JobRow> rows, std::vector<uint64_t> gone, Then then) {
  std::unique_lock<std::mutex> lk(mu_);
  push_locked(rows, gone, std::move(then));
  if (committing_) return;  // the committing thread takes ours with its next round
  committing_ = true;
  commit_rounds(lk, false);
}

void JobRecords::defer(std::vector<JobRow> rows, std::vector<uint64_t> gone, Then then) {
  std::unique_lock<std::mutex> lk(mu_);
  push_locked(rows, gone, std::move(then));
  if (committing_ || deferred_) return;  // taken by the commit under way, or the writer is on its way
  deferred_ = true;
  lk.unlock();
  wake_.notify_one();
}

uint64_t JobRecords::queue(std::vector<JobRow> rows, std::vector<uint64_t> gone, Then then) {
  std::lock_guard<std::mutex> g(mu_);
  push_locked(rows, gone, std::move(then));
  return rounds_ + 1;  // rounds take what is queued when they start: the next one carries these
}

bool JobRecords::queued() {
  std::lock_guard<std::mutex> g(mu_);
  return !then_.empty();
}

Status JobRecords::round_status_locked(uint64_t round) const {
  for (auto it = failed_.rbegin(); it != failed_.rend(); ++it)
    if (it->first == round) return it->second;
  // Older than every failure remembered, with kFailedKept of them since: a
  // failure of its own may have been forgotten - say so rather than "written".
  if (failed_.size() == kFailedKept && round < failed_.front().first) return failed_.front().second;
  return Status::Ok();
}

Status JobRecords::flush(uint64_t ticket) {
  {
    // Usually the job's end has committed it already: no round of our own.
    std::lock_guard<std::mutex> g(mu_);
    if (finished_rounds_ >= ticket) return round_status_locked(ticket);
  }
  // Round `ticket` is under way or about to start: this one's, or the one
  // after (put() queues behind a commit under way) follows it.
  (void)put({});
  std::lock_guard<std::mutex> g(mu_);
  return round_status_locked(ticket);
}

bool JobRecords::retry(std::vector<JobRow> rows, Then then) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stop_) return false;
    // The pause runs from the first record given back: later ones join it.
    if (retry_then_.empty()) {
      auto pause = kRetryFirst;
      for (uint32_t i = 1; i < failed_streak_ && pause < kRetryMost; ++i) pause *= 2;
      retry_at_ = std::chrono::steady_clock::now() + std::min(pause, kRetryMost);
    }
    for (JobRow& r : rows) retry_rows_.push_back(std::move(r));
    retry_then_.push_back(std::move(then));
  }
  wake_.notify_one();
  return true;
}

void JobRecords::take_retries_locked() {
  for (JobRow& r : retry_rows_) rows_.push_back(std::move(r));
  for (Then& t : retry_then_) then_.push_back(std::move(t));
  retry_rows_.clear();
  retry_then_.clear();
  deferred_ = true;
}

void JobRecords::writer() {
  std::unique_lock<std::mutex> lk(mu_);
  const auto ready = [&] { return !committing_ && (stop_ || deferred_); };
  for (;;) {
    if (retry_then_.empty())
      wake_.wait(lk, [&] { return ready() || !retry_then_.empty(); });  // records given back: their pause next
    else
      (void)wake_.wait_until(lk, retry_at_, ready);
    // Records given back whose pause is over - all of them when the writer
    // stops - go with the next commit: this thread's, or that of a commit
    // under way.
    if (!retry_then_.empty() && (stop_ || std::chrono::steady_clock::now() >= retry_at_)) take_retries_locked();
    if (!ready()) continue;
    if (then_.empty()) {
      deferred_ = false;
      if (stop_) return;
      continue;
    }
    if (!stop_) {
      // Gather: the callers that defer have more work queued right behind.
      lk.unlock();
      std::this_thread::sleep_for(kGather);
      lk.lock();
      if (committing_) continue;  // a write() caller took over: it commits ours too
    }
    committing_ = true;
    commit_rounds(lk, true);
  }
}

Status JobRecords::put(std::vector<JobRow> rows, std::vector<uint64_t> gone) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
  };
  auto w = std::make_shared<Wait>();
  write(std::move(rows), std::move(gone), [w](const Status& s) {
    std::lock_guard<std::mutex> g(w->mu);
    w->status = s;
    w->done = true;
    w->cv.notify_all();
  });
  // Bounded by the commit under way and the rounds before ours: each is one
  // SQLite transaction (its busy timeout bounds a stuck one).
  std::unique_lock<std::mutex> lk(w->mu);
  w->cv.wait(lk, [&] { return w->done; });
  return w->status;
}

}  // namespace ptod
