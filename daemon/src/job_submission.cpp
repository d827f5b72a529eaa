// Submission: a job or a batch admitted (queue bound, quotas), given ids,
// made, its records committed or queued for the caller to flush, and queued
// with the Worker in the order of its ids; the waiting caller's side
// (wait_run; the records' flush, release). The rest of the job's life is
// job_manager.cpp's.
#include "job_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "log.h"

namespace ptod {

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
    // Ahead of it: the queued jobs of a higher priority, and all of its own
    // (older: ids grow), as they start (queue_position_locked; it used to
    // count every queued job, a LOW one ahead of a HIGH job too).
    const auto p = static_cast<size_t>(specs[i].options.priority);
    uint32_t ahead = 0;
    for (size_t q = p; q < queued_by_priority_.size(); ++q) ahead += queued_by_priority_[q];
    queued->push_back({(*ids)[i], ahead});
    count_queued_locked(specs[i], +1);
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
    std::string path = trace_path(j.id);
    const std::string prefix = path.substr(0, path.size() - 5);  // the chip writes <prefix>.json
    std::snprintf(j.spec.config.output_prefix, sizeof j.spec.config.output_prefix, "%s", prefix.c_str());
    j.result.set_trace_path(std::move(path));
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
  // Tensors a clean stop wrote to disk stop saying so before a job may
  // change them (TensorStore::unsync; nothing to do when none does).
  if (tensors_.unsync_may_be_needed()) {
    std::vector<uint64_t> outputs;
    for (const JobSpec& spec : specs)
      for (const TensorEntry& e : spec.outputs) outputs.push_back(e.id);
    if (Status s = tensors_.unsync(outputs); !s.ok())
      return Status::Error(s.code, "the job is not queued: " + s.message);
  }
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
        for (Job& j : fresh) count_queued_locked(j.spec, -1);
        if (live_locked() == 0) cv_.notify_all();  // wait_idle
        queued->clear();
        return Status::Error(written.code, "the job is not queued: its record is not written: " + written.message);
      }
      // Counted once accepted, never taken back: a counter that went down
      // (a job counted, then refused when its record could not be written)
      // reads to Prometheus as a reset.
      counts_.submitted_total += fresh.size();
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
        if (waiter_commits) j.readers = 1;  // the waiting caller reads its end (done_reading)
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

void JobManager::release_waiters(const std::vector<Queued>& jobs) {
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const Queued& q : jobs)
      if (auto it = jobs_.find(q.id); it != jobs_.end()) it->second.waiter_commits = false;
  }
  commit_queued();
}

void JobManager::count_queued_locked(const JobSpec& spec, int delta) {
  uint32_t& by_priority = queued_by_priority_[static_cast<size_t>(spec.options.priority)];
  uint64_t& by_owner = queued_by_owner_[spec.options.principal];
  if (delta > 0) {
    ++counts_.queued;
    ++by_owner;
    ++by_priority;
  } else {
    --counts_.queued;
    --by_owner;
    --by_priority;
  }
  ++queue_gen_;
}

std::vector<uint64_t> JobManager::take_gone() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint64_t> out;
  out.swap(gone_);
  return out;
}

}  // namespace ptod
