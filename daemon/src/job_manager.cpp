#include "job_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>

#include "log.h"
#include "wire_enums.h"

namespace ptod {

int run_registered(const RegisteredCallable& c, pto::Orchestrator& o, const pto::TaskArgs& args,
                   const pto::TaskArgsView& view, const pto::CallConfig& cc) {
  switch (c.abi) {
    case pto::EntryAbi::CHIP: return o.submit_next_level(c.handle, args, cc).ok() ? 0 : 1;
    case pto::EntryAbi::SUB: return o.submit_sub(c.handle, args).ok() ? 0 : 1;
    case pto::EntryAbi::ORCHESTRATION:
      if (!c.orchestration) return o.submit_next_level(c.handle, args, cc).ok() ? 0 : 1;  // level 4: on an L3 worker
      return c.orchestration(&o, &view, &cc);
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
}

pto::v1::JobResult to_proto(const pto::RunResult& r) {
  pto::v1::JobResult p;
  p.set_tasks_submitted(r.tasks_submitted);
  p.set_tasks_succeeded(r.tasks_succeeded);
  p.set_tasks_failed(r.tasks_failed);
  p.set_tasks_skipped(r.tasks_skipped);
  if (r.first_failure) fill_failure(*r.first_failure, p.mutable_first_failure());
  for (const auto& f : r.failures) fill_failure(f, p.add_failures());
  p.set_message(pto::clip_message(r.status.message));
  return p;
}

JobManager::JobManager(pto::Worker& w, TensorStore& tensors, const DaemonConfig& cfg)
    : w_(w), tensors_(tensors), cfg_(cfg) {
  runner_ = std::thread([this] { runner_main(); });
}

JobManager::~JobManager() { stop(); }

void JobManager::stop() {
  bool running;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stop_ && !runner_.joinable()) return;
    stop_ = true;
    for (uint64_t id : queue_) finish_locked(jobs_[id], pto::v1::CANCELLED, "the daemon is stopping");
    queue_.clear();
    running = running_id_ != 0;
  }
  cv_.notify_all();
  if (running) cancel_running("the daemon is stopping");
  if (runner_.joinable()) runner_.join();
}

Status JobManager::submit(JobSpec spec, uint64_t* id, uint32_t* position) {
  std::lock_guard<std::mutex> g(mu_);
  if (draining_ || stop_) return Status::Error(pto::kUnavailable, "the daemon is draining: it accepts no new jobs");
  if (queue_.size() >= cfg_.max_queued)
    return Status::Error(pto::kQueueFull, fmt::format("the job queue is full ({} jobs; [jobs] max_queued)", queue_.size()));
  Job j;
  j.id = next_id_++;
  j.spec = std::move(spec);
  j.submit_ns = now_ns();
  *id = j.id;
  *position = static_cast<uint32_t>(queue_.size() + (running_id_ ? 1 : 0));
  queue_.push_back(j.id);
  ++counts_.submitted_total;
  log("jobs")->info("job {} queued: {} ({}) position {}{}", j.id,
                    j.spec.callable.name.empty() ? j.spec.callable.handle.id.short_hex() : j.spec.callable.name,
                    pto::abi_name(j.spec.callable.abi), *position,
                    j.spec.label.empty() ? "" : ", label " + j.spec.label);
  jobs_.emplace(j.id, std::move(j));
  cv_.notify_all();
  return Status::Ok();
}

void JobManager::finish_locked(Job& j, pto::v1::JobState state, const std::string& message) {
  j.state = state;
  j.end_ns = now_ns();
  j.result.set_message(message);
  ++j.version;
  for (uint64_t t : j.spec.pinned) tensors_.pin(t, -1);
  j.spec.pinned.clear();
  if (state == pto::v1::SUCCEEDED)
    ++counts_.succeeded_total;
  else if (state == pto::v1::FAILED)
    ++counts_.failed_total;
  else
    ++counts_.cancelled_total;
  finished_order_.push_back(j.id);
  trim_locked();
}

void JobManager::trim_locked() {
  while (finished_order_.size() > cfg_.retain_finished) {
    auto it = jobs_.find(finished_order_.front());
    if (it != jobs_.end()) {
      // A job's trace lives as long as the job is retained.
      if (!it->second.result.trace_path().empty()) std::remove(it->second.result.trace_path().c_str());
      jobs_.erase(it);
    }
    finished_order_.pop_front();
  }
}

void JobManager::runner_main() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || (!queue_.empty() && running_id_ == 0); });
    if (stop_) return;
    const uint64_t id = queue_.front();
    queue_.pop_front();
    execute_locked(id, lk);
  }
}

// mu_ held on entry and exit; released while the Worker runs the job.
void JobManager::execute_locked(uint64_t id, std::unique_lock<std::mutex>& lk) {
  Job& j = jobs_[id];
  j.state = pto::v1::RUNNING;
  j.start_ns = now_ns();
  ++j.version;
  running_id_ = id;
  cv_.notify_all();
  const RegisteredCallable c = j.spec.callable;
  const pto::TaskArgs args = j.spec.args;
  const auto cancel = j.cancel;
  const auto cancel_reason = j.cancel_reason;
  pto::CallConfig cfg = j.spec.config;
  // A trace goes under the state directory, never where a client says.
  std::memset(cfg.output_prefix, 0, sizeof cfg.output_prefix);
  if (cfg.enable_profiling) {
    const std::string prefix = fmt::format("{}/traces/job-{}", cfg_.state_dir, id);
    std::snprintf(cfg.output_prefix, sizeof cfg.output_prefix, "%s", prefix.c_str());
    j.result.set_trace_path(prefix + ".json");
  }
  lk.unlock();

  auto fn = [&](pto::Orchestrator& o, const pto::TaskArgsView& view, const pto::CallConfig& cc) -> int {
    if (cancel->load()) {  // cancelled between dequeue and the start of the run
      std::string why;
      {
        std::lock_guard<std::mutex> g(mu_);
        why = *cancel_reason;
      }
      (void)w_.cancel_run(why);
      return 0;
    }
    return run_registered(c, o, args, view, cc);
  };
  pto::RunResult r = c.orchestration ? w_.run(fn, args, cfg) : w_.run(fn, pto::TaskArgs(), cfg);

  lk.lock();
  Job& done = jobs_[id];
  running_id_ = 0;
  const std::string trace = done.result.trace_path();
  done.result = to_proto(r);
  if (!trace.empty() && r.ok()) done.result.set_trace_path(trace);
  const pto::v1::JobState st = r.ok()                                   ? pto::v1::SUCCEEDED
                               : r.status.code == pto::kWorkerCancelled ? pto::v1::CANCELLED
                                                                        : pto::v1::FAILED;
  finish_locked(done, st, r.status.message);
  log("jobs")->info("job {} {}: {} tasks ({} ok, {} failed, {} skipped) in {:.3f} ms{}", id, pto::v1::JobState_Name(st),
                    r.tasks_submitted, r.tasks_succeeded, r.tasks_failed, r.tasks_skipped, double(r.wall_ns) / 1e6,
                    r.ok() ? "" : ": " + r.status.message);
  cv_.notify_all();
}

void JobManager::fill_result_locked(const Job& j, pto::v1::JobResult* out) const {
  *out = j.result;
  out->set_job_id(j.id);
  out->set_state(j.state);
  out->set_label(j.spec.label);
  const uint64_t now = now_ns();
  out->set_queued_ns((j.start_ns ? j.start_ns : (j.end_ns ? j.end_ns : now)) - j.submit_ns);
  if (j.start_ns) out->set_run_ns((j.end_ns ? j.end_ns : now) - j.start_ns);
  for (const TensorEntry& e : j.spec.outputs) to_proto(e, out->add_outputs());
}

Status JobManager::result(uint64_t id, pto::v1::JobResult* out) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end())
    return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {} (unknown, or no longer retained)", id));
  fill_result_locked(it->second, out);
  return Status::Ok();
}

Status JobManager::cancel(uint64_t id, pto::v1::JobState* state) {
  std::unique_lock<std::mutex> lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {}", id));
  Job& j = it->second;
  if (j.state == pto::v1::QUEUED) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), id));
    finish_locked(j, pto::v1::CANCELLED, "cancelled by a client before it started");
    cv_.notify_all();
  } else if (j.state == pto::v1::RUNNING) {
    cancel_running_locked("cancelled by a client");
  }
  *state = j.state;
  return Status::Ok();
}

Status JobManager::wait_event(uint64_t id, uint64_t* version, std::chrono::milliseconds timeout,
                              pto::v1::JobEvent* ev) {
  std::unique_lock<std::mutex> lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::Error(pto::kWorkerNotRegistered, fmt::format("no job {}", id));
  cv_.wait_for(lk, timeout, [&] {
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
  if (j.state == pto::v1::RUNNING) {
    const pto::Worker::RunProgress p = w_.progress();
    ev->set_tasks_done(p.finished);
    ev->set_tasks_total(p.submitted);
  } else if (final_state(j.state)) {
    ev->set_tasks_done(j.result.tasks_succeeded() + j.result.tasks_failed() + j.result.tasks_skipped());
    ev->set_tasks_total(j.result.tasks_submitted());
    fill_result_locked(j, ev->mutable_result());
  }
  return Status::Ok();
}

std::vector<pto::v1::JobResult> JobManager::list(uint32_t limit) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<pto::v1::JobResult> out;
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && out.size() < limit; ++it) {
    out.emplace_back();
    fill_result_locked(it->second, &out.back());
  }
  return out;
}

JobCounts JobManager::counts() const {
  std::lock_guard<std::mutex> g(mu_);
  JobCounts c = counts_;
  c.queued = queue_.size();
  c.running = running_id_ ? 1 : 0;
  return c;
}

void JobManager::cancel_running_locked(const std::string& why) {
  if (!running_id_) return;
  Job& j = jobs_[running_id_];
  *j.cancel_reason = why;
  j.cancel->store(true);
  (void)w_.cancel_run(why);  // false if the run has not begun: the flag covers it
}

void JobManager::cancel_running(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  cancel_running_locked(why);
}

void JobManager::start_drain(const std::string& why) {
  std::lock_guard<std::mutex> g(mu_);
  draining_ = true;
  for (uint64_t id : queue_) finish_locked(jobs_[id], pto::v1::CANCELLED, "not started: " + why);
  queue_.clear();
  cv_.notify_all();
}

bool JobManager::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return running_id_ == 0 && queue_.empty(); });
}

}  // namespace ptod
