// The engine's one lock and the condition it signals. Every component of the
// engine (TaskGraph, Scheduler, CallableTable, ChildPool) keeps its shared
// state under this lock, so the concurrency model is that of one engine:
// the orchestration thread takes it per submit, the driver per batch of
// completions and per dispatch round. A method that needs it held says
// "(mu held)" in its header; mailbox payloads are written only by the driver
// (the drive-token holder) and need no lock.
#pragma once

#include <condition_variable>
#include <mutex>

namespace pto {

struct EngineLock {
  std::mutex mu;
  // A run drained, heap-ring space came back, a control request finished.
  std::condition_variable idle;
  // A run's slot came free: one thread waiting to begin a run takes it.
  std::condition_variable slot;
};

}  // namespace pto
