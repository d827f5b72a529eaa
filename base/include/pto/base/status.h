// Status: the result of a call that can fail, with one registry of numeric
// error codes for every layer (the runtime 1..19, the engine 20..28, the
// daemon 40..44) and one error_name() that knows them all. A library never
// exits: it returns a Status whose message names the value and the rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace pto {

enum ErrorCode : int32_t {
  kOk = 0,
  // The L2 runtime (pto2::Runtime, docs/runtime.md).
  kInvalidConfig = 1,         // a config value breaks its rule (message names it)
  kInvalidArgument = 2,       // a submit/API call with bad parameters
  kUnknownKernel = 3,         // kernel id the platform does not know
  kTensorOutOfScope = 4,      // a runtime-allocated tensor used after its scope ended
  kOrchestrationDone = 5,     // submit after pto2_rt_orchestration_done
  kOrchestrationFailed = 6,   // the orchestration function returned non-zero
  kScopeExceedsWindow = 10,   // one scope holds more tasks than its ring's window
  kTaskRingDeadlock = 11,     // nested scopes sharing ring 3 fill its window together
  kHeapRingDeadlock = 12,     // heap ring full of buffers that open scopes keep alive
  kDepPoolDeadlock = 13,      // dependency-list pool full, no task can retire
  kTensorMapDeadlock = 14,    // TensorMap entry pool full, no task can retire
  kHeapRequestTooLarge = 15,  // one task's outputs exceed the whole heap ring
  kStalled = 16,              // no task completed for stall_timeout_ms
  kRuntimeBroken = 17,        // an earlier stall left kernels running; runtime unusable
  kClusterDeadlock = 18,      // every cluster is allocated and only the waiting orchestration frees them
  kBlockExceedsWindow = 19,   // an expanded block_incore task needs more slots than its ring's window
  // The L3/L4 engine (pto::Worker, docs/worker.md).
  kWorkerInvalidConfig = 20,    // a WorkerConfig value breaks its rule
  kWorkerInvalidArgument = 21,  // a submit / register / alloc call with bad parameters
  kWorkerNotRegistered = 22,    // a callable digest the target does not know
  kWorkerClosed = 23,           // call after close()
  kWorkerChildFailed = 24,      // a child could not start, died, or broke the protocol
  kWorkerHeapExhausted = 25,    // a heap ring / the buffer arena cannot satisfy a request
  kWorkerTimeout = 26,          // a bounded wait ran out
  kWorkerRunFailed = 27,        // a run ended with a failed task
  kWorkerCancelled = 28,        // the run was cancelled (cancel_run)
  // The daemon (ptod, docs/daemon.md).
  kRefused = 40,          // the daemon's configuration refuses it (-> PERMISSION_DENIED)
  kUnavailable = 41,      // the daemon is draining (-> UNAVAILABLE)
  kQueueFull = 42,        // the job queue is full (-> RESOURCE_EXHAUSTED)
  kInUse = 43,            // a tensor a job or transfer uses (-> FAILED_PRECONDITION)
  kStorageError = 44,     // the state directory could not be written (-> INTERNAL)
  kUnauthenticated = 45,  // a token that names no principal (-> UNAUTHENTICATED)
  kQuotaExceeded = 46,    // a principal's quota would be passed (-> RESOURCE_EXHAUSTED)
  kAlreadyExists = 47,    // a name another tensor or callable has (-> ALREADY_EXISTS)
  kOutcomeUnknown = 48,   // not acknowledged, yet it may have happened: ask, do not repeat (-> UNKNOWN)
};

// "INVALID_ARGUMENT", "WORKER_TIMEOUT", ...; "UNKNOWN_ERROR" for other codes.
const char* error_name(int32_t code);

// Result of a call that can fail: code plus a message for people.
struct Status {
  int32_t code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
  static Status Ok() { return {}; }
  static Status Error(int32_t c, std::string m) { return {c, std::move(m)}; }
};

// A value or the Status that explains its absence.
template <class T, class S = Status>
struct Result {
  S status;
  T value{};
  bool ok() const { return status.ok(); }
};

// Messages for people travel whole up to kMaxMessageBytes through every
// boundary (mailboxes, remote frames, job results). A longer one is cut in the
// middle, keeping its head (what failed) and its tail (the recommendation),
// with a marker saying how much was left out.
inline constexpr size_t kMaxMessageBytes = 8192;
std::string clip_message(std::string text, size_t max_bytes = kMaxMessageBytes);

// The text of an errno value, safe to call from any thread (strerror may
// share one buffer between threads).
std::string errno_text(int err);

}  // namespace pto
