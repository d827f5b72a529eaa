// The child side of a mailbox (docs/worker.md, "Mailbox" and "Failure model"): after fork, a child installs
// the callables it inherited, reports INIT_READY (or INIT_FAILED with the
// reason), then serves TASK_READY and CONTROL_REQUEST until SHUTDOWN. Chip
// children run chip callables on their own simulated chip (ChipWorker); sub
// children call native functions; L3 children run orchestrations on their own
// inner Worker. A heartbeat thread shows the parent the process is not
// stopped. A child never returns into the parent's stack: it leaves with
// _exit, and it dies with its parent (PR_SET_PDEATHSIG, or the heartbeat
// thread's check).
#include <fmt/format.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "chip_worker.h"
#include "output_capture.h"
#include "pto/base/cpu_set.h"
#include "pto/base/shared_library.h"
#include "worker_impl.h"

namespace pto {
namespace {

bool wanted(uint32_t s) { return s == MB_TASK_READY || s == MB_CONTROL_REQUEST || s == MB_SHUTDOWN; }

EntryAbi abi_of(ChildKind k) {
  switch (k) {
    case ChildKind::CHIP: return EntryAbi::CHIP;
    case ChildKind::SUB: return EntryAbi::SUB;
    case ChildKind::L3: return EntryAbi::ORCHESTRATION;
  }
  return EntryAbi::SUB;
}

// Recomputes a descriptor from what the child will load, so a library that
// changed since registration is refused rather than run under the old digest.
Status verify(const Digest& want, const ControlDescriptor& d) {
  Callable c;
  switch (d.kind) {
    case CallableKind::CHIP: c = ChipCallable::from_config(d.path); break;
    case CallableKind::NATIVE_IMPORT:
      c = d.abi == EntryAbi::ORCHESTRATION ? OrchestrationCallable::import(d.path, d.symbol)
                                           : NativeCallable::import(d.path, d.symbol);
      break;
    case CallableKind::NATIVE_BLOB: {
      std::ifstream f(d.path, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      c = NativeCallable::blob(std::move(bytes), d.symbol);
      break;
    }
    case CallableKind::FUNCTION:
      return Status::Error(kWorkerInvalidArgument, "FUNCTION callables cannot be installed after fork");
  }
  if (!c.status.ok()) return c.status;
  const Digest got = c.identity().digest;
  if (got != want)
    return Status::Error(kWorkerInvalidArgument,
                         fmt::format("{} changed since it was registered: digest is now {}, registered as {}", d.path,
                                     to_hex(got), to_hex(want)));
  return Status::Ok();
}

// The capture of the task running now, drained by the heartbeat thread.
std::atomic<OutputCapture*> g_capture{nullptr};

// A chip child's runtime, for its heartbeat thread to publish the progress
// of a running chip task (set once the child's ChipWorker exists).
std::atomic<const ChipWorker*> g_progress_chip{nullptr};

class ChildRunner {
 public:
  ChildRunner(Endpoint& ep, SharedDoorbell* bell, pid_t parent, uint32_t spin_us, Worker* inner,
              const std::string& platform)
      : ep_(ep), mb_(ep.mb), bell_(bell), parent_(parent), spin_ns_(uint64_t(spin_us) * 1000), inner_(inner) {
    if (ep.kind == ChildKind::CHIP) {
      chip_.set_platform(platform);
      chip_.set_progress_sink(&mb_->chip_submitted, &mb_->chip_completed);
      g_progress_chip.store(&chip_, std::memory_order_release);
    }
    g_capture.store(&capture_, std::memory_order_release);
  }
  ~ChildRunner() {
    g_progress_chip.store(nullptr, std::memory_order_release);
    g_capture.store(nullptr, std::memory_order_release);
  }

  Status install(const Digest& digest, const ControlDescriptor& d, const Callable* local) {
    // An L3 child also takes chip callables: it registers them with its own
    // chips and runs each task as a one-task run.
    const bool l3_chip = ep_.kind == ChildKind::L3 && d.abi == EntryAbi::CHIP;
    if (d.abi != abi_of(ep_.kind) && !l3_chip)
      return Status::Error(kWorkerInvalidArgument,
                           fmt::format("a {} callable cannot run on {}", abi_name(d.abi), ep_.label()));
    if (l3_chip) {
      if (!local)
        if (Status s = verify(digest, d); !s.ok()) return s;
      Native n;
      n.chip = inner_->register_callable(local ? *local : ChipCallable::from_config(d.path));
      if (!n.chip.ok()) return n.chip.status;
      natives_[digest] = std::move(n);
      return Status::Ok();
    }
    if (d.kind == CallableKind::FUNCTION && (!local || (!local->sub_fn && !local->orch_fn))) {
      // By reference: the name is the identity, the resolver finds the code
      // (and refuses code that is not what was registered).
      if (d.abi != EntryAbi::SUB)
        return Status::Error(kWorkerInvalidArgument, "only sub functions are registered by reference");
      Native n;
      if (Status s = resolve_sub_function(d.name, &n.sub); !s.ok()) return s;
      natives_[digest] = std::move(n);
      return Status::Ok();
    }
    if (local && d.kind == CallableKind::FUNCTION) {
      Native n;
      n.sub = local->sub_fn;
      n.orch = local->orch_fn;
      natives_[digest] = std::move(n);
      return Status::Ok();
    }
    if (Status s = verify(digest, d); !s.ok()) return s;
    if (d.kind == CallableKind::CHIP) return chip_.install(digest, d.path);
    Native n;
    Status st;
    n.lib = pto::SharedLibrary::open(d.path, &st);
    if (!n.lib) return st;
    void* sym = n.lib->symbol(d.symbol.c_str(), &st);
    if (!sym) return st;
    if (d.abi == EntryAbi::ORCHESTRATION)
      n.orch_entry = reinterpret_cast<OrchestrationEntryFn>(sym);
    else
      n.entry = reinterpret_cast<PtoSubEntryFn>(sym);
    natives_[digest] = std::move(n);
    return Status::Ok();
  }

  bool installed(const Digest& d) const { return natives_.count(d) || chip_.has(d); }

  // An L3 child publishes its own children (mailbox InnerReport) for the
  // parent's worker tree.
  void report_inner() { mb_->inner.publish(inner_->children()); }
  void uninstall(const Digest& d) {
    natives_.erase(d);
    chip_.remove(d);
  }

  // Returns the process exit code.
  int serve() {
    for (;;) {
      const uint32_t s = wait_request();
      // Only a task's own output goes through the capture's memfd.
      if (s != MB_TASK_READY) capture_.release();
      if (s == MB_SHUTDOWN) return 0;
      if (s == MB_TASK_READY)
        run_task();
      else if (s == MB_CONTROL_REQUEST)
        run_control();
    }
  }

 private:
  struct Native {
    std::unique_ptr<pto::SharedLibrary> lib;
    PtoSubEntryFn entry = nullptr;
    OrchestrationEntryFn orch_entry = nullptr;
    SubFunction sub;
    OrchestrationFunction orch;
    CallableHandle chip;  // L3 child: a chip callable registered with the inner Worker
  };

  uint32_t wait_request() {
    const uint64_t t0 = now_ns();
    uint32_t spins = 0;
    for (;;) {
      uint32_t s = mb_->state.load(std::memory_order_acquire);
      if (wanted(s)) return s;
      if (now_ns() - t0 < spin_ns_) {
        for (int i = 0; i < 16; ++i) spin_step(spins);
        continue;
      }
      capture_.release();  // idle: the child's streams are its own again
      mb_->child_parked.store(1, std::memory_order_seq_cst);
      s = mb_->state.load(std::memory_order_seq_cst);
      if (!wanted(s)) futex_wait_shared(&mb_->state, s, 100'000'000);
      mb_->child_parked.store(0, std::memory_order_relaxed);
      if (getppid() != parent_) _exit(3);  // orphaned (PDEATHSIG normally got here first)
    }
  }

  // Answers the request this child took (state `from`). A compare-exchange,
  // so that a SHUTDOWN the parent wrote meanwhile is never overwritten.
  void reply(uint32_t from, uint32_t state) {
    mb_->done_sequence = mb_->sequence;
    mb_->state.compare_exchange_strong(from, state, std::memory_order_seq_cst);
    bell_->ring_answer();
  }

  void run_task() {
    Digest d;
    std::memcpy(d.data(), mb_->digest, 32);
    TaskArgsView view{};
    Status st =
        mb_->blob_bytes > kMailboxBlobCapacity
            ? Status::Error(kWorkerChildFailed, fmt::format("blob_bytes {} exceeds the mailbox", mb_->blob_bytes))
            : decode_args(mb_->blob, mb_->blob_bytes, &view);
    const CallConfig cfg = mb_->config;
    bool logged = false;
    if (st.ok()) {
      mb_->log_path[sizeof mb_->log_path - 1] = '\0';
      capture_.begin(mb_->log_path);
      try {
        st = execute(d, view, cfg);
      } catch (const std::exception& e) {
        st = Status::Error(kWorkerRunFailed, fmt::format("callable threw: {}", e.what()));
      } catch (...) {
        st = Status::Error(kWorkerRunFailed, "callable threw a non-std exception");
      }
      logged = capture_.end();
    }
    // An L3 child's inner Worker has children of its own that may log.
    mb_->log_appended = logged || inner_ ? 1 : 0;
    if (inner_) report_inner();  // before the answer: the parent reads it after
    if (st.ok()) {
      mb_->clear_error();
      reply(MB_TASK_READY, MB_TASK_DONE);
    } else {
      mb_->set_error(st.code ? st.code : 1, st.message);
      reply(MB_TASK_READY, MB_TASK_FAILED);
    }
    capture_.after_task();  // answered: the parent goes on meanwhile
  }

  Status execute(const Digest& d, const TaskArgsView& view, const CallConfig& cfg) {
    if (ep_.kind == ChildKind::CHIP) {
      if (!chip_.has(d))
        return Status::Error(kWorkerNotRegistered,
                             fmt::format("callable {} is not registered on {}", to_hex(d), ep_.label()));
      return chip_.run(d, view, cfg);
    }
    auto it = natives_.find(d);
    if (it == natives_.end())
      return Status::Error(kWorkerNotRegistered,
                           fmt::format("callable {} is not registered on {}", to_hex(d), ep_.label()));
    Native& n = it->second;
    if (ep_.kind == ChildKind::SUB) {
      if (n.sub) {
        std::string err;
        const int rc = n.sub(view, err);
        if (rc != 0) return Status::Error(rc, err.empty() ? fmt::format("returned {}", rc) : err);
        return Status::Ok();
      }
      // The callable's message buffer lives on this child's heap, not in the
      // mailbox: the args it reads are in the blob.
      std::vector<char> err(kMaxMessageBytes, '\0');
      const int rc = n.entry(&view, err.data(), err.size());
      if (rc != 0) {
        err.back() = '\0';
        return Status::Error(rc, err[0] ? std::string(err.data()) : fmt::format("returned {}", rc));
      }
      return Status::Ok();
    }
    // L3: an orchestration on the inner Worker, or a chip callable as a one-task run.
    if (n.chip.ok() && n.chip.abi == EntryAbi::CHIP && !n.orch && !n.orch_entry) {
      const CallableHandle h = n.chip;
      RunResult r = inner_->run(
          [&h](Orchestrator& o, const TaskArgsView& a, const CallConfig& c) {
            TaskArgs t;
            for (int i = 0; i < a.tensor_count; ++i) t.add_tensor(a.tensors[i], INOUT);
            for (int i = 0; i < a.scalar_count; ++i) t.add_scalar(a.scalars[i]);
            return o.submit_next_level(h, t, c).ok() ? 0 : 1;
          },
          TaskArgs::from_view(view), cfg);
      return r.ok() ? Status::Ok() : r.status;
    }
    OrchestrationFunction fn = n.orch;
    if (!fn) {
      OrchestrationEntryFn e = n.orch_entry;
      fn = [e](Orchestrator& o, const TaskArgsView& a, const CallConfig& c) { return e(&o, &a, &c); };
    }
    RunResult r = inner_->run(fn, TaskArgs::from_view(view), cfg);
    if (!r.ok()) return r.status;
    return Status::Ok();
  }

  void run_control() {
    Digest d;
    std::memcpy(d.data(), mb_->digest, 32);
    Status st;
    mb_->control_result = 0;
    switch (mb_->control_op) {
      case CTRL_REGISTER: {
        ControlDescriptor desc;
        st = mb_->blob_bytes > kMailboxBlobCapacity
                 ? Status::Error(kWorkerChildFailed, "control payload exceeds the mailbox")
                 : decode_control(mb_->blob, mb_->blob_bytes, &desc);
        if (st.ok()) st = install(d, desc, nullptr);
        break;
      }
      case CTRL_UNREGISTER: uninstall(d); break;
      case CTRL_QUERY: mb_->control_result = installed(d) ? 1 : 0; break;
      default: st = Status::Error(kWorkerChildFailed, fmt::format("unknown control op {}", mb_->control_op));
    }
    if (st.ok()) {
      mb_->clear_error();
    } else {
      mb_->set_error(st.code ? st.code : 1, fmt::format("{}: {}", ep_.label(), st.message));
    }
    reply(MB_CONTROL_REQUEST, MB_CONTROL_DONE);
  }

  Endpoint& ep_;
  Mailbox* mb_;
  SharedDoorbell* bell_;
  pid_t parent_;
  uint64_t spin_ns_;
  Worker* inner_;
  std::map<Digest, Native> natives_;
  ChipWorker chip_;
  OutputCapture capture_;
};

}  // namespace

void WorkerImpl::child_main(Endpoint& ep, bool forked_by_main_thread) {
  // exit() from a callable ends the child at once: the parent image's exit
  // handlers and static destructors must not run in this copy of it.
  on_exit([](int status, void*) { _exit(status); }, nullptr);
  if (forked_by_main_thread) prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != pool_.owner_pid()) _exit(3);
  // The parent coordinates shutdown: a terminal's Ctrl-C or systemd's SIGTERM
  // to the whole group must not kill children under a draining parent.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  // A callable past a file-size limit (its own files, its captured output)
  // dies of SIGXFSZ as in a plain process, and its task fails naming the
  // signal, rather than losing the writes quietly because its daemon
  // ignores the signal for its own files.
  signal(SIGXFSZ, SIG_DFL);
  // Forked while the parent's task was captured (an L3 child replacing one of
  // its children): stdio as the parent had it before that task.
  OutputCapture::restore_streams_after_fork();
  // Keep nothing of the parent's but stdio and the mappings: a child holding a
  // daemon's listening socket or a pipe's write end would keep them alive.
  if (close_range(3, ~0u, 0) != 0)
    for (int fd = 3; fd < 4096; ++fd) ::close(fd);
  Worker* inner = ep.kind == ChildKind::L3 ? pool_.inner()[ep.index].get() : nullptr;
  // Placed before the heartbeat, a chip's scheduler threads or an inner
  // Worker's children start (they inherit the mask), and with it any thread
  // already here (one an at-fork handler started, a sanitizer's).
  if (!cfg_.child_cpus.empty())
    if (Status s = run_process_on_cpus(cfg_.child_cpus); !s.ok()) {
      ep.mb->set_error(kWorkerChildFailed, "child_cpus: " + s.message);
      ep.mb->state.store(MB_INIT_FAILED, std::memory_order_seq_cst);
      futex_wake_shared(&ep.mb->state);
      _exit(2);
    }
  // The heartbeat: a thread of its own bumps the mailbox's counter every
  // 100 ms whatever the task thread does, so the parent tells a stopped or
  // frozen process (no beats) from a busy kernel (beats) — also while the
  // child starts (a replacement stopped before INIT_READY is found by it). It
  // also notices the parent's end within 100 ms: a child forked from a thread
  // other than the main one has no parent-death signal (see fork_child). An
  // L3 child starts it once its inner Worker has forked its own children
  // (no thread may exist before that).
  auto start_heartbeat = [&] {
    const pid_t parent = pool_.owner_pid();
    const bool watch_parent = !forked_by_main_thread;
    Mailbox* mb = ep.mb;
    std::thread([parent, watch_parent, mb] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        mb->heartbeat.fetch_add(1, std::memory_order_relaxed);
        if (const ChipWorker* chip = g_progress_chip.load(std::memory_order_acquire)) chip->publish_progress();
        if (OutputCapture* out = g_capture.load(std::memory_order_acquire)) out->drain();
        if (watch_parent && getppid() != parent) _exit(3);
      }
    }).detach();
  };
  if (!inner) start_heartbeat();
  // Every child spins its full budget for the next request: back-to-back
  // work then costs no wake-up. A chip child's L2 runtime wakes its
  // scheduler threads only for a run that submits tasks (docs/runtime.md
  // §9), so an empty or tiny chip task leaves the child's main thread and
  // the parent's driver as the only spinners on a small machine.
  const uint32_t spin_us = cfg_.spin_us;
  ChildRunner runner(ep, pool_.bell(), pool_.owner_pid(), spin_us, inner, cfg_.platform);
  Status st;
  if (inner) st = inner->init();
  for (auto& [digest, reg] : callables_.all()) {
    if (!st.ok()) break;
    if (reg.handle.abi != abi_of(ep.kind) && !(ep.kind == ChildKind::L3 && reg.handle.abi == EntryAbi::CHIP)) continue;
    if (reg.allowed && ep.kind == ChildKind::L3 && !(*reg.allowed)[ep.index]) continue;  // held by peers only
    ControlDescriptor d{reg.callable.kind, reg.callable.abi, reg.callable.path, reg.callable.symbol, reg.callable.name};
    st = runner.install(digest, d, &reg.callable);
    if (!st.ok()) st.message = fmt::format("callable {}: {}", to_hex(digest).substr(0, 16), st.message);
  }
  if (!st.ok()) {
    ep.mb->set_error(st.code ? st.code : 1, st.message);
    ep.mb->state.store(MB_INIT_FAILED, std::memory_order_seq_cst);
    futex_wake_shared(&ep.mb->state);
    if (inner) (void)inner->close();
    _exit(2);
  }
  if (inner) {
    start_heartbeat();
    runner.report_inner();
  }
  ep.mb->state.store(MB_INIT_READY, std::memory_order_seq_cst);
  futex_wake_shared(&ep.mb->state);
  const int code = runner.serve();
  if (inner) (void)inner->close();
  _exit(code);
}

}  // namespace pto
