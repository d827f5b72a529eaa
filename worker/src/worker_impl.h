// The engine behind pto::Worker (docs/worker.md). One mutex (mu_) guards the
// task graph: slots, ready queues, the L3 TensorMap, the heap rings, the
// registry and pending control requests. The orchestration thread takes it per
// submit; the scheduler thread per batch of completions and per dispatch
// round. Mailboxes are written only by the scheduler thread (and by init /
// close when it is not running), so their payloads need no lock.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "futex.h"
#include "mailbox.h"
#include "pto/worker.h"
#include "shared_memory.h"

namespace boost::interprocess {
class mapped_region;
}

namespace pto {

inline constexpr int kHeapRings = 4;  // one per scope depth, min(depth, 3)

struct Slot {
  uint64_t id = 0;
  bool next_level = false;  // else a sub task
  CallableIdentity callable;
  CallConfig config;
  std::vector<std::vector<uint8_t>> blobs;              // one encoded args blob per group member
  std::vector<int> pinned;                              // per member: endpoint index within its kind, or -1
  std::vector<std::vector<TensorDirection>> dirs;       // per member, per tensor (remote endpoints copy by it)
  std::shared_ptr<const std::vector<uint8_t>> allowed;  // next-level endpoints holding the callable; null = all
  uint32_t retries_left = 0;        // ENDPOINT_FAILURE retries on another endpoint (single-member tasks)
  int avoid = -1;                   // the endpoint index its last attempt failed on
  bool uses_remote_buffer = false;  // pinned to the worker that holds the buffer; never retried
  enum class State { kPending, kReady, kRunning, kFinal } state = State::kPending;
  int fanin = 0;                               // producers not final yet (+1 while submit is wiring)
  std::vector<std::pair<Slot*, bool>> fanout;  // consumer, reads our data (poisons)
  bool poisoned = false;
  std::string poison;  // why (names the failed upstream task)
  Outcome outcome = Outcome::SUCCESS;
  TaskFailure failure;  // the member failure that decided the outcome
  int members_left = 0;
  int refs = 0;                     // scope + self-not-final + consumers holding our buffers
  std::vector<Slot*> holds;         // producers found through the TensorMap
  std::vector<Slot*> buffer_holds;  // owners of the heap-ring buffers this task touches
  int ring = -1;
  uint64_t heap_start = 0, heap_end = 0;  // address of the allocation, ring position of its end
  bool consumed = false;
  std::vector<uint64_t> map_keys;  // TensorMap entries this slot wrote
  int scope_depth = 0;
  uint64_t submit_ns = 0;
};

// Dependencies from address regions: a multimap of written or read regions;
// overlapping regions order each other (RAW, WAR, WAW).
class L3TensorMap {
 public:
  struct Entry {
    uint64_t end = 0;
    Slot* writer = nullptr;
    std::vector<Slot*> readers;
  };
  // Calls f(producer, is_writer) for every task an access to [lo, hi) must follow.
  template <class F>
  void for_overlaps(uint64_t lo, uint64_t hi, bool with_readers, F&& f) {
    auto it = map_.lower_bound(lo > max_len_ ? lo - max_len_ : 0);
    for (; it != map_.end() && it->first < hi; ++it) {
      if (it->second.end <= lo) continue;
      if (it->second.writer) f(it->second.writer, true);
      if (with_readers)
        for (Slot* r : it->second.readers) f(r, false);
    }
  }
  void add_reader(uint64_t lo, uint64_t hi, Slot* s);
  void set_writer(uint64_t lo, uint64_t hi, Slot* s);
  void remove_writer(Slot* s);
  // Forgets every entry overlapping [lo, hi) (memory handed back to a ring).
  void erase_range(uint64_t lo, uint64_t hi);
  void clear() {
    map_.clear();
    max_len_ = 0;
  }

 private:
  std::multimap<uint64_t, Entry> map_;
  uint64_t max_len_ = 0;
};

class WorkerImpl;
struct Endpoint;

// How the scheduler reaches one endpoint (ARCHITECTURE.md §5: endpoints
// implement one interface). The scheduler's policy — ready queues, groups,
// pinning, dependencies, poisoning, retries — only calls this; endpoints.cpp
// has the two implementations: a forked child and its shared-memory mailbox
// (one task at a time, liveness by waitpid), and a RemoteLink to another
// daemon's L3 Worker (several tasks under the peer's credits, liveness = the
// session is READY). Called by the drive-token holder; dispatch and
// has_completions without mu_, the rest with it.
class EndpointTransport {
 public:
  virtual ~EndpointTransport() = default;
  virtual uint32_t capacity(const Endpoint& ep) const = 0;  // tasks it may hold at once
  virtual uint32_t held(const Endpoint& ep) const = 0;      // tasks it holds now
  // The task is now this endpoint's: bookkeeping, and *seq for dispatch.
  virtual void accept(Endpoint& ep, Slot* s, int member, uint64_t* seq) = 0;
  // Sends it: writes the mailbox, or queues it on the link.
  virtual void dispatch(Endpoint& ep, Slot* s, int member, uint64_t seq) = 0;
  // Whether collect() has something to do (a cheap look, no lock).
  virtual bool has_completions(const Endpoint& ep) const = 0;
  // Hands finished tasks to the engine (WorkerImpl::complete_member).
  virtual void collect(Endpoint& ep) = 0;
  // Every millisecond: liveness and task timeouts.
  virtual void check(Endpoint& ep, uint64_t now) = 0;
  // Why it is not alive: how the child died, or the session's state.
  virtual std::string down_reason(const Endpoint& ep) const = 0;
};
std::unique_ptr<EndpointTransport> make_mailbox_transport(WorkerImpl& w);
std::unique_ptr<EndpointTransport> make_remote_transport(WorkerImpl& w);

// A next-level or sub endpoint: a forked child and its mailbox, or a
// RemoteLink to an L3 Worker in another daemon, driven through `transport`.
struct Endpoint {
  ChildKind kind = ChildKind::SUB;
  int index = 0;
  std::unique_ptr<boost::interprocess::mapped_region> region;
  Mailbox* mb = nullptr;
  pid_t pid = -1;
  bool alive = false;
  bool reaped = true;  // false while a dead child's pid may still need waitpid
  std::string death;   // how it died
  uint32_t restarts = 0;
  uint64_t tasks_run = 0;
  // Scheduler-owned.
  Slot* running = nullptr;
  uint64_t dispatch_ns = 0;
  uint64_t timeout_ns = 0;
  uint64_t seq = 0;
  bool in_control = false;
  // Remote endpoints only: the link, and the tasks it holds (up to its credits).
  std::shared_ptr<RemoteLink> link;
  struct InFlight {
    uint64_t seq;
    Slot* s;  // null once it timed out here: the entry only holds the peer's credit
    int member;
    uint64_t dispatch_ns, timeout_ns;
  };
  std::vector<InFlight> inflight;
  std::unique_ptr<EndpointTransport> transport;
  bool is_remote() const { return link != nullptr; }
  bool has_room() const { return alive && transport->held(*this) < transport->capacity(*this); }
  std::string label() const;
};

struct Registered {
  Callable callable;  // for FUNCTION kinds, the function itself (inherited by fork)
  CallableHandle handle;
  CallableOptions options;
  std::shared_ptr<const std::vector<uint8_t>> allowed;  // next-level endpoints holding it; null = all
  std::vector<int> remote_installed;                    // remote endpoint indices (in l3s_) it was committed on
};

struct ControlRequest {
  ControlOp op = CTRL_REGISTER;
  Digest digest{};
  std::vector<uint8_t> payload;
  std::vector<Endpoint*> targets;
  std::vector<int> sent, done;  // per target
  std::vector<uint64_t> sent_ns;
  std::function<void()> on_success;  // runs under mu_ when every target acknowledged
  std::vector<Endpoint*> installed;
  std::string failure;
  bool rolling_back = false;
  bool abandoned = false;
  bool finished = false;
  uint32_t query_result = 0;
  std::condition_variable cv;
};

struct RunHandle::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  RunResult result;
  OrchestrationFunction fn;
  TaskArgs args;
  CallConfig cfg;
  std::function<void(const RunResult&)> on_done;
};

class WorkerImpl {
 public:
  explicit WorkerImpl(const WorkerConfig& cfg);
  ~WorkerImpl();

  // worker.cpp
  Status add_next_level_worker(std::unique_ptr<Worker> inner);
  Status add_remote_worker(std::shared_ptr<RemoteLink> link);
  CallableHandle register_callable(const Callable& c, const CallableOptions& o);
  CallableHandle register_remote_callable(const CallableIdentity& id, EntryAbi abi, const CallableOptions& o);
  Status unregister_callable(const CallableHandle& h);
  Result<bool> child_has_callable(const CallableHandle& h, ChildKind kind, int index);
  Status init();
  RunResult run(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg);
  RunHandle submit(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                   std::function<void(const RunResult&)> on_done);
  Status close();
  Result<ContinuousTensor> alloc_buffer(const std::vector<uint32_t>& shape, int32_t dtype);
  // remote_buffers.cpp
  Result<ContinuousTensor> alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype);
  Status free_remote(const ContinuousTensor& t);
  Status move_remote(const ContinuousTensor& t, void* host, bool write);
  // The remote buffer holding [lo, hi): found (true) with its endpoint index
  // and reference at lo; false when the range is outside the remote range.
  // Inside it but not in a live buffer: an error naming the range.
  bool remote_buffer_of(uint64_t lo, uint64_t hi, int* endpoint, RemoteBufferRef* ref, Status* error) const;
  Status free_buffer(const ContinuousTensor& t);
  std::vector<ChildInfo> children() const;
  WorkerStats stats() const;
  Status name_callable(const std::string& name, const CallableHandle& h);
  CallableHandle find_callable(const std::string& name) const;
  Worker::RunProgress progress() const;
  bool cancel_run(const std::string& reason);

  // orchestrator.cpp (orchestration thread)
  SubmitResult submit(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members, const CallConfig& cfg,
                      const std::vector<int>& pinned, bool group);
  Result<ContinuousTensor> alloc_in_scope(const std::vector<uint32_t>& shape, int32_t dtype);
  void scope_begin();
  Status scope_end();

  bool is_initialized() const { return initialized_; }

  const WorkerConfig cfg_;
  int scope_depth_ = 0;

 private:
  friend class Orchestrator;
  // worker.cpp
  // Forks the child (mu_ held by the caller for a consistent registry copy),
  // then await_ready waits for its INIT_READY without the lock.
  Status fork_child(Endpoint& ep, bool replacement);
  Status await_ready(Endpoint& ep);
  Status restart_dead_children();
  void stop_scheduler();
  void start_scheduler();
  Status control(ControlOp op, const Digest& digest, std::vector<uint8_t> payload, std::vector<Endpoint*> targets,
                 uint32_t* query_result, std::function<void()> on_success = {});
  std::vector<Endpoint*> targets_for(EntryAbi abi);
  // Two-phase registration on remote endpoints (mu_ not held): prepares on
  // each, commits when all prepared, aborts the prepared ones otherwise.
  Status install_remote(const CallableIdentity& id, const CallableOptions& o, std::vector<int>* installed);
  std::shared_ptr<const std::vector<uint8_t>> mask_of(bool local, EntryAbi abi, const std::vector<int>& remote) const;
  Status store_blob(Callable* c);
  void fail_run(const Status& s);  // orchestration-side error: keep the first
  [[noreturn]] void child_main(Endpoint& ep, bool forked_by_main_thread);

  // orchestrator.cpp (mu_ held)
  Status validate_tensor(const ContinuousTensor& t, TensorArgType tag, int member, int index) const;
  void add_dependency(Slot* consumer, Slot* producer, bool data);
  void make_ready(Slot* s);
  void finalize(Slot* s, Outcome o);
  void unref(Slot* s);
  void reclaim_rings();
  // The owner of the heap-ring buffer holding [lo, hi), nullptr when the
  // range is not in a heap ring; an error when it is in a ring but freed.
  Status buffer_owner(uint64_t lo, uint64_t hi, Slot** owner) const;
  Status heap_alloc(uint64_t bytes, int ring, std::unique_lock<std::mutex>& lk, uint8_t** ptr, uint64_t* end);

  // scheduler.cpp (policy) and endpoints.cpp (the transports)
  friend class MailboxTransport;
  friend class RemoteTransport;
  void scheduler_main();
  uint64_t spin_budget_ns() const;
  void drive_until(const std::function<bool()>& finished, bool scheduler);
  bool drive_round();
  bool try_drive();
  void help_drain();
  bool poll_completions();
  bool dispatch_ready();
  uint64_t task_timeout_ns(const Slot& s) const;  // CallConfig.timeout_ms, else task_timeout_ms
  bool progress_controls();
  void check_children(uint64_t now);
  void endpoint_failed(Endpoint& ep, const std::string& why);
  void mark_dead(Endpoint& ep, const std::string& why, bool reaped);
  void complete_member(Endpoint& ep, Slot* s, Outcome o, const std::string& message);

  bool has_work_in_flight() const;

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;  // run drained / heap ring space
  std::atomic<bool> initialized_{false}, closed_{false};
  std::mutex close_mu_;                        // one close() at a time
  std::atomic<std::thread::id> run_thread_{};  // the thread inside run(), if any
  pid_t owner_pid_ = 0;                        // the process that init()ed (children never close it)
  std::vector<std::unique_ptr<Endpoint>> chips_, subs_, l3s_;
  std::vector<std::unique_ptr<Worker>> inner_;      // level >= 4: one per local L3 child
  std::vector<std::shared_ptr<RemoteLink>> links_;  // level >= 4: remote L3 workers, after the local ones in l3s_
  std::map<Digest, std::string> tombstones_;        // unregistered digests: a late submit names it
  // Remote buffers: placeholders in a reserved, never-mapped address range.
  struct RemoteBuffer {
    int endpoint;
    RemoteBufferRef ref;
    uint64_t bytes;
  };
  mutable std::mutex rbuf_mu_;
  std::map<uint64_t, RemoteBuffer> rbufs_;  // placeholder address -> buffer
  uint64_t rbuf_base_ = 0, rbuf_size_ = 0, rbuf_next_ = 0;
  std::map<Digest, Registered> registry_;
  std::string state_dir_;
  bool own_state_dir_ = false;

  SharedMapping rings_map_[kHeapRings];
  HeapRing rings_[kHeapRings];
  std::deque<Slot*> ring_allocs_[kHeapRings];
  // Live heap-ring allocations: start address -> (end address, owner).
  std::map<uint64_t, std::pair<uint64_t, Slot*>> allocs_;
  SharedMapping arena_map_;
  Arena arena_;
  SharedMapping bell_map_;
  SharedDoorbell* bell_ = nullptr;

  // Per run (reset when a run drains).
  std::deque<std::unique_ptr<Slot>> slots_;
  std::vector<std::vector<Slot*>> scopes_;
  L3TensorMap tmap_;
  std::deque<Slot*> next_any_, sub_q_;
  std::vector<std::deque<Slot*>> next_pinned_;
  uint64_t next_task_id_ = 1;
  // Written under mu_, read without it by spinning waiters.
  std::atomic<uint64_t> pending_{0};          // submitted and not final
  std::atomic<uint64_t> running_{0};          // members on endpoints
  std::atomic<uint64_t> running_subs_{0};     // of which on sub workers
  std::atomic<uint64_t> queued_{0};           // tasks in the ready queues
  std::atomic<uint32_t> controls_queued_{0};  // controls_.size()
  struct Plan {
    Endpoint* ep;
    Slot* s;
    int member;
    uint64_t seq;  // remote endpoints: the dispatch number
  };
  std::vector<Plan> plan_;  // dispatch_ready's scratch (drive-token holder only)
  std::vector<Endpoint*> picked_;
  RunResult run_;
  WorkerStats stats_;      // mu_
  std::string cancelled_;  // non-empty: the run in flight was cancelled, why
  std::map<std::string, CallableHandle> names_;
  bool in_run_ = false;

  std::deque<std::shared_ptr<ControlRequest>> controls_;
  int controls_in_flight_ = 0;

  std::mutex run_mu_;  // one run at a time
  std::thread scheduler_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> driving_{false};  // the drive token (scheduler.cpp)
  std::atomic<uint32_t> helper_{0};   // 1 while run() drives its own drain
  uint64_t last_check_ns_ = 0;        // drive-token holder only

  // Asynchronous runs.
  std::mutex async_mu_;
  std::condition_variable async_cv_;
  std::deque<std::shared_ptr<RunHandle::State>> async_q_;
  std::atomic<uint32_t> async_queued_{0};  // async_q_.size(), for the runner's spin
  std::thread runner_;
  bool runner_stop_ = false;

  Orchestrator orch_{this};
};

}  // namespace pto
