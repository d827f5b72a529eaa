// The engine behind pto::Worker (docs/worker.md): a composition of
//   ChildPool      the children, their mailboxes and the doorbell
//   TaskGraph      the run's tasks, scopes, heap rings and result
//   Scheduler      ready queues, the drive token, dispatch, control progression
//   CallableTable  registration, names, tombstones
//   RemoteBuffers  placeholders for buffers on remote workers
//   RunQueue       asynchronous runs
// under one engine lock (EngineLock: the orchestration thread takes it per
// submit, the driver per batch of completions and per dispatch round). This
// class owns the life cycle (init, close), the runs, the buffer arena and
// the statistics; orchestrator.cpp has the submit path.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "callable_table.h"
#include "child_pool.h"
#include "engine_lock.h"
#include "remote_buffers.h"
#include "run_queue.h"
#include "scheduler.h"
#include "shared_memory.h"
#include "task_graph.h"

namespace pto {

class WorkerImpl {
 public:
  explicit WorkerImpl(const WorkerConfig& cfg);
  ~WorkerImpl();

  // worker_impl.cpp
  Status add_next_level_worker(std::unique_ptr<Worker> inner);
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
  RunResult run(const OrchestrationFunction& fn, const TaskArgs& args, const CallConfig& cfg);
  RunHandle queue_run(OrchestrationFunction fn, TaskArgs args, CallConfig cfg,
                      std::function<void(const RunResult&)> on_done) {
    return runs_.push(std::move(fn), std::move(args), cfg, std::move(on_done));
  }
  Status close();
  Result<ContinuousTensor> alloc_buffer(const std::vector<uint32_t>& shape, int32_t dtype);
  Status free_buffer(const ContinuousTensor& t);
  std::vector<ChildInfo> children() const;
  WorkerStats stats() const;
  Worker::RunProgress progress() const;
  bool cancel_run(const std::string& reason);
  bool is_initialized() const { return life_.initialized; }

  // remote_buffers.cpp
  Result<ContinuousTensor> alloc_remote(int worker, const std::vector<uint32_t>& shape, int32_t dtype);
  Status free_remote(const ContinuousTensor& t);
  Status move_remote(const ContinuousTensor& t, void* host, bool write);

  // orchestrator.cpp: the orchestration thread's calls (pto::Orchestrator).
  SubmitResult submit_task(bool next_level, const CallableHandle& h, std::vector<TaskArgs> members,
                           const CallConfig& cfg, const std::vector<int>& pinned, bool group);
  Result<ContinuousTensor> alloc_in_scope(const std::vector<uint32_t>& shape, int32_t dtype);
  void scope_begin();
  Status scope_end();
  int scope_depth() const;
  int num_next_level() const;

  const WorkerConfig cfg_;

 private:
  friend class Orchestrator;
  // Replaces dead children before a run (the scheduler thread is stopped
  // meanwhile: a child must not inherit a half-held lock of it).
  Status restart_dead_children();
  // child.cpp: what a forked child runs.
  [[noreturn]] void child_main(Endpoint& ep, bool forked_by_main_thread);
  // orchestrator.cpp (no lock): the call's shape, placement and arguments.
  Status check_call(bool next_level, const CallableHandle& h, int members, const std::vector<int>& pinned_in,
                    bool group, const char* what, std::vector<int>* pinned) const;
  Status place_on_remote_buffers(bool next_level, std::vector<TaskArgs>& members, const char* what,
                                 std::vector<int>* pinned, bool* remote_pinned) const;
  Status check_arguments(const std::vector<TaskArgs>& members, const char* what, uint64_t* alloc_bytes) const;
  Status validate_tensor(const ContinuousTensor& t, TensorArgType tag, int member, int index) const;
  SubmitResult reject(int32_t code, const std::string& msg);

  Lifecycle life_;
  mutable EngineLock lock_;
  ChildPool pool_;
  RemoteBuffers rbufs_;
  TaskGraph graph_;
  Scheduler scheduler_;
  CallableTable callables_;
  RunQueue runs_;

  std::mutex close_mu_;                         // one close() at a time
  std::mutex run_mu_;                           // one run at a time
  std::atomic<std::thread::id> run_thread_{};  // the thread inside run(), if any
  SharedMapping arena_map_;
  Arena arena_;

  Orchestrator orch_{this};
};

}  // namespace pto
