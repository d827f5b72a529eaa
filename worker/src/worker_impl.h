// The engine behind pto::Worker (docs/worker.md): a composition of
//   ChildPool      the children, their mailboxes and the doorbell
//   TaskGraph      the runs in flight: tasks, scopes, heap-ring slots, results
//   Scheduler      fair ready queues, the drive token, dispatch, control
//                  progression, liveness and replacement of children
//   CallableTable  registration, names, tombstones
//   RemoteBuffers  placeholders for buffers on remote workers
//   RunQueue       asynchronous runs
// under one engine lock (EngineLock: an orchestration thread takes it per
// submit, the driver per batch of completions and per dispatch round). This
// class owns the life cycle (init, close), the runs, the buffer arena and
// the statistics; orchestrator.cpp has the submit path.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "callable_table.h"
#include "child_pool.h"
#include "engine_lock.h"
#include "orchestrator_backend.h"
#include "remote_buffers.h"
#include "run_queue.h"
#include "scheduler.h"
#include "shared_memory.h"
#include "task_graph.h"
#include "warm_ranges.h"

namespace pto {

class LocalOrchestration;

class WorkerImpl {
 public:
  explicit WorkerImpl(const WorkerConfig& cfg);
  ~WorkerImpl();

  // worker_impl.cpp
  Status add_next_level_worker(std::unique_ptr<Worker>&& inner);
  Status add_remote_worker(std::shared_ptr<RemoteLink> link);
  CallableHandle register_callable(const Callable& c, const CallableOptions& o) { return callables_.add(c, o); }
  CallableHandle register_remote_callable(const CallableIdentity& id, EntryAbi abi, const CallableOptions& o) {
    return callables_.add_remote(id, abi, o);
  }
  Status unregister_callable(const CallableHandle& h) { return callables_.remove(h); }
  Result<bool> child_has_callable(const CallableHandle& h, ChildKind kind, int index) {
    return callables_.child_has(h, kind, index);
  }
  Status name_callable(const std::string& name, const CallableHandle& h) { return callables_.name(name, h); }
  CallableHandle find_callable(const std::string& name) const { return callables_.find(name); }
  Status init();
  // `handle`: the asynchronous run this is (its cancellation reaches the run).
  RunResult run(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg,
                const RunOptions& options, const std::shared_ptr<RunHandle::State>& handle = nullptr);
  RunHandle queue_run(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                      std::function<void(const RunResult&)> on_done, const RunOptions& options);
  bool cancel(const std::shared_ptr<RunHandle::State>& handle, const std::string& reason);
  // RunHandle::wait: a detached run's waiter drives while it waits.
  bool wait(const std::shared_ptr<RunHandle::State>& handle, std::chrono::milliseconds timeout);
  RunProgress progress(uint64_t run_id) const;
  Status close();
  // at: the arena offset to re-attach (Worker::alloc_at); null: first fit.
  // overwrite: the caller writes every byte (Worker::alloc_to_overwrite), so
  // warm pages are taken as they are instead of zeroed.
  Result<ContinuousTensor> alloc_buffer(const std::vector<uint32_t>& shape, int32_t dtype, const uint64_t* at = nullptr,
                                        bool overwrite = false);
  // What every alloc accepts: at most PTO_TENSOR_MAX_DIMS dims, a pto/dtype.h
  // dtype, at most 2^48 bytes (as a submit does); the error's message without
  // its caller's name.
  static Status check_alloc_shape(const std::vector<uint32_t>& shape, int32_t dtype);
  Status free_buffer(const ContinuousTensor& t);
  // Zeros in the arena file: punched out, or cleared where the file system cannot punch.
  void zero_range(uint64_t offset, uint64_t bytes);
  uint64_t arena_offset(const ContinuousTensor& t) const;
  Status sync_buffer(const ContinuousTensor& t);
  Status write_buffer(const ContinuousTensor& t, uint64_t at, const std::vector<iovec>& pieces);
  std::vector<ChildInfo> children() const;
  WorkerStats stats() const;
  RunProgress progress() const;
  bool cancel_run(const std::string& reason);
  bool is_initialized() const { return life_.initialized; }

  // remote_buffers.cpp
  Result<ContinuousTensor> alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype);
  Status free_remote(const ContinuousTensor& t);
  Status move_remote(const ContinuousTensor& t, void* host, bool write);

  // orchestrator.cpp: an orchestration's calls (pto::Orchestrator), for a run.
  SubmitResult submit_task(RunState* run, bool next_level, const CallableHandle& h, std::vector<TaskArgs> members,
                           const CallConfig& cfg, const std::vector<int>& pinned, bool group);
  Result<ContinuousTensor> alloc_in_scope(RunState* run, const std::vector<uint32_t>& shape, int32_t dtype);
  void scope_begin(RunState* run);
  Status scope_end(RunState* run);
  int scope_depth(const RunState* run) const;
  bool run_cancelled(const RunState* run) const;
  void fail_run(RunState* run, const std::string& message);
  int num_next_level() const;

  const WorkerConfig cfg_;

 private:
  // Whether this thread is running an orchestration of this Worker (a
  // nested run() or close() from there could never finish).
  bool inside_own_run() const;
  // Binds a slot's in-process backend to its run (mu held); nullptr unbinds.
  void bind_slot(int slot, RunState* run);
  // A run's start: the checks, then a slot (waiting for one, bounded by the
  // runs in flight, unless !wait_for_slot); the handle learns its run. False
  // with *failed set (a handle cancelled before its run began among the
  // reasons), or false with *failed untouched when no slot was free.
  bool begin(const RunOptions& options, const std::shared_ptr<RunHandle::State>& handle, bool wait_for_slot,
             RunState** out, RunResult* failed);
  // The orchestration function on this thread; its failure fails the run.
  void call(RunState* run, const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg);
  // A detached run (docs/worker.md, "Detached runs"): begun, its function
  // called on this thread, then left to end without it (kStarted); or no
  // slot was free (kNoSlot, nothing done); or it ended here, refused or with
  // nothing pending (kEnded: *result is its result, its handle unfinished).
  enum class Start { kStarted, kNoSlot, kEnded };
  Start start_detached(const std::shared_ptr<RunHandle::State>& handle, bool wait_for_slot, RunResult* result);
  // Ends the detached runs that have nothing pending, hands their handles
  // over to be finished, then starts queued detached runs in the freed
  // slots. Any thread, no lock held.
  void finish_detached();
  void start_queued();
  // An ended detached run's handle is finished (on_done, done): here when
  // this thread does not drive; when it drives as a waiter, on this thread
  // once it stops driving (finish_unfinished), or on the finisher thread if
  // it parks first and the run is not its own; on the finisher thread when
  // the scheduler thread or a run thread draining its own run ended it.
  void hand_over(std::shared_ptr<RunHandle::State> h, RunResult r);
  void finish_unfinished();
  // A waiter about to park (or driving on for 1 ms since it kept one): the
  // other runs it ended, to the finisher.
  void hand_unfinished_to_finisher(bool parking);
  // A wait nested in a function this thread runs while it drives: this
  // Worker's runs that this thread ended and kept - the one it waited for,
  // and others' it ended in passing - to this Worker's finisher while the
  // wait still counts among waiters_ (close() waits for that). This thread
  // drives on after the wait and finishes what it kept only when it stops.
  void hand_kept_to_finisher();
  // The runs this thread kept that `pick` picks, each to its own Worker's
  // finisher; the others stay kept.
  void hand_kept_if(const std::function<bool(const RunHandle::State&)>& pick);
  // child.cpp: what a forked child runs.
  [[noreturn]] void child_main(Endpoint& ep, bool forked_by_main_thread);
  // orchestrator.cpp (no lock): the call's shape, placement and arguments.
  Status check_call(bool next_level, const CallableHandle& h, int members, const std::vector<int>& pinned_in,
                    bool group, const char* what, std::vector<int>* pinned) const;
  Status place_on_remote_buffers(bool next_level, std::vector<TaskArgs>& members, const char* what,
                                 std::vector<int>* pinned, bool* remote_pinned) const;
  Status check_arguments(const std::vector<TaskArgs>& members, const char* what, uint64_t* alloc_bytes) const;
  Status validate_tensor(const ContinuousTensor& t, TensorArgType tag, int member, int index) const;
  SubmitResult reject(RunState* run, int32_t code, const std::string& msg);

  Lifecycle life_;
  mutable EngineLock lock_;
  ChildPool pool_;
  RemoteBuffers rbufs_;
  TaskGraph graph_;
  Scheduler scheduler_;
  CallableTable callables_;
  RunQueue runs_;

  // Detached runs in flight, by run id: their handles, finished by whoever ends them (mu).
  std::map<uint64_t, std::shared_ptr<RunHandle::State>> detached_;
  int slot_waiters_ = 0;         // threads in begin() waiting for a slot (mu)
  RunFinisher finisher_;         // on_done of detached runs the scheduler thread or a draining run thread ended
  // Detached runs this thread ended while it drove as a waiter: finished
  // once it has stopped driving (finish_unfinished), the others' handed to
  // the finisher when it parks.
  static thread_local std::vector<std::pair<std::shared_ptr<RunHandle::State>, RunResult>> unfinished_;
  std::atomic<int> waiters_{0};       // threads in wait(): close() waits for them
  // Threads that may finish a handle, or hand it to the finisher, after its
  // run left the graph or the queue (finish_detached(), cancel()): close()
  // waits for them.
  std::atomic<int> handing_over_{0};
  struct HandingOver {  // counts this thread in handing_over_ while it lives
    std::atomic<int>& n;
    explicit HandingOver(std::atomic<int>& count) : n(count) { n.fetch_add(1, std::memory_order_seq_cst); }
    ~HandingOver() { n.fetch_sub(1, std::memory_order_seq_cst); }
    HandingOver(const HandingOver&) = delete;
    HandingOver& operator=(const HandingOver&) = delete;
  };
  std::mutex close_mu_;               // one close() at a time
  std::atomic<bool> closing_{false};  // close() began: no new run starts
  SharedMapping arena_map_;
  Arena arena_;
  WarmRanges warm_;  // a file-backed arena's freed pages kept for the next buffers
  // One in-process backend and Orchestrator per heap-ring slot, bound to the
  // slot's run while it is in flight (stable addresses: an Orchestrator kept
  // past its run finds its slot unbound, or another run, never freed memory).
  std::vector<std::unique_ptr<LocalOrchestration>> local_;
  std::vector<Orchestrator> orchs_;
};

// An in-process run's Orchestrator calls, straight into the engine
// (orchestrator.cpp). `run` is the run in flight on its slot (mu), or null.
class LocalOrchestration final : public OrchestratorBackend {
 public:
  explicit LocalOrchestration(WorkerImpl* w) : w_(w) {}
  SubmitResult submit(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members, const CallConfig& cfg,
                      const std::vector<int>& pinned, bool group) override;
  Result<ContinuousTensor> alloc(const std::vector<uint32_t>& shape, int32_t dtype) override;
  void scope_begin() override;
  Status scope_end() override;
  int scope_depth() const override;
  CallableHandle find_callable(const std::string& name) const override { return w_->find_callable(name); }
  bool cancelled() const override;
  void fail(const std::string& message) override;
  int level() const override { return w_->cfg_.level; }
  int num_next_level() const override { return w_->num_next_level(); }
  int num_sub_workers() const override { return w_->cfg_.num_sub_workers; }

  RunState* run = nullptr;

 private:
  WorkerImpl* w_;
};

}  // namespace pto
