// The Scheduler's control requests (scheduler.h, docs/worker.md
// "Registration"): the queued requests the CallableTable waits for, sent to
// each target child as it becomes idle, and the requests children owe - the
// ones that finished while they were busy, served before their next task.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "child_pool.h"
#include "engine_log.h"
#include "scheduler.h"

namespace pto {

void Scheduler::add_control(std::shared_ptr<ControlRequest> c) {
  controls_.push_back(std::move(c));
  controls_queued_.store(static_cast<uint32_t>(controls_.size()), std::memory_order_release);
}

void Scheduler::fail_controls(const std::string& why) {
  for (auto& c : controls_) {
    c->failure = why;
    c->finished = true;
    c->cv.notify_all();
  }
  controls_.clear();
  controls_queued_.store(0, std::memory_order_release);
  pool_.for_each([this](Endpoint& ep) { drop_owed(ep); });
}

void Scheduler::drop_owed(Endpoint& ep) {
  if (ep.owed.empty()) return;
  owed_.fetch_sub(static_cast<uint32_t>(ep.owed.size()), std::memory_order_release);
  ep.owed.clear();
  ep.owed_sent = false;
}

// Into an idle child's mailbox; the child answers MB_CONTROL_DONE.
void Scheduler::send_control(Endpoint& ep, ControlOp op, const Digest& digest, const std::vector<uint8_t>& payload) {
  Mailbox* mb = ep.mb;
  std::memcpy(mb->digest, digest.data(), 32);
  mb->control_op = op;
  if (!payload.empty()) std::memcpy(mb->blob, payload.data(), payload.size());
  mb->blob_bytes = static_cast<uint32_t>(payload.size());
  mb->sequence = ++ep.seq;
  ep.in_control = true;
  mb->state.store(MB_CONTROL_REQUEST, std::memory_order_seq_cst);
  if (mb->child_parked.load(std::memory_order_seq_cst)) futex_wake_shared(&mb->state);
}

static bool answered(const Endpoint& ep) {
  return ep.mb->state.load(std::memory_order_acquire) == MB_CONTROL_DONE && ep.mb->done_sequence == ep.seq;
}

static const char* op_name(ControlOp op) {
  return op == CTRL_REGISTER ? "installing" : op == CTRL_UNREGISTER ? "removing" : "querying";
}

// The front of each child's owed requests, once the child is idle. A child
// that cannot install what the others did (published: tasks may come for
// it) is killed; its replacement installs the registry as it starts, or
// fails to start, and is named so, in Worker::children().
bool Scheduler::progress_owed() {
  if (owed_.load(std::memory_order_acquire) == 0) return false;
  bool progressed = false;
  const uint64_t now = now_ns();
  const uint64_t limit_ns = uint64_t(cfg_.control_timeout_ms) * 1'000'000;
  pool_.for_each([&](Endpoint& ep) {
    if (ep.owed.empty()) return;
    Endpoint::OwedControl& o = ep.owed.front();
    if (!ep.owed_sent) {
      if (!ep.alive || ep.running || ep.in_control) return;
      send_control(ep, o.op, o.digest, o.payload);
      ep.owed_sent = true;
      ep.owed_sent_ns = now;
      progressed = true;
      return;
    }
    const std::string what = fmt::format("{} callable {}", op_name(o.op), to_hex(o.digest).substr(0, 16));
    if (!answered(ep)) {
      if (now - ep.owed_sent_ns > limit_ns) {
        endpoint_failed(ep,
                        fmt::format("did not finish {} within {} ms and was killed", what, cfg_.control_timeout_ms));
        progressed = true;
      }
      return;
    }
    const bool refused = ep.mb->error_code != 0 && o.op == CTRL_REGISTER;
    const std::string error = refused ? ep.mb->error() : std::string();
    ep.mb->state.store(MB_IDLE, std::memory_order_release);
    ep.in_control = false;
    ep.owed_sent = false;
    ep.owed.pop_front();
    owed_.fetch_sub(1, std::memory_order_release);
    progressed = true;
    if (refused) endpoint_failed(ep, fmt::format("failed {} (registered while it was busy): {}; killed", what, error));
  });
  return progressed;
}

std::string Scheduler::pending_targets(const ControlRequest& c) const {
  std::string out;
  for (size_t i = 0; i < c.targets.size(); ++i) {
    if (c.done[i]) continue;
    const Endpoint& ep = *c.targets[i];
    std::string why = c.sent[i]          ? "has not answered"
                      : !ep.alive        ? "is being replaced"
                      : ep.running       ? fmt::format("is running task {}", ep.running->id)
                      : !ep.owed.empty() ? "is serving an earlier registration"
                                         : "is busy";
    out += fmt::format("{}{} {}", out.empty() ? "" : "; ", ep.label(), why);
  }
  return out;
}

// Whether a request may finish while some of its targets are busy (running a
// task, or serving what they owe): they then owe it. A query waits for its
// child - until its caller gave up: left at the front, it would hold every
// request behind it as long as the child's task runs. A registration waits
// until one target has installed it, since a child's acknowledgement is what
// shows the callable loads - published with none, a callable that no child
// can load would kill each child in turn - and one published later, not as
// it finishes (the level-4 path, after the remote workers), waits for every
// target: a busy child replaced before the publication would fork without
// the callable and no longer owe it.
static bool may_leave_busy(const ControlRequest& c) {
  if (c.op == CTRL_QUERY) return c.abandoned;
  if (c.op == CTRL_REGISTER && !c.rolling_back && c.failure.empty() && !c.abandoned)
    return !c.installed.empty() && c.on_success != nullptr;
  return true;
}

bool Scheduler::progress_controls() {
  if (controls_queued_.load(std::memory_order_acquire) == 0 && owed_.load(std::memory_order_acquire) == 0)
    return false;  // the common case, without the lock
  std::lock_guard<std::mutex> g(lock_.mu);
  bool progressed = progress_owed();
  if (controls_.empty()) return progressed;
  ControlRequest& c = *controls_.front();
  const uint64_t limit_ns = uint64_t(cfg_.control_timeout_ms) * 1'000'000;
  bool all_done = true;
  bool busy_left = false;  // targets not sent because they were busy
  for (size_t i = 0; i < c.targets.size(); ++i) {
    if (c.done[i]) continue;
    Endpoint& ep = *c.targets[i];
    if (!c.sent[i]) {
      if (!ep.alive) {
        // Being replaced: it gets the request once it is up (its fork did
        // not inherit a callable that is not published yet).
        const bool expired = now_ns() - c.created_ns > limit_ns;
        if (ep.coming_back() && !expired) {
          all_done = false;
          continue;
        }
        c.done[i] = 1;
        c.failure += fmt::format("{}{} is not running ({})", c.failure.empty() ? "" : "; ", ep.label(), ep.death);
        progressed = true;
        continue;
      }
      if (ep.running || ep.in_control || !ep.owed.empty()) {
        busy_left = true;
        continue;
      }
      all_done = false;
      send_control(ep, c.op, c.digest, c.payload);
      c.sent[i] = 1;
      c.sent_ns[i] = now_ns();
      c.incarnation[i] = ep.restarts;
      progressed = true;
      continue;
    }
    if (!ep.alive) {
      // Sent, then it died: its replacement gets the request once it is up.
      if (ep.coming_back() && now_ns() - c.created_ns <= limit_ns) {
        c.sent[i] = 0;
        all_done = false;
        progressed = true;
        continue;
      }
      c.done[i] = 1;
      c.failure += fmt::format("{}{} died ({})", c.failure.empty() ? "" : "; ", ep.label(), ep.death);
      progressed = true;
      continue;
    }
    if (!answered(ep)) {
      if (now_ns() - c.sent_ns[i] > limit_ns) {
        // A child stuck installing (a library constructor that never returns)
        // would hold every later control request: it is killed instead.
        endpoint_failed(
            ep, fmt::format("did not answer a control request within {} ms and was killed", cfg_.control_timeout_ms));
        c.done[i] = 1;
        c.failure += fmt::format("{}{} {}", c.failure.empty() ? "" : "; ", ep.label(), ep.death);
        progressed = true;
        continue;
      }
      all_done = false;
      continue;
    }
    c.done[i] = 1;
    if (ep.mb->error_code != 0)
      c.failure += (c.failure.empty() ? "" : "; ") + ep.mb->error();
    else if (c.op == CTRL_REGISTER)
      c.installed.push_back(&ep);
    c.query_result = ep.mb->control_result;
    ep.mb->state.store(MB_IDLE, std::memory_order_release);
    ep.in_control = false;
    progressed = true;
  }
  if (!all_done || (busy_left && !may_leave_busy(c))) return progressed;
  return finish_control(c) || progressed;
}

// Every target answered, or is busy and will owe it: re-sends to targets
// replaced since they answered, rolls a failed registration back, or ends
// the request (publishing it) and hands it to the busy targets.
bool Scheduler::finish_control(ControlRequest& c) {
  // A target replaced after it answered: its new process forked without the
  // callable (not published yet), so it gets the request again — within the
  // request's time limit.
  if (c.op == CTRL_REGISTER && !c.rolling_back && c.failure.empty()) {
    bool again = false;
    for (size_t i = 0; i < c.targets.size(); ++i)
      if (c.sent[i] && c.targets[i]->restarts != c.incarnation[i]) {
        if (now_ns() - c.created_ns > uint64_t(cfg_.control_timeout_ms) * 1'000'000) {
          c.failure += fmt::format("{}{} kept being replaced while the request was in flight",
                                   c.failure.empty() ? "" : "; ", c.targets[i]->label());
          continue;
        }
        c.installed.erase(std::remove(c.installed.begin(), c.installed.end(), c.targets[i]), c.installed.end());
        c.sent[i] = c.done[i] = 0;
        again = true;
      }
    if (again) return true;
  }
  if (c.op == CTRL_REGISTER && (!c.failure.empty() || c.abandoned) && !c.installed.empty()) {
    // Roll back on the children that did install it (the busy ones never got it).
    c.rolling_back = true;
    c.op = CTRL_UNREGISTER;
    c.targets = c.installed;
    c.installed.clear();
    c.sent.assign(c.targets.size(), 0);
    c.sent_ns.assign(c.targets.size(), 0);
    c.incarnation.assign(c.targets.size(), 0);
    c.done.assign(c.targets.size(), 0);
    c.created_ns = now_ns();
    return true;
  }
  // The busy targets owe it: a published registration, or an unregistration
  // (the user's, or a rollback's). A failed registration never reached them.
  if (c.op == CTRL_UNREGISTER || (c.op == CTRL_REGISTER && c.failure.empty() && !c.abandoned))
    for (size_t i = 0; i < c.targets.size(); ++i)
      if (!c.sent[i] && !c.done[i]) {
        c.targets[i]->owed.push_back({c.op, c.digest, c.payload});
        owed_.fetch_add(1, std::memory_order_release);
      }
  c.finished = true;
  if (c.failure.empty() && !c.abandoned && c.on_success) c.on_success();  // mu held: published atomically
  c.cv.notify_all();
  controls_.pop_front();
  controls_queued_.store(static_cast<uint32_t>(controls_.size()), std::memory_order_release);
  return true;
}

}  // namespace pto
