// pto::Worker — the hierarchical engine (docs/worker.md, docs/design.md).
//
// One class serves every level >= 3; the level is a label. A Worker forks its
// children at init(): at level 3 simulated chips (each runs the L2 runtime)
// and sub workers (native callables); at level 4 its next-level children are
// L3 Workers, each running its own inner Worker. It talks to every child
// through a shared-memory mailbox. run() executes an orchestration function on
// the caller's thread; the Orchestrator it receives derives dependencies from
// the tensors' address regions and one scheduler thread dispatches ready tasks
// to idle children. Several runs may be in flight at once (from several
// threads, or queued with submit()): their tasks share the children, fairly
// between principals at each priority. docs/worker.md describes the layout,
// the mailbox protocol, the run model and the failure model.
//
// Tensor data must be visible to the children: allocate it with
// Worker::alloc (the buffer arena), Orchestrator::alloc / an OUTPUT without an
// address (the heap rings), or register a MAP_SHARED mapping made before
// init() with register_shared_memory. A tensor anywhere else is refused at
// submit, naming its address.
#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pto/callable.h"
#include "pto/remote.h"
#include "pto/task_args.h"

namespace pto {

class WorkerImpl;
class OrchestratorBackend;

// SKIPPED: the task never started (an upstream task failed, or its run was
// cancelled). STOPPED: it was running (or about to) when its run was
// cancelled; its child was stopped.
enum class Outcome : uint8_t { SUCCESS = 0, TASK_FAILURE = 1, ENDPOINT_FAILURE = 2, SKIPPED = 3, STOPPED = 4 };
const char* outcome_name(Outcome o);

// The engine's error codes (kWorkerInvalidConfig = 20 ... kWorkerCancelled = 28)
// are in the project's one registry, pto/base/status.h.

struct WorkerConfig {
  int level = 3;
  int num_chips = 0;        // level 3: simulated chips (next-level children)
  int num_sub_workers = 0;  // sub children (native callables)
  std::string platform = "a2a3sim";
  uint64_t heap_ring_bytes = 64ull << 20;      // each of the 4 heap rings (lazily backed)
  uint64_t buffer_arena_bytes = 256ull << 20;  // Worker::alloc buffers (lazily backed)
  // "": the arena is anonymous memory. A path: the arena is that file, mapped
  // shared, so its bytes outlive the process (alloc_at re-attaches them).
  std::string arena_file;
  // A file-backed arena keeps the pages of freed buffers, up to this many
  // bytes, for the next buffers there (docs/worker.md, "Warm arena pages");
  // the rest go back to the file system at once. 0: every free returns its
  // pages.
  uint64_t arena_warm_bytes = 256ull << 20;
  // The buffer arena stays mapped from close() until the Worker is
  // destroyed, instead of being unmapped by close(): for callers whose views
  // of alloc()'s buffers keep the Worker alive and may outlive its close()
  // (the Python binding's arrays) - they stay readable, never a fault.
  bool keep_arena_until_destroyed = false;
  uint32_t spin_us = 50;                       // spin before parking, parent and children
  uint32_t init_timeout_ms = 30000;            // children must report INIT_READY within this
  uint32_t control_timeout_ms = 10000;
  uint64_t task_timeout_ms = 600000;        // a task running longer fails its child (0 = never)
  uint32_t shutdown_timeout_ms = 5000;      // then SIGKILL
  uint32_t remote_ready_timeout_ms = 5000;  // init() waits this long for remote workers' sessions
  std::string state_dir;                    // where uploaded libraries are stored; empty = a private temp dir
  std::string name = "worker";              // diagnostic label
  // Runs in flight at once; each has heap rings of its own (4 x
  // heap_ring_bytes of address space, lazily backed). Further runs wait.
  int max_concurrent_runs = 4;
  // A child whose heartbeat (a thread of its own, stopped only when the whole
  // process is: SIGSTOP, a freeze) has not moved for this long is killed and
  // replaced; a busy kernel keeps beating. 0 = no liveness check.
  uint32_t liveness_timeout_ms = 2000;
  // The CPUs this Worker's local children (chip, sub and L3 processes, and
  // what they start) run on; empty: the CPUs of the thread that calls init(),
  // inherited. Apart from the parent's, spinning children leave the parent's
  // threads their CPUs (docs/worker.md, "Placing the children"). A CPU the
  // kernel does not grant a child fails init() and names it.
  std::vector<int> child_cpus;

  Status validate() const;
};

// Why a task did not succeed (the first one is the run's verdict).
struct TaskFailure {
  uint64_t task_id = 0;
  std::string callable;  // digest, hex
  std::string worker;    // "chip 1", "sub 0", "l3 0"; empty when never launched
  Outcome outcome = Outcome::SUCCESS;
  std::string message;
  std::string describe() const;
};

// Who a run is for and how urgent it is. Ready tasks are served by priority
// (HIGH before NORMAL before LOW), and within one priority round robin
// between principals, then between the runs of a principal, then in
// submission order within a run (docs/worker.md, "Runs").
enum class RunPriority : uint8_t { LOW = 0, NORMAL = 1, HIGH = 2 };
const char* priority_name(RunPriority p);
struct RunOptions {
  RunPriority priority = RunPriority::NORMAL;
  std::string principal;     // empty: the anonymous principal
  uint64_t deadline_ms = 0;  // > 0: the run is cancelled once it has run this long
  // > 0: no task of the run runs longer than this - a task submitted with
  // no timeout of its own (CallConfig::timeout_ms 0) or a longer one gets
  // this one (ptod: the job's config.timeout_ms, whatever its orchestration
  // passes its submits).
  uint64_t task_timeout_ms = 0;
  // Non-empty: what the run's tasks write to stdout and stderr while they run
  // on this Worker's chip and sub children, and what an orchestration run in
  // a runner writes, is appended to this file (created 0600) instead of the
  // children's inherited streams. At most 255 bytes; longer is not captured.
  std::string log_file;
  // The orchestration function only submits and returns (a call: one task,
  // a few tasks): no thread stays with the run once it returned. submit()
  // runs the function on the caller's thread when a slot is free and no run
  // is queued (else the thread whose run frees a slot, or a run thread,
  // starts it); the run ends on whichever thread drives its last task: the
  // Worker's scheduler thread, a run's thread draining its own run, or a
  // thread in RunHandle::wait(), which drives while it waits (docs/worker.md,
  // "Detached runs"). The function must not wait for another run. For run()
  // it makes no difference.
  bool detached = false;
  // With detached: the submitting thread calls RunHandle::wait() right after
  // submit() and drives the run itself (ptod's waiting Submit). When the run
  // starts on that thread, its submits do not wake the Worker's scheduler
  // thread; whoever stops driving with work left wakes it (docs/worker.md,
  // "Detached runs"). A run that starts elsewhere is driven as any other.
  bool waiter_drives = false;
  // Runs submitted with the same batch key and a batch_width run at most
  // that many at once (width 0: no bound but max_concurrent_runs). When the run at the front of
  // the queue belongs to a batch that is that wide already, it waits there,
  // and the runs queued behind it wait too: runs still start in order. ptod
  // gives a SubmitBatch's one-task jobs the width of the workers that can run
  // their task: more at once would only queue those tasks inside the Worker,
  // each run holding a run thread and a slot (docs/worker.md, "Batches").
  // Queued runs only: submit(), not detached, not run().
  uint64_t batch = 0;
  uint32_t batch_width = 0;
};

// Progress of one run, or of every run in flight.
struct RunProgress {
  bool running = false;
  uint64_t submitted = 0, finished = 0;
  // The chip's own tasks inside its chip tasks (the L2 runtime's), as its
  // chip children report them (about every 100 ms while they run).
  uint64_t chip_submitted = 0, chip_completed = 0;
};

struct RunResult {
  Status status;  // ok, the first failure (kWorkerRunFailed) or an orchestration error
  Outcome outcome = Outcome::SUCCESS;
  uint64_t tasks_submitted = 0, tasks_succeeded = 0, tasks_failed = 0, tasks_skipped = 0;
  uint64_t tasks_stopped = 0;    // STOPPED: running (or about to run) when the run was cancelled
  uint64_t tasks_retried = 0;    // attempts repeated after ENDPOINT_FAILURE (retryable callables)
  // The chip's own tasks (the L2 runtimes') inside the run's chip tasks.
  uint64_t chip_tasks_submitted = 0, chip_tasks_completed = 0;
  std::optional<TaskFailure> first_failure;
  std::vector<TaskFailure> failures;  // failed tasks (not the skipped ones), at most 64
  uint64_t wall_ns = 0;
  // When the run took its slot (pto::now_ns, the steady clock); 0 when it
  // never started. Runs take slots in the order they start (by priority,
  // then submission), so these are ordered the same way.
  uint64_t start_ns = 0;
  // False only when every task that ran answered, through its child's
  // mailbox, that it appended nothing to RunOptions::log_file: the file was
  // then not created by this run. True when a task did, or ended without
  // its child's answer (stopped, its child lost, a remote worker), or the
  // run never started. A runner's own writes are not seen here.
  bool log_written = true;
  bool ok() const { return status.ok(); }
};

struct SubmitResult {
  Status status;
  uint64_t task_id = 0;
  // Each member's tensors after submit: OUTPUTs without an address now have one.
  std::vector<std::vector<ContinuousTensor>> tensors;
  bool ok() const { return status.ok(); }
  const ContinuousTensor& tensor(int i, int member = 0) const { return tensors[member][i]; }
};

// Handed to an orchestration function; valid only during that run, on the
// thread that runs it. A rejected submit returns its error and also fails the
// run, so an ignored return value cannot hide it.
class Orchestrator {
 public:
  SubmitResult submit_next_level(const CallableHandle& h, const TaskArgs& args, const CallConfig& cfg = {},
                                 int worker = -1);
  SubmitResult submit_next_level_group(const CallableHandle& h, const std::vector<TaskArgs>& args,
                                       const CallConfig& cfg = {}, const std::vector<int>& workers = {});
  SubmitResult submit_sub(const CallableHandle& h, const TaskArgs& args = {});
  SubmitResult submit_sub_group(const CallableHandle& h, const std::vector<TaskArgs>& args);
  // With a configuration: cfg.timeout_ms bounds a sub task as it bounds a
  // next-level one (the overloads above keep libraries built before it working).
  SubmitResult submit_sub(const CallableHandle& h, const TaskArgs& args, const CallConfig& cfg);
  SubmitResult submit_sub_group(const CallableHandle& h, const std::vector<TaskArgs>& args, const CallConfig& cfg);
  // A buffer in the current scope's heap ring, freed once the scope has ended
  // and every task using it has finished.
  Result<ContinuousTensor> alloc(const std::vector<uint32_t>& shape, int32_t dtype);
  // Past kMaxScopeDepth nested scopes (a runaway loop, not a program) the
  // run fails and no deeper scope opens: the engine's memory stays bounded.
  static constexpr int kMaxScopeDepth = 4096;
  void scope_begin();
  Status scope_end();
  int scope_depth() const;
  // A callable registered with this Worker under a name
  // (Worker::name_callable); the handle holds an error if there is none.
  CallableHandle find_callable(const std::string& name) const;
  // True once the run was cancelled (or its deadline passed): submits are
  // refused from then on, so a long orchestration may stop early.
  bool cancelled() const;
  // Fails the run with this message (the first failure is the run's
  // verdict); the orchestration may go on, its later tasks still run.
  void fail(const std::string& message);
  int level() const;
  int num_next_level() const;
  int num_sub_workers() const;

 private:
  friend struct OrchestratorAccess;
  // The run it belongs to: in this process, or across a runner's channel.
  explicit Orchestrator(OrchestratorBackend* b) : b_(b) {}
  OrchestratorBackend* b_;
};

// RAII scope: scope_begin() now, scope_end() when it goes.
class Scope {
 public:
  explicit Scope(Orchestrator& o) : o_(o) { o_.scope_begin(); }
  ~Scope() { (void)o_.scope_end(); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Orchestrator& o_;
};

// An asynchronous run (Worker::submit).
class RunHandle {
 public:
  RunHandle() = default;
  bool valid() const { return state_ != nullptr; }
  bool done() const;
  // True when the run finished within timeout. A detached run's waiter
  // drives the Worker meanwhile (when no other thread is helping), so the
  // run's end — and its on_done — may happen on the waiting thread.
  bool wait(std::chrono::milliseconds timeout) const;
  // Waits for the run and returns its result.
  const RunResult& result() const;
  // Cancels this run: queued, it never starts; in flight, its submits are
  // refused, its tasks not yet started end SKIPPED and its running tasks are
  // stopped (their children killed and replaced) and end STOPPED. False
  // when it has already ended.
  bool cancel(const std::string& reason) const;
  RunProgress progress() const;

 private:
  friend class WorkerImpl;
  friend class RunQueue;
  friend class RunFinisher;
  struct State;
  std::shared_ptr<State> state_;
};

// Latencies in log-linear buckets: four per power of two from 64 ns (about
// 19 % resolution), so percentiles cost nothing to keep.
struct LatencyHistogram {
  static constexpr int kBuckets = 160;
  std::array<uint64_t, kBuckets> counts{};
  uint64_t count = 0;
  uint64_t sum_ns = 0;
  void record(uint64_t ns);
  static int bucket_of(uint64_t ns);
  static uint64_t bucket_upper_ns(int bucket);  // exclusive upper bound
  // The upper bound of the bucket holding quantile q (0..1); 0 when empty.
  uint64_t percentile_ns(double q) const;
};

// Counters since init(), for benchmarks and the daemon's metrics.
struct WorkerStats {
  uint64_t runs = 0;
  uint64_t tasks_succeeded = 0, tasks_failed = 0, tasks_skipped = 0, tasks_stopped = 0;
  uint64_t child_restarts = 0;
  uint64_t task_retries = 0;            // ENDPOINT_FAILUREs retried on another worker
  uint64_t ready_queue_depth = 0;       // ready tasks waiting for an idle child (now)
  uint64_t tasks_in_flight = 0;         // group members on children (now)
  LatencyHistogram mailbox_round_trip;  // dispatch written -> completion seen by the scheduler
  LatencyHistogram remote_round_trip;   // the same through a remote session
  LatencyHistogram task_latency;        // submit -> final
  uint64_t heap_ring_bytes = 0;
  uint64_t heap_ring_used[4] = {};
  uint64_t arena_bytes = 0, arena_in_use = 0;
  uint64_t arena_warm = 0;  // freed pages kept for the next buffers (arena_warm_bytes)
};

enum class ChildKind : uint8_t { CHIP = 0, SUB = 1, L3 = 2 };
// STARTING: a replacement forked and not yet ready (the dead child it
// replaces was noticed; it takes work once ready).
enum class ChildState : uint8_t { NOT_STARTED, IDLE, BUSY, DEAD, STOPPED, STARTING };
struct ChildInfo {
  ChildKind kind = ChildKind::SUB;
  int index = 0;  // within its kind
  int pid = -1;
  ChildState state = ChildState::NOT_STARTED;
  uint64_t tasks_run = 0;
  uint32_t restarts = 0;
  std::string platform;  // a chip's simulated chip (WorkerConfig::platform); empty for other kinds
  // Remote L3 workers (add_remote_worker): the link's label and state, and
  // the peer's own children as it last reported them. Local L3 children fill
  // peer_children too (their chips and sub workers as of their last task).
  bool remote = false;
  std::string address, state_text;
  uint32_t in_flight = 0, credits = 0;
  std::vector<RemoteLink::PeerChild> peer_children;
  std::string label() const;
};
const char* child_state_name(ChildState s);

// An orchestration as the engine stores it: void-returning callables count as
// returning 0.
template <class F>
OrchestrationFunction as_orchestration(F&& f) {
  using R = std::invoke_result_t<F&, Orchestrator&, const TaskArgsView&, const CallConfig&>;
  if constexpr (std::is_void_v<R>) {
    return [g = std::forward<F>(f)](Orchestrator& o, const TaskArgsView& a, const CallConfig& c) mutable {
      g(o, a, c);
      return 0;
    };
  } else {
    return OrchestrationFunction(std::forward<F>(f));
  }
}

class Worker {
 public:
  explicit Worker(const WorkerConfig& config);
  ~Worker();  // close()
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Level >= 4 only, before init(): an L3 Worker (not initialised, with its
  // callables registered) that becomes a next-level child process. Taken
  // only when accepted: refused, `inner` is left as it was, still the caller's.
  Status add_next_level_worker(std::unique_ptr<Worker>&& inner);
  // Level >= 4 only, before init(): an L3 Worker in another daemon, reached
  // through a link (pto/remote.h). Remote workers come after the local L3
  // children in worker ids (submit_next_level's `worker`).
  Status add_remote_worker(std::shared_ptr<RemoteLink> link);

  // Before init(): captured and inherited by the children. After: broadcast to
  // every target child, published only when all installed it, rolled back
  // otherwise. Registering the same descriptor twice returns the same digest.
  CallableHandle register_callable(const Callable& c);
  // With options: retries after ENDPOINT_FAILURE, and (level >= 4, after
  // init) registration on remote workers — all-or-nothing across the selected
  // peers and the local children: prepare on each peer, commit when all
  // prepared, abort (and roll the local children back) otherwise.
  CallableHandle register_callable(const Callable& c, const CallableOptions& options);
  // A callable that exists only on remote workers (its bytes travel in
  // options.remote_payload): no local children are involved.
  CallableHandle register_remote_callable(const CallableIdentity& id, EntryAbi abi, const CallableOptions& options);
  Status unregister_callable(const CallableHandle& h);
  // Diagnostic: asks one child whether it has the digest installed.
  Result<bool> child_has_callable(const CallableHandle& h, ChildKind kind, int index);

  Status init();
  // Runs fn(orchestrator, args view, cfg) on this thread, then waits until
  // every task it submitted has ended. fn returns int (non-zero fails the
  // run) or void. Up to max_concurrent_runs runs (from any threads) are in
  // flight at once; a further one waits for one of them to end.
  template <class F>
  RunResult run(F&& fn, const TaskArgs& args = {}, const CallConfig& cfg = {}) {
    return run_function(as_orchestration(std::forward<F>(fn)), args, cfg);
  }
  RunResult run_function(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg,
                         const RunOptions& options = {});
  // Queues a run on the Worker's run threads (up to max_concurrent_runs run
  // at once, started by priority, then in submission order).
  template <class F>
  RunHandle submit(F&& fn, TaskArgs args = {}, CallConfig cfg = {}) {
    return submit_function(as_orchestration(std::forward<F>(fn)), std::move(args), cfg);
  }
  RunHandle submit_function(OrchestrationFunction fn, TaskArgs args, CallConfig cfg);
  // The same, calling on_done(result) on the run thread when the run ends
  // (before wait() returns). on_done must not call into this Worker's run(),
  // nor wait for another run; this Worker's close() there is refused. A detached run's on_done (RunOptions::detached)
  // runs on the thread in its wait() that ended it, the thread that started
  // it when it ended at once, or the Worker's finisher thread — never on a
  // thread while it drives the Worker.
  RunHandle submit_function(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                            std::function<void(const RunResult&)> on_done, const RunOptions& options = {});
  Status close();  // idempotent

  // A buffer in the shared arena that lives until free(). In a file-backed
  // arena it reads as zeros.
  Result<ContinuousTensor> alloc(const std::vector<uint32_t>& shape, int32_t dtype);
  // The same, but its bytes are unspecified — possibly an earlier buffer's,
  // of anyone — until written: for a caller that writes every byte before
  // anything can read it (the daemon's uploads). In a file-backed arena it
  // may lie on warm pages (arena_warm_bytes), which write() fills in place.
  Result<ContinuousTensor> alloc_to_overwrite(const std::vector<uint32_t>& shape, int32_t dtype);
  Status free(const ContinuousTensor& t);
  // A file-backed arena (WorkerConfig::arena_file): the buffer at
  // `arena_offset` as it was left by an earlier process; the range must be
  // free. arena_offset(t) is where a buffer lies (UINT64_MAX: not in the
  // arena); sync(t) writes its bytes to the file and waits.
  Result<ContinuousTensor> alloc_at(uint64_t arena_offset, const std::vector<uint32_t>& shape, int32_t dtype);
  uint64_t arena_offset(const ContinuousTensor& t) const;
  Status sync(const ContinuousTensor& t);
  // Copies `bytes` from `src` into a buffer of the arena, `at` bytes into
  // it, through the arena's mapping; refused when the range does not lie in
  // the buffer.
  Status write(const ContinuousTensor& t, uint64_t at, const void* src, uint64_t bytes);
  // The same with the bytes in pieces, one after another (a received
  // message's slices).
  Status write(const ContinuousTensor& t, uint64_t at, const std::vector<iovec>& pieces);

  // Level >= 4: a buffer on a remote next-level worker (its worker id), for
  // tensors too large to travel with each task or that stay on the peer
  // between tasks. The tensor's address is a placeholder in an address range
  // no memory uses: tasks that name it (or a view inside it) run on that
  // worker (submit pins them there) and are ordered by byte-range overlap
  // like any tensor. Bytes move with write_remote / read_remote (chunked); a
  // view moves just its bytes. The buffer belongs to the session: after a
  // reconnect it is stale and every use fails naming it.
  Result<ContinuousTensor> alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype);
  Status free_remote(const ContinuousTensor& t);
  Status write_remote(const ContinuousTensor& t, const void* src);
  Status read_remote(const ContinuousTensor& t, void* dst);

  std::vector<ChildInfo> children() const;
  WorkerStats stats() const;

  // Gives a registered callable a name orchestrations can find it by.
  Status name_callable(const std::string& name, const CallableHandle& h);
  // Progress of every run in flight, summed (zeros when none): tasks
  // submitted so far, and tasks that reached a final state.
  using RunProgress = pto::RunProgress;
  RunProgress progress() const;
  // Cancels every run in flight as RunHandle::cancel does (the runs return
  // kWorkerCancelled). False when no run is in flight.
  bool cancel_run(const std::string& reason);
  const WorkerConfig& config() const;
  bool initialized() const;

 private:
  std::unique_ptr<WorkerImpl> impl_;
};

// Declares a MAP_SHARED mapping (made before the Worker's init()) as memory
// that tensors may live in. Process-wide and inherited by forked children.
Status register_shared_memory(void* base, uint64_t bytes);

}  // namespace pto
