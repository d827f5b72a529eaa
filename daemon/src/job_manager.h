// Jobs: each job is a run of the daemon's Worker, queued with
// Worker::submit. Up to [jobs] max_running run at once (the Worker's
// max_concurrent_runs), started by priority and then in submission order;
// their ready tasks are served by priority, then round robin between
// principals, then between jobs. An orchestration job runs its library in a
// runner process (pto/runner.h); a chip or sub job is a one-task run.
// States (docs/daemon.md):
//   QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED;  QUEUED -> CANCELLED.
// Every change bumps the job's version, so watchers wait for "newer than
// what I saw". Finished jobs are kept (retain_finished) for Result / List.
// A job belongs to the principal that submitted it (RunOptions::principal):
// others are told it does not exist, unless they are admin. A job's record
// is written to the state database (group commit, JobRecords) before its id
// is returned and again before its final state is visible, so after a
// restart a job's record is there; one that was queued or running when the
// daemon died is FAILED "interrupted: the daemon stopped".
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "callable_registry.h"
#include "config.h"
#include "job_records.h"
#include "pto/base/clock.h"
#include "pto/runner.h"
#include "pto/v1/ptod.pb.h"
#include "pto/worker.h"
#include "state_db.h"
#include "tensor_store.h"

namespace ptod {

struct JobSpec {
  RegisteredCallable callable;
  pto::TaskArgs args;
  pto::CallConfig config;
  std::string label;
  std::vector<uint64_t> pinned;      // tensor ids, unpinned when the job ends
  std::vector<TensorEntry> outputs;  // tensors the job writes
  pto::RunOptions options;           // priority, principal, deadline
};

struct JobCounts {
  uint64_t queued = 0, running = 0;
  uint64_t succeeded_total = 0, failed_total = 0, cancelled_total = 0, submitted_total = 0;
  uint64_t record_commits_total = 0;  // SQLite transactions that wrote job records
  uint64_t record_failures_total = 0;  // and that failed (submits refused, ends retried)
};

class JobManager {
 public:
  // Job ids come from `db`'s "job" sequence in blocks: never one a client has
  // seen before, also across restarts.
  JobManager(pto::Worker& w, TensorStore& tensors, const pto::RunnerPool& runners, const DaemonConfig& cfg,
             StateDb& db);
  ~JobManager();

  // The records of the state database: the last retain_finished jobs to
  // end, and every job that had not ended, which becomes FAILED
  // "interrupted: the daemon stopped" (all kept, also beyond retain_finished).
  Status restore();
  // spec.pinned: tensors the caller pinned; the job unpins them when it ends
  // (on error they stay the caller's to unpin). spec.options.principal owns it.
  // With `acknowledge_later` the job's record is queued instead of committed
  // before submit returns, and so is its end's until flush_records: for a
  // caller that answers only after flush_records() (or, gone without an
  // answer, calls release_records()); nothing else commits them for it.
  Status submit(JobSpec spec, uint64_t* id, uint32_t* queue_position, bool acknowledge_later = false);
  // Returns once job `id`'s records so far are committed (for a job
  // submitted with acknowledge_later: its own, and its end's if it ended);
  // if that commit failed, an error, and the job, never acknowledged, is
  // cancelled. The waiting caller's last word on the job's records: an end
  // after this commits itself. Until then the end of a job submitted with
  // acknowledge_later is queued for this commit, so that a caller that
  // drives several jobs (the fd socket's job loop) commits their ends once.
  Status flush_records(uint64_t id);
  // For a job submitted with acknowledge_later whose caller will not call
  // flush_records (it went away): its records are committed by the writer
  // thread, and its end commits itself.
  void release_records(uint64_t id);
  // Waits until job `id`'s run ended or `until`: true when it ended (or the
  // job is gone or final). A call's run (detached) is driven by this thread
  // meanwhile: its end then happens here — no other thread's wake-up on the
  // way — and its record waits for this caller's flush_records.
  bool wait_run(uint64_t id, std::chrono::steady_clock::time_point until);
  // Several jobs at once, all or none: admitted together (queue and quotas),
  // their records written in one commit, then queued in order. With
  // `acknowledge_later` (a caller that then calls flush_batch) their records
  // are queued instead of committed, and the jobs are made and queued
  // kStartEvery at a time: the first run while the rest are made (a job
  // submitted meanwhile still queues behind them all).
  struct Queued {
    uint64_t id = 0;
    uint32_t position = 0;  // jobs queued before it
  };
  // With `waiter_commits` the caller waits for the jobs and commits their
  // ends itself: their final records are queued (for commit_queued() or
  // release_waiters(), which the caller must call), not committed as each
  // run ends.
  Status submit_batch(std::vector<JobSpec> specs, std::vector<Queued>* queued, bool acknowledge_later = false,
                      bool waiter_commits = false);
  // Commits the records queued so far (the ends a waiting caller holds), if any.
  void commit_queued();
  // stop() has begun: waiting callers return.
  bool stopping() const;
  // The caller of submit_batch(..., waiter_commits) is done waiting: what
  // is queued is committed, and the jobs' ends from now on commit themselves.
  void release_waiters(const std::vector<Queued>& jobs);
  // The caller of submit_batch(..., waiter_commits) has read the jobs' ends
  // (or gives up): from now on they are trimmed as any other (retain_finished).
  void done_reading(const std::vector<Queued>& jobs);
  // flush_records for a batch submitted with acknowledge_later, which the
  // caller must call before it answers: an error names the jobs whose
  // records could not be written, which are cancelled unless they ended.
  Status flush_batch(const std::vector<Queued>& jobs);
  // *state: how it ended (CANCELLED, or the final state it had reached), once
  // its end is committed; the state it is still in if that takes longer
  // than kCancelReplyWait (a task that does not stop at once).
  Status cancel(const Principal& who, uint64_t id, pto::v1::JobState* state);
  static constexpr std::chrono::seconds kCancelReplyWait{5};
  Status result(const Principal& who, uint64_t id, pto::v1::JobResult* out) const;
  // The results of those of `jobs` that have ended, under one lock (a
  // batch's reply: one wait_event per job cost ~1 us each, with the batch's
  // runs over and the next batch not sent yet): out(i) is job i's result to
  // fill. Returns the indexes of the jobs that have not ended (or that `who`
  // may not see).
  std::vector<size_t> ended_results(const Principal& who, const std::vector<Queued>& jobs,
                                    const std::function<pto::v1::JobResult*(size_t)>& out) const;
  // Where job `id`'s captured output goes; "" when [jobs] capture_output is off.
  std::string log_path(uint64_t id) const;
  // Where a job submitted with profiling has its chip runs' trace written.
  std::string trace_path(uint64_t id) const;
  // Waits until the job changed after *version (or timeout), then fills ev
  // (with live task progress while it runs) and updates *version.
  Status wait_event(const Principal& who, uint64_t id, uint64_t* version, std::chrono::milliseconds timeout,
                    pto::v1::JobEvent* ev);
  // The newest `limit` jobs `who` may see that pass the request's filters.
  std::vector<pto::v1::JobResult> list(const Principal& who, const pto::v1::ListJobsRequest& filter) const;
  JobCounts counts() const;

  // Drain: refuse new jobs, cancel the queued ones; running ones go on.
  void start_drain(const std::string& why);
  // Cancels every running job: their tasks are stopped, their runners killed.
  void cancel_running(const std::string& why);
  // Until no job is queued or running, or the timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  bool draining() const { return draining_.load(); }
  // Cancels what is left and waits (bounded) for the runs to end.
  void stop(std::chrono::milliseconds wait = std::chrono::seconds(10));

 private:
  // submit_batch(..., acknowledge_later): jobs made and started at a time.
  // A batch of 1,000 trivial jobs took 0.9-2.5 ms to make and 0.6-1.2 ms to
  // commit before its first run started; 64 take ~0.1 ms.
  static constexpr size_t kStartEvery = 64;
  struct Start {  // a job's run, to be queued with the Worker
    uint64_t id;
    pto::TaskArgs args;
    pto::CallConfig config;
    pto::RunOptions options;
  };
  struct Job {
    uint64_t id = 0;
    JobSpec spec;
    pto::v1::JobState state = pto::v1::QUEUED;
    pto::v1::JobResult result;
    uint64_t version = 1;
    uint64_t submit_ns = 0, start_ns = 0, end_ns = 0;  // steady clock
    uint64_t submit_ms = 0, start_ms = 0, end_ms = 0;  // wall clock, for the record
    bool restored = false;                             // from the state database: `result` is the whole record
    pto::RunHandle run;                                // set once the run is queued with the Worker
    std::string cancel_pending;                        // a cancel that came before `run` was set
    uint64_t record_ticket = 0;                        // acknowledge_later: JobRecords::flush's ticket
    // A caller waits for it and commits before it answers (flush_records):
    // its end's record is queued for that commit, not committed on its own.
    bool waiter_commits = false;
    // Callers that will read its end (a waited batch's reply, a wait_event
    // under way): a job that ends while read joins finished_order_ - and can
    // be trimmed - only once they have (read_done_locked).
    uint32_t readers = 0;
    bool end_unordered = false;  // ended while read: not in finished_order_ yet
    // Its log file may exist (removed when the job is trimmed): false only
    // for a chip or sub job whose task answered that it wrote nothing there.
    bool log_written = true;
    // Its place in the queue as last counted, valid while queue_gen_ is unchanged.
    mutable uint64_t position_gen = ~uint64_t(0);
    mutable uint32_t position = 0;
    // Notified (with mu_) at every change of version; shared so that a
    // waiter outlives the job's trimming.
    std::shared_ptr<std::condition_variable> changed = std::make_shared<std::condition_variable>();
  };
  // A job's end, committed to the state database before it is applied.
  struct Ending {
    pto::v1::JobState state = pto::v1::FAILED;
    uint64_t end_ns = 0, end_ms = 0;
    pto::v1::JobResult result;
    bool log_written = true;
  };
  // The orchestration function of a job's run (on a Worker run thread).
  int execute(uint64_t id, pto::Orchestrator& o, const pto::TaskArgsView& view, const pto::CallConfig& cc);
  void run_ended(uint64_t id, const pto::RunResult& r);
  // The continuation of a job's final record: the end applied once the
  // record is committed; after a failed commit the record is made again and
  // given to JobRecords::retry (`failed` commits so far), the end unseen.
  JobRecords::Then ending_written(uint64_t id, Ending e, uint32_t failed);
  // The job's end, its record committed: visible from here on.
  // (`was_unwritten`: after failed commits, counted in ends_unwritten_.)
  void apply_ending(uint64_t id, Ending e, bool was_unwritten = false);
  void apply_ending_locked(uint64_t id, Ending e, std::vector<std::string>* trimmed);
  Status admit_locked(const std::vector<JobSpec>& specs) const;
  // Admits a batch whole: its ids, its places in the queue, counted queued.
  Status reserve_locked(const std::vector<JobSpec>& specs, std::vector<uint64_t>* ids, std::vector<Queued>* queued);
  // A job as queued (its deadline, trace and log paths), not yet in jobs_.
  Job make_job(uint64_t id, JobSpec spec) const;
  // Queues the jobs' runs with the Worker and gives each job its handle.
  void start_runs(std::vector<Start> starts);
  // How many of a batch's jobs of callable `c` run at once
  // (RunOptions::batch_width): the workers that can run its one task when
  // each runs one at a time (sub workers; chips at level 3); 0, no bound
  // beyond [jobs] max_running, otherwise.
  uint32_t batch_width(const RegisteredCallable& c) const;
  // A job `id` of callable `c` in a batch of several: its run joins the
  // batch's runs of the same kind of worker (keys: the batch's first job id
  // per kind, sub and chip), as many at once as batch_width allows. A
  // one-task job's runs beyond its workers would only queue their tasks
  // inside the Worker, each holding a run thread and a slot (docs/daemon.md,
  // "Jobs"). Jobs behind the batch wait for it, as before.
  void join_batch(const RegisteredCallable& c, uint64_t id, uint64_t (&keys)[2], pto::RunOptions* options) const;
  // As clients see it; with `e`, as it will be once that ending is applied.
  void fill_result_locked(const Job& j, pto::v1::JobResult* out, const Ending* e = nullptr) const;
  JobRow row_locked(const Job& j, const Ending* e = nullptr) const;
  void changed_locked(Job& j);
  // Queued jobs that start before j (higher priority, or as high and older).
  uint32_t queue_position_locked(const Job& j) const;
  // A caller has read j's end (Job::readers): one that ended meanwhile is
  // now among the finished, trimmed as any other.
  void read_done_locked(Job& j, std::vector<std::string>* trimmed);
  // Drops the oldest finished jobs beyond `keep` (retain_finished; more
  // after a restart: keep_); their records go with the next commit (gone_), their trace and
  // log files into *files for the caller to remove once mu_ is released (a
  // syscall each, kept out of the lock every job's start and end take).
  void trim_locked(std::vector<std::string>* files, size_t keep);
  // Records kept (above retain_finished after a restart that brought back
  // more unfinished jobs than that): each end lowers it by one until it is
  // retain_finished again, so each end lets go of two of the oldest.
  size_t keep_ = 0;
  static void remove_files(const std::vector<std::string>& files);
  std::vector<uint64_t> take_gone();
  // The job, if `who` may see it.
  const Job* visible_locked(const Principal& who, uint64_t id) const;
  // Jobs a drain waits for: queued or running, but not those whose run
  // ended and whose final record waits for the database (ends_unwritten_).
  uint64_t live_locked() const { return counts_.queued + counts_.running - ends_unwritten_; }

  pto::Worker& w_;
  TensorStore& tensors_;
  const pto::RunnerPool& runners_;
  const DaemonConfig& cfg_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // no job is live any more (wait_idle), or stopping
  std::map<uint64_t, Job> jobs_;
  std::deque<uint64_t> finished_order_;
  StateDb& db_;
  std::vector<uint64_t> gone_;  // trimmed jobs whose records are still to delete
  IdSequence ids_;
  std::map<std::string, uint64_t> queued_by_owner_;  // the queued_jobs quota's measure
  // Queued jobs by RunPriority: a Submit's place in the queue (those that
  // start before it: higher priority, or as high and older) without a walk.
  std::array<uint32_t, 3> queued_by_priority_{};
  void count_queued_locked(const JobSpec& spec, int delta);  // delta: +1 queued, -1 no longer
  JobCounts counts_;                                 // queued and running are live counts
  uint64_t queue_gen_ = 0;                           // bumped whenever a job enters or leaves the queue
  uint64_t ends_unwritten_ = 0;  // ended, their final record given to JobRecords::retry (still counted above)
  std::atomic<bool> draining_{false};
  std::string drain_why_;  // start_drain's reason
  std::mutex submitting_;  // submit_batch's: jobs reach the Worker in id order
  bool stop_ = false;
  // Last: destroyed first, its final commits' continuations still find the
  // members above.
  JobRecords records_;
};

pto::v1::JobResult to_proto(const pto::RunResult& r);
using pto::now_ns;  // the steady clock (pto/base/clock.h)
// The wall clock, milliseconds since the epoch: the times records and clients see.
uint64_t wall_ms();
// Runs a registered callable inside an orchestration: a chip or sub task with
// args, an orchestration in a runner (its output to `log_file` when set), or
// (level 4) a next-level task.
int run_registered(const RegisteredCallable& c, const pto::RunnerPool& runners, pto::Orchestrator& o,
                   const pto::TaskArgs& args, const pto::TaskArgsView& view, const pto::CallConfig& cc,
                   const std::string& principal, const std::string& log_file = "");
void to_proto(const TensorEntry& e, pto::v1::TensorInfo* out);
bool final_state(pto::v1::JobState s);

}  // namespace ptod
