// Numeric error codes of the PTO2 runtime. A run that fails returns one of these
// with a message that names the values involved; the library never exits.
#pragma once

#include <cstdint>
#include <string>

namespace pto2 {

enum ErrorCode : int32_t {
  kOk = 0,
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
};

const char* error_name(int32_t code);

// Messages for people travel whole up to kMaxMessageBytes through every
// boundary (mailboxes, remote frames, job results). A longer one is cut in the
// middle, keeping its head (what failed) and its tail (the recommendation),
// with a marker saying how much was left out.
inline constexpr size_t kMaxMessageBytes = 8192;
std::string clip_message(std::string text, size_t max_bytes = kMaxMessageBytes);

// Result of a call that can fail: code plus a message for people.
struct Status {
  int32_t code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
  static Status Ok() { return {}; }
  static Status Error(int32_t c, std::string m) { return {c, std::move(m)}; }
};

}  // namespace pto2
