#include "job_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

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

namespace {
uint64_t wall_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}
}  // namespace

Status JobManager::restore() {
  std::vector<JobRow> rows;
  if (Status s = db_.jobs(cfg_.retain_finished, &rows); !s.ok()) return s;
  size_t interrupted = 0;
  // Records beyond retain_finished (it was lowered) go: never shown again.
  if (!rows.empty())
    if (Status s = db_.delete_jobs_before(rows.front().id); !s.ok()) return s;
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
    }
    j.state = j.result.state();
    if (Status s = db_.put_job(row_locked(j)); !s.ok()) return s;
    finished_order_.push_back(j.id);
    jobs_.emplace(j.id, std::move(j));
  }
  std::vector<std::string> trimmed;
  trim_locked(&trimmed);
  remove_files(trimmed);  // at start-up: nobody waits for mu_ yet
  if (!rows.empty())
    log("jobs")->info("restored {} job record(s); {} were queued or running when the daemon stopped: FAILED",
                      rows.size(), interrupted);
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

Status JobManager::submit(JobSpec spec, uint64_t* id, uint32_t* position, bool acknowledge_later) {
  std::vector<JobSpec> one;
  one.push_back(std::move(spec));
  std::vector<Queued> q;
  if (Status s = submit_batch(std::move(one), &q, acknowledge_later); !s.ok()) return s;
  *id = q.front().id;
  *position = q.front().position;
  return Status::Ok();
}

Status JobManager::admit_locked(const std::vector<JobSpec>& specs) const {
  if (draining_ || stop_) return Status::Error(pto::kUnavailable, "the daemon is draining: it accepts no new jobs");
  if (counts_.queued + specs.size() > cfg_.max_queued)
    return Status::Error(pto::kQueueFull,
                         specs.size() == 1
                             ? fmt::format("the job queue is full ({} jobs; [jobs] max_queued)", counts_.queued)
                             : fmt::format("the job queue holds {} jobs: {} more do not fit ([jobs] max_queued = {})",
                                           counts_.queued, specs.size(), cfg_.max_queued));
  std::map<std::string, uint64_t> adding;
  for (const JobSpec& spec : specs) ++adding[spec.options.principal];
  for (const auto& [owner, n] : adding) {
    const uint32_t q = cfg_.quota_for(owner).queued_jobs;
    auto it = queued_by_owner_.find(owner);
    const uint64_t has = it == queued_by_owner_.end() ? 0 : it->second;
    if (q && has + n > q)
      return Status::Error(pto::kQuotaExceeded,
                           fmt::format("{} has {} queued job(s){}: its quota is {} ([quotas] queued_jobs)", owner, has,
                                       n == 1 ? "" : fmt::format(" and submits {} more", n), q));
  }
  return Status::Ok();
}

uint32_t JobManager::batch_width(const RegisteredCallable& c) const {
  if (c.abi == pto::EntryAbi::SUB) return static_cast<uint32_t>(cfg_.sub_workers);
  if (c.abi == pto::EntryAbi::CHIP && cfg_.level == 3) return static_cast<uint32_t>(cfg_.chips);
  // An orchestration runs many tasks; an L3 worker (level 4) takes several
  // tasks at once (a peer as many as its credits).
  return 0;
}

void JobManager::join_batch(const RegisteredCallable& c, uint64_t id, uint64_t (&keys)[2],
                            pto::RunOptions* options) const {
  const uint32_t width = batch_width(c);
  if (width == 0) return;
  uint64_t& key = keys[c.abi == pto::EntryAbi::SUB ? 0 : 1];  // the batch's first job of this kind
  if (key == 0) key = id;
  options->batch = key;
  options->batch_width = width;
}

Status JobManager::reserve_locked(const std::vector<JobSpec>& specs, std::vector<uint64_t>* ids,
                                  std::vector<Queued>* queued) {
  if (Status s = admit_locked(specs); !s.ok()) return s;
  ids->resize(specs.size());
  for (uint64_t& id : *ids)
    if (Status s = ids_.next(&id); !s.ok()) return Status::Error(s.code, "cannot give the job an id: " + s.message);
  for (size_t i = 0; i < specs.size(); ++i) {
    queued->push_back({(*ids)[i], static_cast<uint32_t>(counts_.queued)});
    ++counts_.queued;
    ++queue_gen_;
    ++queued_by_owner_[specs[i].options.principal];
    ++counts_.submitted_total;
  }
  return Status::Ok();
}

JobManager::Job JobManager::make_job(uint64_t id, JobSpec spec) const {
  Job j;
  j.id = id;
  j.spec = std::move(spec);
  j.submit_ns = now_ns();
  j.submit_ms = wall_ms();
  if (!j.spec.options.deadline_ms && cfg_.default_deadline_s)
    j.spec.options.deadline_ms = uint64_t(cfg_.default_deadline_s) * 1000;
  // A trace goes under the state directory, never where a client says.
  std::memset(j.spec.config.output_prefix, 0, sizeof j.spec.config.output_prefix);
  if (j.spec.config.enable_profiling) {
    const std::string prefix = fmt::format("{}/traces/job-{}", cfg_.state_dir, j.id);
    std::snprintf(j.spec.config.output_prefix, sizeof j.spec.config.output_prefix, "%s", prefix.c_str());
    j.result.set_trace_path(prefix + ".json");
  }
  j.spec.options.log_file = log_path(j.id);
  return j;
}

void JobManager::start_runs(std::vector<Start> starts) {
  // Queued with the Worker without mu_ (a run refused at once ends inside
  // submit_function, and run_ended takes mu_).
  std::vector<pto::RunHandle> handles;
  handles.reserve(starts.size());
  for (Start& st : starts) {
    const uint64_t jid = st.id;
    handles.push_back(w_.submit_function([this, jid](pto::Orchestrator& o, const pto::TaskArgsView& view,
                                                     const pto::CallConfig& cc) { return execute(jid, o, view, cc); },
                                         std::move(st.args), st.config,
                                         [this, jid](const pto::RunResult& r) { run_ended(jid, r); }, st.options));
  }
  std::vector<std::pair<pto::RunHandle, std::string>> pending;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (size_t i = 0; i < starts.size(); ++i)
      if (auto it = jobs_.find(starts[i].id); it != jobs_.end()) {
        it->second.run = handles[i];
        // A cancel that came before the handle.
        if (!it->second.cancel_pending.empty()) pending.emplace_back(handles[i], it->second.cancel_pending);
      }
  }
  for (auto& [h, why] : pending) (void)h.cancel(why);
}

Status JobManager::submit_batch(std::vector<JobSpec> specs, std::vector<Queued>* queued, bool acknowledge_later,
                                bool waiter_commits) {
  const size_t n = specs.size();
  // Acknowledged later (the caller flushes their records before it answers),
  // a batch's jobs are made and queued kStartEvery at a time: the first ones
  // run while the rest are made. Otherwise their records are committed
  // first, all in one commit, and nothing runs before.
  const size_t every = acknowledge_later ? kStartEvery : n;
  // Jobs reach the Worker's queue in the order of their ids: a batch queued
  // in chunks holds this throughout, so a job submitted meanwhile queues
  // behind all of its jobs, as its queue position counted them. Jobs made
  // in one go hold it only to take their ids: records committed under it
  // (a batch that does not wait, a Submit without a wait) would be
  // committed one caller at a time, never gathered into one commit.
  std::unique_lock<std::mutex> order(submitting_);
  // Admitted whole, with their ids and places in the queue.
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (Status s = reserve_locked(specs, &ids, queued); !s.ok()) return s;
  }
  if (n <= every) order.unlock();   // one chunk
  uint64_t batch_keys[2] = {0, 0};  // join_batch's
  for (size_t from = 0; from < n; from += every) {
    const size_t to = std::min(n, from + every);
    std::vector<Job> fresh;
    std::vector<JobRow> rows;
    fresh.reserve(to - from);
    rows.reserve(to - from);
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = from; i < to; ++i) {
        fresh.push_back(make_job(ids[i], std::move(specs[i])));
        rows.push_back(row_locked(fresh.back()));
      }
    }
    // Acknowledged only once its record is written: here, or (acknowledge
    // later) before the caller answers. A quick job's final record then
    // carries this one in the same commit.
    Status written = Status::Ok();
    std::vector<uint64_t> gone = take_gone();
    uint64_t ticket = 0;
    if (acknowledge_later)
      ticket = records_.queue(std::move(rows), gone, [](const Status& s) {
        if (!s.ok()) log("jobs")->error("job records are not written: {}", s.message);
      });
    else
      written = records_.put(std::move(rows), gone);
    std::vector<Start> starts;
    starts.reserve(fresh.size());
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!written.ok()) {  // the only round (every == n)
        for (Job& j : fresh) uncount_queued_locked(j);
        if (live_locked() == 0) cv_.notify_all();  // wait_idle
        queued->clear();
        return Status::Error(written.code, "the job is not queued: its record is not written: " + written.message);
      }
      const auto jobs_log = log("jobs");
      for (Job& j : fresh) {
        j.record_ticket = ticket;
        const RegisteredCallable& c = j.spec.callable;
        if (jobs_log->should_log(spdlog::level::debug))  // its arguments are strings made per job
          jobs_log->debug("job {} queued: {} ({}), {} priority{}{}", j.id,
                          c.name.empty() ? c.handle.id.short_hex() : c.name, pto::abi_name(c.abi),
                          pto::priority_name(j.spec.options.priority),
                          j.spec.options.deadline_ms ? fmt::format(", deadline {} ms", j.spec.options.deadline_ms) : "",
                          j.spec.label.empty() ? "" : ", label " + j.spec.label);
        // As start_drain() and stop() tell the jobs queued before.
        if (stop_)
          j.cancel_pending = "the daemon is stopping";
        else if (draining_)
          j.cancel_pending = "not started: " + drain_why_;
        // An orchestration receives the job's arguments; a chip or sub job (or
        // a level-4 orchestration, one next-level task) is one task that
        // carries them. Such a call, submitted by a caller that waits for it,
        // runs detached: no run thread, the waiting caller drives it and ends
        // it (wait_run). Batches and calls nobody waits for keep a run thread
        // each, which spreads their jobs' bookkeeping over the CPUs instead of
        // piling it on the Worker's driver.
        const bool runner = c.abi == pto::EntryAbi::ORCHESTRATION && c.runs_here;
        starts.push_back({j.id, runner ? j.spec.args : pto::TaskArgs(), j.spec.config, j.spec.options});
        starts.back().options.detached = !runner && acknowledge_later && n == 1 && !waiter_commits;
        starts.back().options.waiter_drives = starts.back().options.detached;  // Submit's handler: wait_run next
        // Also a runner's job (its run thread ends it while the caller waits):
        // the caller commits its end within its wait_run's bound.
        j.waiter_commits = waiter_commits || (acknowledge_later && n == 1);  // flush_records before it answers
        if (n > 1) join_batch(c, j.id, batch_keys, &starts.back().options);
        const uint64_t jid = j.id;
        jobs_.emplace(jid, std::move(j));
        ++queue_gen_;  // a position counted before it came is counted again
      }
    }
    start_runs(std::move(starts));
  }
  return Status::Ok();
}

bool JobManager::wait_run(uint64_t id, std::chrono::steady_clock::time_point until) {
  pto::RunHandle h;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || final_state(it->second.state)) return true;
    h = it->second.run;
  }
  if (!h.valid()) return false;  // not queued with the Worker yet
  // Rounded up: a bound less than a millisecond away still waits (the job
  // loop's rounds are a few milliseconds; a Submit's wait may so run up to
  // a millisecond past its wait_ms).
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  return left.count() > 0 ? h.wait(left) : h.done();
}

Status JobManager::flush_records(uint64_t id) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = jobs_.find(id); it != jobs_.end()) {
      ticket = it->second.record_ticket;
      it->second.waiter_commits = false;  // an end from now on commits itself
    }
  }
  if (!ticket) return Status::Ok();  // written before submit returned
  Status s = records_.flush(ticket);
  if (s.ok()) return s;
  pto::RunHandle h;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = jobs_.find(id); it != jobs_.end() && !final_state(it->second.state)) h = it->second.run;
  }
  // Not acknowledged: cancelled, unless its run ended already (that cannot
  // be taken back, and whether it did is not known here for sure: a run's
  // end reaches its handle after its bookkeeping). Either way its end is
  // written once the database takes commits again (JobRecords::retry), and
  // the caller is told where to look rather than to ask again - which would
  // make a job of its own, and might run the work twice.
  if (h.valid()) (void)h.cancel("its record could not be written");
  return Status::Error(pto::kOutcomeUnknown,
                       fmt::format("job {}: its record could not be written ({}): it is cancelled unless "
                                   "it ended already; Result shows how it ended once its record is written",
                                   id, s.message));
}

namespace {

// Ids (ascending) as runs of consecutive ones: "7-9, 12".
std::string id_runs(const std::vector<uint64_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t k = i;
    while (k + 1 < ids.size() && ids[k + 1] == ids[k] + 1) ++k;
    out += fmt::format("{}{}", out.empty() ? "" : ", ",
                       k == i ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[k]));
    i = k + 1;
  }
  return out;
}

}  // namespace

Status JobManager::flush_batch(const std::vector<Queued>& jobs) {
  // Each job's newest record (its end's, once it ended) says whether it is
  // written: a round is a ticket, and a batch's jobs share a few.
  std::vector<uint64_t> tickets;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const Queued& q : jobs)
      if (auto it = jobs_.find(q.id); it != jobs_.end() && it->second.record_ticket) {
        tickets.push_back(it->second.record_ticket);
        it->second.waiter_commits = false;  // an end from now on commits itself
      }
  }
  std::sort(tickets.begin(), tickets.end());
  tickets.erase(std::unique(tickets.begin(), tickets.end()), tickets.end());
  std::vector<uint64_t> failed;
  Status first = Status::Ok();
  for (uint64_t t : tickets)
    if (Status s = records_.flush(t); !s.ok()) {
      failed.push_back(t);
      if (first.ok()) first = s;
    }
  if (failed.empty()) return Status::Ok();
  // Not acknowledged: cancelled unless they ended (flush_records says why).
  std::vector<uint64_t> ids;
  std::vector<pto::RunHandle> live;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const Queued& q : jobs)
      if (auto it = jobs_.find(q.id);
          it != jobs_.end() && std::binary_search(failed.begin(), failed.end(), it->second.record_ticket)) {
        ids.push_back(q.id);
        if (!final_state(it->second.state) && it->second.run.valid()) live.push_back(it->second.run);
      }
  }
  for (pto::RunHandle& h : live) (void)h.cancel("its record could not be written");
  // An error carries no reply: it names every job of the batch, those not
  // written among them, so that the caller asks Result instead of
  // submitting any of them again.
  std::vector<uint64_t> all;
  all.reserve(jobs.size());
  for (const Queued& q : jobs) all.push_back(q.id);
  return Status::Error(pto::kOutcomeUnknown,
                       fmt::format("the batch's {} jobs are {}; the records of {} of them ({}) could not be written "
                                   "({}): those are cancelled unless they ended already, and Result shows how each "
                                   "ended once its record is written; the others' records are written",
                                   jobs.size(), id_runs(all), ids.size(), id_runs(ids), first.message));
}

void JobManager::release_records(uint64_t id) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !it->second.record_ticket) return;
    it->second.waiter_commits = false;
  }
  records_.defer({}, {}, [](const Status&) {});  // the writer thread commits what is queued
}

void JobManager::commit_queued() {
  // A failed commit is logged by its records' continuations.
  if (records_.queued()) (void)records_.put({});
}

bool JobManager::stopping() const {
  std::lock_guard<std::mutex> g(mu_);
  return stop_;
}

void JobManager::release_waiters(const std::vector<Queued>& jobs) {
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const Queued& q : jobs)
      if (auto it = jobs_.find(q.id); it != jobs_.end()) it->second.waiter_commits = false;
  }
  commit_queued();
}

void JobManager::uncount_queued_locked(const Job& j) {
  --counts_.queued;
  ++queue_gen_;
  --queued_by_owner_[j.spec.options.principal];
  --counts_.submitted_total;
}

std::vector<uint64_t> JobManager::take_gone() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint64_t> out;
  out.swap(gone_);
  return out;
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
    --counts_.queued;
    ++queue_gen_;
    --queued_by_owner_[j.spec.options.principal];
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
    if (!trace.empty() && r.ok()) e.result.set_trace_path(trace);
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
    --counts_.queued;
    ++queue_gen_;
    --queued_by_owner_[done.spec.options.principal];
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
  finished_order_.push_back(id);
  trim_locked(trimmed);
  if (live_locked() == 0) cv_.notify_all();  // wait_idle
}

std::string JobManager::log_path(uint64_t id) const {
  return cfg_.capture_output ? fmt::format("{}/logs/job-{}.log", cfg_.state_dir, id) : std::string();
}

void JobManager::changed_locked(Job& j) {
  ++j.version;
  j.changed->notify_all();
}

void JobManager::trim_locked(std::vector<std::string>* files) {
  while (finished_order_.size() > cfg_.retain_finished) {
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
  // stopped and its runner killed; it ends CANCELLED within moments.
  if (h.valid()) (void)h.cancel("cancelled by a client");
  std::unique_lock<std::mutex> lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::Ok();
  if (it->second.state == pto::v1::QUEUED && h.valid()) {
    // It left the queue; its end shows once its record is committed (another
    // thread's commit may carry it): moments, bounded here.
    const std::shared_ptr<std::condition_variable> changed = it->second.changed;
    changed->wait_for(lk, std::chrono::seconds(5), [&] {
      auto j = jobs_.find(id);
      return j == jobs_.end() || j->second.state != pto::v1::QUEUED;
    });
    it = jobs_.find(id);
    if (it == jobs_.end()) return Status::Ok();
  }
  *state = it->second.state;
  return Status::Ok();
}

Status JobManager::wait_event(const Principal& who, uint64_t id, uint64_t* version, std::chrono::milliseconds timeout,
                              pto::v1::JobEvent* ev) {
  pto::RunHandle h;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (!visible_locked(who, id)) return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {}", id));
    auto it = jobs_.find(id);
    // The job's own condition: a change of one job wakes only its waiters.
    const std::shared_ptr<std::condition_variable> changed = it->second.changed;
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
