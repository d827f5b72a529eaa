// An endpoint of the engine — a forked child with its shared-memory mailbox,
// or a RemoteLink to an L3 Worker in another daemon — and the one interface
// the scheduler drives both through (docs/worker.md, "Endpoints").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "mailbox.h"
#include "pto/callable.h"
#include "pto/worker.h"
#include "task_node.h"

namespace boost::interprocess {
class mapped_region;
}

namespace pto {

struct Endpoint;
class Scheduler;
class RemoteBuffers;

// How the scheduler reaches one endpoint. The scheduler's policy — ready
// queues, groups, pinning, dependencies, poisoning, retries — only calls
// this; endpoints.cpp has the two implementations: a forked child and its
// shared-memory mailbox (one task at a time, liveness by waitpid), and a
// RemoteLink to another daemon's L3 Worker (several tasks under the peer's
// credits, liveness = the session is READY). Called by the drive-token
// holder; dispatch and has_completions without the engine lock, the rest with it.
class EndpointTransport {
 public:
  virtual ~EndpointTransport() = default;
  virtual uint32_t capacity(const Endpoint& ep) const = 0;  // tasks it may hold at once
  virtual uint32_t held(const Endpoint& ep) const = 0;      // tasks it holds now
  // The task is now this endpoint's: bookkeeping, and *seq for dispatch.
  virtual void accept(Endpoint& ep, TaskNode* s, int member, uint64_t* seq) = 0;
  // Sends it: writes the mailbox, or queues it on the link.
  virtual void dispatch(Endpoint& ep, TaskNode* s, int member, uint64_t seq) = 0;
  // Whether collect() has something to do (a cheap look, no lock).
  virtual bool has_completions(const Endpoint& ep) const = 0;
  // Hands finished tasks to the scheduler (Scheduler::complete_member).
  virtual void collect(Endpoint& ep) = 0;
  // Every millisecond: liveness and task timeouts.
  virtual void check(Endpoint& ep, uint64_t now) = 0;
  // Why it is not alive: how the child died, or the session's state.
  virtual std::string down_reason(const Endpoint& ep) const = 0;
};
std::unique_ptr<EndpointTransport> make_mailbox_transport(Scheduler& s);
std::unique_ptr<EndpointTransport> make_remote_transport(Scheduler& s, const RemoteBuffers& buffers);

struct Endpoint {
  Endpoint();
  ~Endpoint();  // out of line: the mailbox mapping's type is complete only in child_pool.cpp
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ChildKind kind = ChildKind::SUB;
  int index = 0;
  std::unique_ptr<boost::interprocess::mapped_region> region;
  Mailbox* mb = nullptr;
  pid_t pid = -1;
  bool alive = false;
  bool reaped = true;  // false while a dead child's pid may still need waitpid
  std::string death;   // how it died
  uint32_t restarts = 0;
  // Replacement (the driver forks it as soon as the death is noticed).
  bool starting = false;        // forked, not yet INIT_READY
  uint64_t start_deadline_ns = 0;
  uint64_t restart_at_ns = 0;   // after a failed start: not before this
  uint32_t failed_starts = 0;   // in a row
  // Liveness: the mailbox heartbeat as last seen, and when it last moved.
  uint64_t beat = 0, beat_ns = 0;
  uint64_t tasks_run = 0;
  // Scheduler-owned.
  TaskNode* running = nullptr;
  // A chip child's runtime progress in its running task, as last added to
  // the task's run (the mailbox's chip_submitted / chip_completed).
  uint64_t chip_seen_submitted = 0, chip_seen_completed = 0;
  uint64_t dispatch_ns = 0;
  uint64_t timeout_ns = 0;
  uint64_t seq = 0;
  bool in_control = false;
  // Control requests this child owes: registrations (and unregistrations)
  // that finished while it was busy. It takes no task before it has served
  // them, in order (docs/worker.md, "Registration"). Dropped when it dies:
  // its replacement starts with the registry as it is then.
  struct OwedControl {
    ControlOp op;
    Digest digest;
    std::vector<uint8_t> payload;
  };
  std::deque<OwedControl> owed;
  bool owed_sent = false;  // owed.front() is in the mailbox
  uint64_t owed_sent_ns = 0;
  // Remote endpoints only: the link, and the tasks it holds (up to its credits).
  std::shared_ptr<RemoteLink> link;
  struct InFlight {
    uint64_t seq;
    TaskNode* s;  // null once it timed out here: the entry only holds the peer's credit
    int member;
    uint64_t dispatch_ns, timeout_ns;
  };
  std::vector<InFlight> inflight;
  std::unique_ptr<EndpointTransport> transport;
  bool is_remote() const { return link != nullptr; }
  bool has_room() const { return alive && transport->held(*this) < transport->capacity(*this); }
  std::string label() const;
  // A dead child comes back unless its last start failed.
  bool coming_back() const { return alive || starting || (!is_remote() && failed_starts == 0); }
};

const char* kind_label(ChildKind k);

}  // namespace pto
