// The ChildPool: the engine's endpoints and their processes (docs/worker.md,
// "Mailbox" and "Failure model"). It makes one shared-memory mailbox per
// child and the doorbell, forks the children (chips and sub workers at level
// 3; L3 children, each with an inner Worker, at level 4), waits for each to
// report INIT_READY, replaces dead ones, and stops them all at close. Remote
// L3 workers (RemoteLink) are endpoints too, after the local L3 children.
// Lists and liveness fields are under the engine lock (mu) once the
// scheduler runs. The first children are forked by init() before any thread
// of the engine exists; replacements are forked by the driver while it holds
// the engine lock.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "endpoint.h"
#include "engine_lock.h"
#include "futex.h"
#include "shared_memory.h"

namespace pto {

class Scheduler;
class RemoteBuffers;

class ChildPool {
 public:
  // What a forked child runs (it never returns).
  using ChildMain = std::function<void(Endpoint& ep, bool forked_by_main_thread)>;

  ChildPool(const WorkerConfig& cfg, EngineLock& lock) : cfg_(cfg), lock_(lock) {}
  ~ChildPool();

  // Level >= 4, before init: local L3 Workers and remote workers.
  void add_inner(std::unique_ptr<Worker> inner) { inner_.push_back(std::move(inner)); }
  void add_link(std::shared_ptr<RemoteLink> link) { links_.push_back(std::move(link)); }
  const std::vector<std::unique_ptr<Worker>>& inner() const { return inner_; }
  const std::vector<std::shared_ptr<RemoteLink>>& links() const { return links_; }

  // init(): the doorbell and a mailbox per child, and the endpoints (remote
  // ones too). Nothing is forked yet.
  Status create(Scheduler& scheduler, const RemoteBuffers& buffers);
  // Forks every local child (all at once, so they prepare their callables in
  // parallel), then waits for each. The caller holds no thread of its own.
  Status start_all(const ChildMain& main);
  // Replacement by the driver, without blocking it (mu held, so the child
  // inherits a consistent registry): respawn forks; poll_start then reports
  // INIT_READY (true, the endpoint is alive), a failed start (false, with
  // ep.death set and the child reaped), or nothing yet (false, still starting).
  Status respawn(Endpoint& ep, const ChildMain& main);
  bool poll_start(Endpoint& ep, uint64_t now);
  // SHUTDOWN to every live child, reaped within shutdown_timeout_ms, then
  // SIGKILL; returns the labels of children that had to be killed.
  std::string shutdown();
  // Unmaps the mailboxes and the doorbell.
  void clear();

  SharedDoorbell* bell() const { return bell_; }
  pid_t owner_pid() const { return owner_pid_; }
  std::vector<std::unique_ptr<Endpoint>>& chips() { return chips_; }
  std::vector<std::unique_ptr<Endpoint>>& subs() { return subs_; }
  std::vector<std::unique_ptr<Endpoint>>& l3s() { return l3s_; }
  const std::vector<std::unique_ptr<Endpoint>>& l3s() const { return l3s_; }
  // The next-level workers: chips at level 3, L3 Workers above.
  std::vector<std::unique_ptr<Endpoint>>& next_level() { return cfg_.level == 3 ? chips_ : l3s_; }
  template <class F>
  void for_each(F&& f) {
    for (auto* list : {&chips_, &subs_, &l3s_})
      for (auto& ep : *list) f(*ep);
  }
  uint64_t restarts() const { return restarts_; }  // mu
  // The worker tree (mu held).
  std::vector<ChildInfo> children(bool closed) const;

 private:
  Status fork_child(Endpoint& ep, bool replacement, const ChildMain& main);
  // Until the child reports INIT_READY, fails, dies or the deadline (now_ns) passes.
  Status await_ready(Endpoint& ep, uint64_t deadline);
  Status make_mailboxes(ChildKind kind, int n, uint32_t serial, Scheduler& scheduler,
                        std::vector<std::unique_ptr<Endpoint>>& list);

  const WorkerConfig& cfg_;
  EngineLock& lock_;
  pid_t owner_pid_ = 0;  // the process that init()ed (children never close it)
  std::vector<std::unique_ptr<Endpoint>> chips_, subs_, l3s_;
  std::vector<std::unique_ptr<Worker>> inner_;       // level >= 4: one per local L3 child
  std::vector<std::shared_ptr<RemoteLink>> links_;   // level >= 4: remote L3 workers, after the local ones in l3s_
  SharedMapping bell_map_;
  SharedDoorbell* bell_ = nullptr;
  uint64_t restarts_ = 0;
};

}  // namespace pto
