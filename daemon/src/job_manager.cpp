#include "job_manager.h"

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "log.h"
#include "wire_enums.h"

namespace ptod {

int run_registered(const RegisteredCallable& c, const pto::RunnerPool& runners, pto::Orchestrator& o,
                   const pto::TaskArgs& args, const pto::TaskArgsView& view, const pto::CallConfig& cc,
                   const std::string& principal, const std::string& log_file) {
  switch (c.abi) {
    case pto::EntryAbi::CHIP: return o.submit_next_level(c.handle, args, cc).ok() ? 0 : 1;
    case pto::EntryAbi::SUB: return o.submit_sub(c.handle, args, cc).ok() ? 0 : 1;
    case pto::EntryAbi::ORCHESTRATION:
      if (!c.runs_here) return o.submit_next_level(c.handle, args, cc).ok() ? 0 : 1;  // level 4: on an L3 worker
      // A warm runner serves only this principal's jobs of this very library.
      return runners.orchestration(c.path, c.symbol, c.name.empty() ? c.handle.id.short_hex() : c.name, log_file,
                                   principal + '\0' + c.handle.id.hex())(o, view, cc);
  }
  return 1;
}

namespace {

void fill_failure(const pto::TaskFailure& f, pto::v1::TaskFailure* p) {
  p->set_task_id(f.task_id);
  p->set_callable(f.callable);
  p->set_worker(f.worker);
  p->set_outcome(to_wire(f.outcome));
  p->set_message(pto::clip_message(f.message));
}

}  // namespace

bool final_state(pto::v1::JobState s) {
  return s == pto::v1::SUCCEEDED || s == pto::v1::FAILED || s == pto::v1::CANCELLED;
}

void to_proto(const TensorEntry& e, pto::v1::TensorInfo* ti) {
  ti->mutable_handle()->set_id(e.id);
  ti->mutable_handle()->set_name(e.name);
  for (int i = 0; i < e.tensor.ndims; ++i) ti->add_shape(e.tensor.shape[i]);
  ti->set_dtype(to_wire_dtype(e.tensor.dtype));
  ti->set_bytes(e.bytes);
  ti->set_owner(e.owner);
}

pto::v1::JobResult to_proto(const pto::RunResult& r) {
  pto::v1::JobResult p;
  p.set_tasks_submitted(r.tasks_submitted);
  p.set_tasks_succeeded(r.tasks_succeeded);
  p.set_tasks_failed(r.tasks_failed);
  p.set_tasks_skipped(r.tasks_skipped);
  p.set_tasks_stopped(r.tasks_stopped);
  p.set_chip_tasks_submitted(r.chip_tasks_submitted);
  p.set_chip_tasks_completed(r.chip_tasks_completed);
  if (r.first_failure) fill_failure(*r.first_failure, p.mutable_first_failure());
  for (const auto& f : r.failures) fill_failure(f, p.add_failures());
  p.set_message(pto::clip_message(r.status.message));
  return p;
}

JobManager::JobManager(pto::Worker& w, TensorStore& tensors, const pto::RunnerPool& runners, const DaemonConfig& cfg,
                       StateDb& db)
    : w_(w), tensors_(tensors), runners_(runners), cfg_(cfg), db_(db), ids_(db, "job"), records_(db) {}

uint64_t wall_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

Status JobManager::restore() {
  // Every record: the finished jobs the daemon kept, every job it
  // acknowledged that had not ended (those may be more than
  // retain_finished: they are bounded by max_queued and max_running), and
  // trimmed ones whose delete had not been committed yet.
  std::vector<JobRow> rows;
  if (Status s = db_.jobs(&rows); !s.ok()) return s;
  size_t interrupted = 0;
  std::vector<std::pair<uint64_t, uint64_t>> finished;  // (end time, id): the order they ended in
  std::vector<uint64_t> ended_now;                      // interrupted: ended by this restart
  std::lock_guard<std::mutex> g(mu_);
  for (const JobRow& row : rows) {
    Job j;
    j.id = row.id;
    j.restored = true;
    if (!j.result.ParseFromString(row.record)) {
      log("jobs")->warn("job {}: its record does not parse; it is dropped", row.id);
      (void)db_.delete_job(row.id);
      continue;
    }
    j.spec.options.principal = row.owner;
    if (!final_state(j.result.state())) {
      j.result.set_state(pto::v1::FAILED);
      j.result.set_message("interrupted: the daemon stopped");
      j.result.set_end_time_ms(wall_ms());
      ++interrupted;
      ended_now.push_back(j.id);
      if (Status s = db_.put_job(row_locked(j)); !s.ok()) return s;
    } else {
      finished.emplace_back(j.result.end_time_ms(), j.id);
    }
    j.state = j.result.state();
    jobs_.emplace(j.id, std::move(j));
  }
  // Retention goes by the order jobs ended, as while the daemon ran (a long
  // job with a low id that ended last was kept, one that ended before it
  // trimmed): not by id.
  std::sort(finished.begin(), finished.end());
  for (const auto& f : finished) finished_order_.push_back(f.second);
  for (uint64_t id : ended_now) finished_order_.push_back(id);
  // None that was queued or running vanishes at the restart, even beyond
  // retain_finished: each job that ends after it lets go of two of the
  // oldest records until retain_finished are left (keep_).
  keep_ = std::max<size_t>(cfg_.retain_finished, ended_now.size());
  std::vector<std::string> trimmed;
  trim_locked(&trimmed, keep_);
  remove_files(trimmed);  // at start-up: nobody waits for mu_ yet
  if (!rows.empty())
    log("jobs")->info(
        "restored {} job record(s) ({} beyond retain_finished dropped); {} were queued or running when "
        "the daemon stopped: FAILED",
        jobs_.size(), gone_.size(), interrupted);
  return Status::Ok();
}

const JobManager::Job* JobManager::visible_locked(const Principal& who, uint64_t id) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !who.may_use(it->second.spec.options.principal)) return nullptr;
  return &it->second;
}

JobManager::~JobManager() { stop(); }

void JobManager::stop(std::chrono::milliseconds wait) {
  std::vector<pto::RunHandle> live;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
    for (auto& [id, j] : jobs_) j.changed->notify_all();  // watchers learn the daemon is stopping
    for (auto& [id, j] : jobs_)
      if (!final_state(j.state)) {
        if (j.run.valid())
          live.push_back(j.run);
        else
          j.cancel_pending = "the daemon is stopping";
      }
  }
  cv_.notify_all();
  for (auto& h : live) (void)h.cancel("the daemon is stopping");
  (void)wait_idle(wait);  // cancelled runs end within moments: their children and runners are killed
}

bool JobManager::stopping() const {
  std::lock_guard<std::mutex> g(mu_);
  return stop_;
}

int JobManager::execute(uint64_t id, pto::Orchestrator& o, const pto::TaskArgsView& view, const pto::CallConfig& cc) {
  const JobSpec* spec = nullptr;
  {
    // RUNNING is not written to the state database: after a crash a queued
    // and a running job read the same ("interrupted: the daemon stopped").
    std::lock_guard<std::mutex> g(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return 1;
    Job& j = it->second;
    j.state = pto::v1::RUNNING;
    j.start_ns = now_ns();
    j.start_ms = wall_ms();
    count_queued_locked(j.spec, -1);
    ++counts_.running;
    changed_locked(j);
    spec = &j.spec;
  }
  // Read without mu_, not copied: what a job's run reads of its spec (the
  // callable, the arguments, the principal, the log file) is never changed
  // once the job is queued, and the job is not erased before its run ended
  // (trim_locked takes finished jobs only).
  return run_registered(spec->callable, runners_, o, spec->args, view, cc, spec->options.principal,
                        spec->options.log_file);
}

void JobManager::run_ended(uint64_t id, const pto::RunResult& r) {
  if (cfg_.durable) {  // what the job wrote is on disk before it is SUCCEEDED
    std::vector<TensorEntry> outputs;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (auto it = jobs_.find(id); it != jobs_.end()) outputs = it->second.spec.outputs;
    }
    tensors_.sync(outputs);
  }
  const pto::v1::JobState st = r.ok()                                   ? pto::v1::SUCCEEDED
                               : r.status.code == pto::kWorkerCancelled ? pto::v1::CANCELLED
                                                                        : pto::v1::FAILED;
  // The final record is committed before the final state is visible: what a
  // client was told survives a crash.
  Ending e;
  e.state = st;
  e.end_ns = now_ns();
  e.end_ms = wall_ms();
  e.result = to_proto(r);
  e.result.set_message(r.status.message);
  auto level = st == pto::v1::SUCCEEDED ? spdlog::level::debug : spdlog::level::info;
  if (const auto jobs_log = log("jobs"); jobs_log->should_log(level))
    jobs_log->log(level, "job {} {}: {} tasks ({} ok, {} failed, {} skipped, {} stopped) in {:.3f} ms{}", id,
                  pto::v1::JobState_Name(st), r.tasks_submitted, r.tasks_succeeded, r.tasks_failed, r.tasks_skipped,
                  r.tasks_stopped, double(r.wall_ns) / 1e6, r.ok() ? "" : ": " + r.status.message);
  // A job that did not succeed may have written its trace all the same (an
  // orchestration whose chip task ran before another task failed): the
  // record names it, so the file goes when the record does (trim_locked).
  // It used to be left out, and the file stayed forever. (A stat, out of mu_.)
  const bool trace_written = !r.ok() && access(trace_path(id).c_str(), F_OK) == 0;
  JobRow row;
  std::vector<uint64_t> gone;  // trimmed jobs' records, deleted with this one
  JobRecords::Then then;
  bool more_queued = false;
  {
    std::lock_guard<std::mutex> g(mu_);  // once per end: every job's start and end take it
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    // A runner writes its job's log itself, unseen by the Worker.
    const RegisteredCallable& c = it->second.spec.callable;
    e.log_written = r.log_written || (c.abi == pto::EntryAbi::ORCHESTRATION && c.runs_here);
    // A job that never started ends on its canceller's thread: commit there.
    more_queued = it->second.start_ns != 0 && counts_.queued > 0;
    const std::string& trace = it->second.result.trace_path();
    if (!trace.empty() && (r.ok() || trace_written)) e.result.set_trace_path(trace);
    row = row_locked(it->second, &e);
    // Applied once the record is committed, here or on the thread
    // committing it (this run's thread goes on to the next run meanwhile).
    then = ending_written(id, std::move(e), 0);
    gone.swap(gone_);
    // A caller waiting for this job commits before it answers
    // (flush_records): the record waits for that commit, which carries the
    // ends of every job that caller drove meanwhile. Queued under mu_, so
    // that flush_records, which takes the waiter off first, finds it.
    if (it->second.waiter_commits) {
      it->second.record_ticket = records_.queue({std::move(row)}, std::move(gone), std::move(then));
      return;
    }
  }
  // With more jobs queued this run's thread has work right behind: the
  // writer thread gathers the records of many ends into one commit.
  if (more_queued)
    records_.defer({std::move(row)}, std::move(gone), std::move(then));
  else
    records_.write({std::move(row)}, std::move(gone), std::move(then));
}

JobRecords::Then JobManager::ending_written(uint64_t id, Ending e, uint32_t failed) {
  return [this, id, e = std::move(e), failed](const Status& written) mutable {
    if (written.ok()) {
      if (failed) log("jobs")->info("job {}: its final record is written, {} failed commits later", id, failed);
      apply_ending(id, std::move(e), failed > 0);
      return;
    }
    // Never visible before it is on disk: the job stays as clients saw it
    // (running, or queued) until a commit of its record succeeds.
    if (!failed)
      log("jobs")->error("job {}: its final record is not written ({}): its end is not shown until it is", id,
                         written.message);
    JobRow row;
    {
      // Made again rather than kept: a copy for every end would cost the
      // many that commit at once.
      std::lock_guard<std::mutex> g(mu_);
      auto it = jobs_.find(id);
      if (it == jobs_.end()) return;
      row = row_locked(it->second, &e);
      if (!failed) {
        // Its run is over: a drain does not wait for the record (the
        // writer tries it once more when the daemon stops).
        ++ends_unwritten_;
        if (live_locked() == 0) cv_.notify_all();  // wait_idle
      }
    }
    if (!records_.retry({std::move(row)}, ending_written(id, std::move(e), failed + 1)))
      log("jobs")->error("job {}: the daemon stops before its final record could be written: its end is not kept", id);
  };
}

void JobManager::apply_ending(uint64_t id, Ending e, bool was_unwritten) {
  std::vector<std::string> trimmed;
  std::lock_guard<std::mutex> g(mu_);
  if (was_unwritten) --ends_unwritten_;
  apply_ending_locked(id, std::move(e), &trimmed);
  // Under mu_: a caller waiting for this job sees it ended only with the
  // trimmed jobs' files gone ("a job's log goes with its record"; removed
  // after mu_ was released, a client could see the end first).
  remove_files(trimmed);
}

void JobManager::apply_ending_locked(uint64_t id, Ending e, std::vector<std::string>* trimmed) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job& done = it->second;
  if (done.start_ns) {
    --counts_.running;
  } else {
    count_queued_locked(done.spec, -1);
  }
  done.state = e.state;
  done.log_written = e.log_written;
  done.end_ns = e.end_ns;
  done.end_ms = e.end_ms;
  done.result = std::move(e.result);
  for (uint64_t t : done.spec.pinned) tensors_.pin(t, -1);
  done.spec.pinned.clear();
  if (done.state == pto::v1::SUCCEEDED)
    ++counts_.succeeded_total;
  else if (done.state == pto::v1::FAILED)
    ++counts_.failed_total;
  else
    ++counts_.cancelled_total;
  changed_locked(done);
  if (done.readers > 0)
    done.end_unordered = true;  // among the finished once read (read_done_locked)
  else
    finished_order_.push_back(id);
  keep_ = std::max<size_t>(cfg_.retain_finished, keep_ == 0 ? 0 : keep_ - 1);
  trim_locked(trimmed, keep_);
  if (live_locked() == 0) cv_.notify_all();  // wait_idle
}

std::string JobManager::trace_path(uint64_t id) const {
  return fmt::format("{}/traces/job-{}.json", cfg_.state_dir, id);
}

std::string JobManager::log_path(uint64_t id) const {
  return cfg_.capture_output ? fmt::format("{}/logs/job-{}.log", cfg_.state_dir, id) : std::string();
}

void JobManager::changed_locked(Job& j) {
  ++j.version;
  j.changed->notify_all();
}

void JobManager::trim_locked(std::vector<std::string>* files, size_t keep) {
  while (finished_order_.size() > keep) {
    auto it = jobs_.find(finished_order_.front());
    if (it != jobs_.end()) {
      // A job's trace lives as long as the job is retained.
      if (!it->second.result.trace_path().empty()) files->push_back(it->second.result.trace_path());
      // A log never written was never created: no failing unlink per job.
      if (it->second.log_written)
        if (std::string log = log_path(it->first); !log.empty()) files->push_back(std::move(log));
      gone_.push_back(it->first);  // deleted with the next commit of records
      it->second.changed->notify_all();
      jobs_.erase(it);
    }
    finished_order_.pop_front();
  }
}

void JobManager::read_done_locked(Job& j, std::vector<std::string>* trimmed) {
  if (j.readers == 0) return;
  --j.readers;
  if (j.readers > 0 || !j.end_unordered) return;
  j.end_unordered = false;
  finished_order_.push_back(j.id);
  trim_locked(trimmed, keep_);
}

void JobManager::done_reading(const std::vector<Queued>& jobs) {
  std::vector<std::string> trimmed;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const Queued& q : jobs)
      if (auto it = jobs_.find(q.id); it != jobs_.end()) read_done_locked(it->second, &trimmed);
  }
  remove_files(trimmed);
}

void JobManager::remove_files(const std::vector<std::string>& files) {
  for (const std::string& f : files) std::remove(f.c_str());
}

JobRow JobManager::row_locked(const Job& j, const Ending* e) const {
  JobRow row;
  row.id = j.id;
  row.owner = j.spec.options.principal;
  pto::v1::JobResult r;
  fill_result_locked(j, &r, e);
  row.state = r.state();
  row.record = r.SerializeAsString();
  return row;
}

void JobManager::fill_result_locked(const Job& j, pto::v1::JobResult* out, const Ending* e) const {
  *out = e ? e->result : j.result;
  if (j.restored) return;  // the record as the last daemon left it
  const pto::v1::JobState state = e ? e->state : j.state;
  const uint64_t end_ns = e ? e->end_ns : j.end_ns;
  const RegisteredCallable& c = j.spec.callable;
  out->set_owner(j.spec.options.principal);
  out->set_callable(c.name.empty() ? pto::to_hex(c.handle.id.digest) : c.name);
  out->set_submit_time_ms(j.submit_ms);
  out->set_start_time_ms(j.start_ms);
  out->set_end_time_ms(e ? e->end_ms : j.end_ms);
  out->set_job_id(j.id);
  out->set_state(state);
  out->set_label(j.spec.label);
  out->set_priority(to_wire(j.spec.options.priority));
  out->set_deadline_ms(static_cast<uint32_t>(std::min<uint64_t>(j.spec.options.deadline_ms, UINT32_MAX)));
  const uint64_t now = now_ns();
  out->set_queued_ns((j.start_ns ? j.start_ns : (end_ns ? end_ns : now)) - j.submit_ns);
  if (j.start_ns) out->set_run_ns((end_ns ? end_ns : now) - j.start_ns);
  for (const TensorEntry& e : j.spec.outputs) to_proto(e, out->add_outputs());
}

Status JobManager::result(const Principal& who, uint64_t id, pto::v1::JobResult* out) const {
  pto::RunHandle running;
  {
    std::lock_guard<std::mutex> g(mu_);
    const Job* j = visible_locked(who, id);
    if (!j)
      return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {} (unknown, or no longer retained)", id));
    fill_result_locked(*j, out);
    if (j->state == pto::v1::RUNNING) running = j->run;
  }
  // A running job shows the tasks its orchestration has submitted so far
  // (asked without mu_: the Worker's lock is never taken under it).
  if (running.valid()) out->set_tasks_submitted(running.progress().submitted);
  return Status::Ok();
}

std::vector<size_t> JobManager::ended_results(const Principal& who, const std::vector<Queued>& jobs,
                                              const std::function<pto::v1::JobResult*(size_t)>& out) const {
  std::vector<size_t> open;
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job* j = visible_locked(who, jobs[i].id);
    if (j && final_state(j->state))
      fill_result_locked(*j, out(i));
    else
      open.push_back(i);
  }
  return open;
}

Status JobManager::cancel(const Principal& who, uint64_t id, pto::v1::JobState* state) {
  pto::RunHandle h;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!visible_locked(who, id)) return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {}", id));
    auto it = jobs_.find(id);
    *state = it->second.state;
    if (final_state(it->second.state)) return Status::Ok();
    h = it->second.run;
    if (!h.valid()) it->second.cancel_pending = "cancelled by a client";  // submit() passes it on
  }
  // Queued: it leaves the queue (CANCELLED at once). Running: its tasks are
  // stopped and its runner killed; it ends CANCELLED within moments. Not
  // yet handed to the Worker: submit() cancels it as it does.
  if (h.valid()) (void)h.cancel("cancelled by a client");
  std::unique_lock<std::mutex> lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::Ok();
  // The reply says how it ended (CancelReply): its end shows once its record
  // is committed (another thread's commit may carry it) - moments, bounded
  // here; past the bound the state it is still in. (A running job's reply
  // used to say RUNNING, one not yet handed over QUEUED.)
  const std::shared_ptr<std::condition_variable> changed = it->second.changed;
  changed->wait_for(lk, kCancelReplyWait, [&] {
    auto j = jobs_.find(id);
    return j == jobs_.end() || final_state(j->second.state) || stop_;  // a stopping daemon answers at once
  });
  it = jobs_.find(id);
  if (it == jobs_.end()) return Status::Ok();
  *state = it->second.state;
  return Status::Ok();
}

Status JobManager::wait_event(const Principal& who, uint64_t id, uint64_t* version, std::chrono::milliseconds timeout,
                              pto::v1::JobEvent* ev) {
  pto::RunHandle h;
  struct RemoveAfter {  // once mu_ is released
    JobManager& m;
    std::vector<std::string> files;
    ~RemoveAfter() { m.remove_files(files); }
  } trimmed{*this, {}};
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (!visible_locked(who, id)) return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {}", id));
    auto it = jobs_.find(id);
    // The job's own condition: a change of one job wakes only its waiters.
    // Read while waited for: its end is not trimmed before this call has
    // seen it (other jobs ending meanwhile trimmed it: "no longer retained").
    const std::shared_ptr<std::condition_variable> changed = it->second.changed;
    ++it->second.readers;
    struct Reading {  // with mu_ held: destroyed before lk
      JobManager& m;
      uint64_t id;
      std::vector<std::string>* trimmed;
      ~Reading() {
        if (auto j = m.jobs_.find(id); j != m.jobs_.end()) m.read_done_locked(j->second, trimmed);
      }
    } reading{*this, id, &trimmed.files};
    changed->wait_for(lk, timeout, [&] {
      auto j = jobs_.find(id);
      return j == jobs_.end() || j->second.version != *version || stop_;
    });
    it = jobs_.find(id);
    if (it == jobs_.end())
      return Status::Error(pto::kWorkerNotRegistered, fmt::format("job {} is no longer retained", id));
    const Job& j = it->second;
    if (stop_ && !final_state(j.state)) return Status::Error(pto::kUnavailable, "the daemon is stopping");
    *version = j.version;
    ev->set_job_id(id);
    ev->set_state(j.state);
    if (final_state(j.state)) {
      ev->set_tasks_done(j.result.tasks_succeeded() + j.result.tasks_failed() + j.result.tasks_skipped() +
                         j.result.tasks_stopped());
      ev->set_tasks_total(j.result.tasks_submitted());
      ev->set_chip_tasks_done(j.result.chip_tasks_completed());
      ev->set_chip_tasks_total(j.result.chip_tasks_submitted());
      fill_result_locked(j, ev->mutable_result());
      return Status::Ok();
    }
    if (j.state == pto::v1::QUEUED) {
      ev->set_queue_position(queue_position_locked(j));
      return Status::Ok();
    }
    if (j.state != pto::v1::RUNNING) return Status::Ok();
    h = j.run;
  }
  const pto::RunProgress p = h.progress();
  ev->set_tasks_done(p.finished);
  ev->set_tasks_total(p.submitted);
  ev->set_chip_tasks_done(p.chip_completed);
  ev->set_chip_tasks_total(p.chip_submitted);
  return Status::Ok();
}

uint32_t JobManager::queue_position_locked(const Job& j) const {
  // Counted again only when the queue changed: a watcher asks every 20 ms.
  if (j.position_gen == queue_gen_) return j.position;
  // Queued jobs start by priority, then in submission order (ids grow).
  uint32_t ahead = 0;
  for (const auto& [id, k] : jobs_)
    if (k.state == pto::v1::QUEUED && id != j.id &&
        (k.spec.options.priority > j.spec.options.priority ||
         (k.spec.options.priority == j.spec.options.priority && id < j.id)))
      ++ahead;
  j.position_gen = queue_gen_;
  j.position = ahead;
  return ahead;
}

std::vector<pto::v1::JobResult> JobManager::list(const Principal& who, const pto::v1::ListJobsRequest& f) const {
  const uint32_t limit = f.limit() ? f.limit() : 50;
  std::lock_guard<std::mutex> g(mu_);
  std::vector<pto::v1::JobResult> out;
  pto::v1::JobResult r;
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && out.size() < limit; ++it) {
    if (!who.may_use(it->second.spec.options.principal)) continue;
    fill_result_locked(it->second, &r);
    if ((f.state() != pto::v1::JOB_STATE_UNSPECIFIED && r.state() != f.state()) ||
        (!f.callable().empty() && r.callable() != f.callable()) || (!f.label().empty() && r.label() != f.label()) ||
        r.submit_time_ms() < f.since_ms())
      continue;
    out.push_back(r);
  }
  return out;
}

JobCounts JobManager::counts() const {
  JobCounts c;
  {
    std::lock_guard<std::mutex> g(mu_);
    c = counts_;
  }
  c.record_commits_total = records_.commits();
  c.record_failures_total = records_.failures();
  return c;
}

void JobManager::cancel_running(const std::string& why) {
  std::vector<pto::RunHandle> running;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [id, j] : jobs_)
      if (j.state == pto::v1::RUNNING) running.push_back(j.run);
  }
  for (auto& h : running) (void)h.cancel(why);
}

void JobManager::start_drain(const std::string& why) {
  std::vector<pto::RunHandle> queued;
  {
    std::lock_guard<std::mutex> g(mu_);
    draining_ = true;
    drain_why_ = why;
    for (auto& [id, j] : jobs_)
      if (j.state == pto::v1::QUEUED) {
        if (j.run.valid())
          queued.push_back(j.run);
        else
          j.cancel_pending = "not started: " + why;
      }
  }
  for (auto& h : queued) (void)h.cancel("not started: " + why);
  cv_.notify_all();
}

bool JobManager::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return live_locked() == 0; });
}

}  // namespace ptod
