// The ChildPool (child_pool.h): mailboxes, fork, start-up, replacement and
// shutdown of the children.
#include "child_pool.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdlib>
#include <filesystem>

#include "engine_fork.h"
#include "scheduler.h"

namespace bip = boost::interprocess;

namespace pto {
namespace {

std::atomic<uint32_t> g_worker_serial{0};
constexpr const char* kShmPrefix = "pto-";

// Mailbox segments are named pto-<pid>-<serial>-<child>. Names are removed as
// soon as the segment is mapped (children inherit the mapping through fork),
// so only a crash inside init() can leave one; the next init() removes every
// segment whose creator is gone.
void sweep_stale_segments() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(kShmPrefix, 0) != 0) continue;
    const long pid = std::strtol(n.c_str() + 4, nullptr, 10);
    if (pid <= 0 || (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;
    bip::shared_memory_object::remove(n.c_str());
  }
}

}  // namespace

const char* kind_label(ChildKind k) { return k == ChildKind::CHIP ? "chip" : k == ChildKind::SUB ? "sub" : "l3"; }
std::string ChildInfo::label() const { return fmt::format("{} {}", kind_label(kind), index); }
std::string Endpoint::label() const {
  return link ? fmt::format("{} {} ({})", kind_label(kind), index, link->label())
              : fmt::format("{} {}", kind_label(kind), index);
}

Endpoint::Endpoint() = default;
Endpoint::~Endpoint() = default;

ChildPool::~ChildPool() { clear(); }

Status ChildPool::make_mailboxes(ChildKind kind, int n, uint32_t serial, Scheduler& scheduler,
                                 std::vector<std::unique_ptr<Endpoint>>& list) {
  for (int i = 0; i < n; ++i) {
    auto ep = std::make_unique<Endpoint>();
    ep->kind = kind;
    ep->index = i;
    const std::string name = fmt::format("{}{}-{}-{}{}", kShmPrefix, getpid(), serial, kind_label(kind), i);
    try {
      bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write);
      shm.truncate(static_cast<bip::offset_t>(kMailboxBytes));
      ep->region = std::make_unique<bip::mapped_region>(shm, bip::read_write);
      bip::shared_memory_object::remove(name.c_str());
    } catch (const bip::interprocess_exception& e) {
      bip::shared_memory_object::remove(name.c_str());
      return Status::Error(kWorkerChildFailed,
                           fmt::format("mailbox {} for {} {}: {}", name, kind_label(kind), i, e.what()));
    }
    ep->mb = new (ep->region->get_address()) Mailbox();
    ep->transport = make_mailbox_transport(scheduler);
    list.push_back(std::move(ep));
  }
  return Status::Ok();
}

Status ChildPool::create(Scheduler& scheduler, const RemoteBuffers& buffers) {
  owner_pid_ = getpid();
  sweep_stale_segments();
  if (Status s = bell_map_.map(4096, "the doorbell"); !s.ok()) return s;
  remove_shared_region(bell_map_.data());  // not tensor memory
  bell_ = new (bell_map_.data()) SharedDoorbell();
  const uint32_t serial = g_worker_serial.fetch_add(1);
  if (Status s = make_mailboxes(ChildKind::CHIP, cfg_.level == 3 ? cfg_.num_chips : 0, serial, scheduler, chips_);
      !s.ok())
    return s;
  if (Status s = make_mailboxes(ChildKind::SUB, cfg_.num_sub_workers, serial, scheduler, subs_); !s.ok()) return s;
  if (Status s = make_mailboxes(ChildKind::L3, static_cast<int>(inner_.size()), serial, scheduler, l3s_); !s.ok())
    return s;
  for (auto& link : links_) {  // remote L3 workers follow the local ones
    auto ep = std::make_unique<Endpoint>();
    ep->kind = ChildKind::L3;
    ep->index = static_cast<int>(l3s_.size());
    ep->link = link;
    ep->transport = make_remote_transport(scheduler, buffers);
    l3s_.push_back(std::move(ep));
  }
  return Status::Ok();
}

Status ChildPool::fork_child(Endpoint& ep, bool replacement, const ChildMain& main) {
  Mailbox* mb = ep.mb;
  mb->state.store(MB_IDLE, std::memory_order_relaxed);
  mb->child_parked.store(0, std::memory_order_relaxed);
  mb->clear_error();
  ep.running = nullptr;
  ep.in_control = false;
  ep.seq = 0;
  // PR_SET_PDEATHSIG fires when the forking *thread* ends; only the main
  // thread lives as long as the process. Children forked from another thread
  // watch their parent with a thread of their own instead (child.cpp).
  const bool from_main_thread = gettid() == getpid();
  const pid_t pid = engine_fork();
  if (pid < 0) return Status::Error(kWorkerChildFailed, fmt::format("fork for {}: {}", ep.label(), errno_text(errno)));
  if (pid == 0) main(ep, from_main_thread);
  ep.pid = pid;
  ep.reaped = false;
  if (replacement) ++ep.restarts;
  return Status::Ok();
}

Status ChildPool::await_ready(Endpoint& ep, uint64_t deadline) {
  Mailbox* mb = ep.mb;
  const pid_t pid = ep.pid;
  for (;;) {
    const uint32_t s = mb->state.load(std::memory_order_acquire);
    int status = 0;
    if (s == MB_INIT_READY) {
      mb->state.store(MB_IDLE, std::memory_order_release);
      std::lock_guard<std::mutex> g(lock_.mu);
      ep.alive = true;
      ep.death.clear();
      ep.beat = mb->heartbeat.load(std::memory_order_relaxed);
      ep.beat_ns = now_ns();
      return Status::Ok();
    }
    if (s == MB_INIT_FAILED) {
      const std::string why = mb->error();
      waitpid(pid, &status, 0);  // it exits right after reporting
      ep.reaped = true;
      ep.death = "failed to start: " + why;
      return Status::Error(kWorkerChildFailed, fmt::format("{} failed to start: {}", ep.label(), why));
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ep.reaped = true;
      ep.death = "died during start-up";
      return Status::Error(kWorkerChildFailed,
                           fmt::format("{} (pid {}) died during start-up ({})", ep.label(), pid,
                                       WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                           : "exit " + std::to_string(WEXITSTATUS(status))));
    }
    if (now_ns() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ep.reaped = true;
      ep.death = "did not start in time";
      return Status::Error(kWorkerTimeout, fmt::format("{} did not report INIT_READY within {} ms (init_timeout_ms)",
                                                       ep.label(), cfg_.init_timeout_ms));
    }
    futex_wait_shared(&mb->state, s, 2'000'000);
  }
}

Status ChildPool::start_all(const ChildMain& main) {
  Status fork_error;
  {
    std::lock_guard<std::mutex> g(lock_.mu);
    for (auto* list : {&chips_, &subs_, &l3s_})
      for (auto& ep : *list)
        if (Status s = ep->is_remote() ? Status::Ok() : fork_child(*ep, false, main); !s.ok()) {
          fork_error = s;
          break;
        }
  }
  // One deadline for all: they were forked together and start side by side,
  // so init() takes init_timeout_ms at most, not that for each child in turn.
  const uint64_t deadline = now_ns() + uint64_t(cfg_.init_timeout_ms) * 1'000'000;
  for (auto* list : {&chips_, &subs_, &l3s_})
    for (auto& ep : *list)
      if (ep->pid > 0 && !ep->reaped)
        if (Status s = await_ready(*ep, deadline); !s.ok() && fork_error.ok()) fork_error = s;
  return fork_error;
}

Status ChildPool::respawn(Endpoint& ep, const ChildMain& main) {
  if (!ep.reaped && ep.pid > 0) {  // killed: SIGKILL ends it at once
    int status;
    waitpid(ep.pid, &status, 0);
    ep.reaped = true;
  }
  ++restarts_;
  if (Status s = fork_child(ep, true, main); !s.ok()) return s;
  ep.starting = true;
  ep.start_deadline_ns = now_ns() + uint64_t(cfg_.init_timeout_ms) * 1'000'000;
  ep.beat = ep.mb->heartbeat.load(std::memory_order_relaxed);
  ep.beat_ns = now_ns();
  return Status::Ok();
}

bool ChildPool::poll_start(Endpoint& ep, uint64_t now) {
  Mailbox* mb = ep.mb;
  const uint32_t s = mb->state.load(std::memory_order_acquire);
  int status = 0;
  auto failed = [&](const std::string& why) {
    ep.starting = false;
    ep.reaped = true;
    ep.death = why;
    return false;
  };
  if (s == MB_INIT_READY) {
    mb->state.store(MB_IDLE, std::memory_order_release);
    ep.starting = false;
    ep.alive = true;
    ep.death.clear();
    ep.beat = mb->heartbeat.load(std::memory_order_relaxed);
    ep.beat_ns = now;
    return true;
  }
  if (s == MB_INIT_FAILED) {
    const std::string why = mb->error();
    waitpid(ep.pid, &status, 0);  // it exits right after reporting
    return failed("failed to start: " + why);
  }
  if (waitpid(ep.pid, &status, WNOHANG) == ep.pid)
    return failed(fmt::format("died during start-up ({})", WIFSIGNALED(status)
                                                               ? "signal " + std::to_string(WTERMSIG(status))
                                                               : "exit " + std::to_string(WEXITSTATUS(status))));
  if (now > ep.start_deadline_ns) {
    kill(ep.pid, SIGKILL);
    waitpid(ep.pid, &status, 0);
    return failed(fmt::format("did not report INIT_READY within {} ms (init_timeout_ms)", cfg_.init_timeout_ms));
  }
  // A sub or chip child beats from its first moment: one that stopped while
  // starting (SIGSTOP) is not waited for until init_timeout_ms.
  const uint64_t live_ns = uint64_t(cfg_.liveness_timeout_ms) * 1'000'000;
  if (live_ns != 0 && ep.kind != ChildKind::L3) {
    const uint64_t beat = mb->heartbeat.load(std::memory_order_relaxed);
    if (beat != ep.beat) {
      ep.beat = beat;
      ep.beat_ns = now;
    } else if (now - ep.beat_ns > live_ns) {
      kill(ep.pid, SIGKILL);
      waitpid(ep.pid, &status, 0);
      return failed(fmt::format("stopped making progress while starting: no heartbeat for {} ms",
                                (now - ep.beat_ns) / 1'000'000));
    }
  }
  return false;
}

std::string ChildPool::shutdown() {
  std::vector<Endpoint*> all;
  for (auto* list : {&chips_, &subs_, &l3s_})
    for (auto& ep : *list)
      if (!ep->is_remote() && ep->pid > 0 && !ep->reaped) all.push_back(ep.get());
  for (Endpoint* ep : all) {
    if (!ep->alive) continue;
    ep->mb->state.store(MB_SHUTDOWN, std::memory_order_seq_cst);
    futex_wake_shared(&ep->mb->state);
  }
  const uint64_t deadline = now_ns() + uint64_t(cfg_.shutdown_timeout_ms) * 1'000'000;
  std::string stuck;
  for (Endpoint* ep : all) {
    int status = 0;
    for (;;) {
      const pid_t r = waitpid(ep->pid, &status, WNOHANG);
      if (r == ep->pid || r < 0) break;
      if (now_ns() > deadline || !ep->alive) {
        kill(ep->pid, SIGKILL);
        waitpid(ep->pid, &status, 0);
        if (ep->alive) stuck += (stuck.empty() ? "" : ", ") + ep->label();
        break;
      }
      usleep(500);
    }
    ep->alive = false;
    ep->reaped = true;
  }
  return stuck;
}

void ChildPool::clear() {
  for (auto* list : {&chips_, &subs_, &l3s_}) list->clear();  // unmaps the mailboxes
  bell_ = nullptr;
  bell_map_.reset();
}

std::vector<ChildInfo> ChildPool::children(bool closed) const {
  std::vector<ChildInfo> out;
  for (auto* list : {&chips_, &subs_, &l3s_})
    for (auto& ep : *list) {
      ChildInfo c;
      c.kind = ep->kind;
      c.index = ep->index;
      c.pid = ep->pid;
      c.tasks_run = ep->tasks_run;
      c.restarts = ep->restarts;
      if (ep->kind == ChildKind::CHIP) c.platform = cfg_.platform;
      c.state = closed                                             ? ChildState::STOPPED
                : ep->starting                                     ? ChildState::STARTING
                : !ep->alive                                       ? ChildState::DEAD
                : (ep->transport->held(*ep) > 0 || ep->in_control) ? ChildState::BUSY
                                                                   : ChildState::IDLE;
      // A local L3 child's own children, as it last reported them.
      std::vector<ChildInfo> inner;
      if (ep->kind == ChildKind::L3 && !ep->is_remote() && ep->mb && ep->mb->inner.read(&inner)) {
        const size_t i = static_cast<size_t>(ep->index);
        const std::string platform = i < inner_.size() ? inner_[i]->config().platform : std::string();
        for (const ChildInfo& k : inner)
          c.peer_children.push_back({k.label(), child_state_name(k.state), k.pid, k.tasks_run,
                                     k.kind == ChildKind::CHIP ? 2 : 0, k.kind == ChildKind::CHIP ? platform : ""});
      }
      if (ep->is_remote()) {
        c.remote = true;
        c.address = ep->link->label();
        c.state_text = ep->link->state_text();
        c.in_flight = ep->transport->held(*ep);
        c.credits = ep->link->credits();
        c.peer_children = ep->link->peer_children();
      }
      out.push_back(c);
    }
  return out;
}

}  // namespace pto
