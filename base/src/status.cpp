#include "pto/base/status.h"

#include <cstring>

namespace pto {

const char* error_name(int32_t code) {
  switch (code) {
    case kOk: return "OK";
    case kInvalidConfig: return "INVALID_CONFIG";
    case kInvalidArgument: return "INVALID_ARGUMENT";
    case kUnknownKernel: return "UNKNOWN_KERNEL";
    case kTensorOutOfScope: return "TENSOR_OUT_OF_SCOPE";
    case kOrchestrationDone: return "ORCHESTRATION_DONE";
    case kOrchestrationFailed: return "ORCHESTRATION_FAILED";
    case kScopeExceedsWindow: return "SCOPE_EXCEEDS_WINDOW";
    case kTaskRingDeadlock: return "TASK_RING_DEADLOCK";
    case kHeapRingDeadlock: return "HEAP_RING_DEADLOCK";
    case kDepPoolDeadlock: return "DEP_POOL_DEADLOCK";
    case kTensorMapDeadlock: return "TENSORMAP_DEADLOCK";
    case kHeapRequestTooLarge: return "HEAP_REQUEST_TOO_LARGE";
    case kStalled: return "STALLED";
    case kRuntimeBroken: return "RUNTIME_BROKEN";
    case kClusterDeadlock: return "CLUSTER_DEADLOCK";
    case kBlockExceedsWindow: return "BLOCK_EXCEEDS_WINDOW";
    case kWorkerInvalidConfig: return "WORKER_INVALID_CONFIG";
    case kWorkerInvalidArgument: return "WORKER_INVALID_ARGUMENT";
    case kWorkerNotRegistered: return "WORKER_NOT_REGISTERED";
    case kWorkerClosed: return "WORKER_CLOSED";
    case kWorkerChildFailed: return "WORKER_CHILD_FAILED";
    case kWorkerHeapExhausted: return "WORKER_HEAP_EXHAUSTED";
    case kWorkerTimeout: return "WORKER_TIMEOUT";
    case kWorkerRunFailed: return "WORKER_RUN_FAILED";
    case kWorkerCancelled: return "WORKER_CANCELLED";
    case kRefused: return "REFUSED";
    case kUnavailable: return "UNAVAILABLE";
    case kQueueFull: return "QUEUE_FULL";
    case kInUse: return "IN_USE";
    case kStorageError: return "STORAGE_ERROR";
    case kUnauthenticated: return "UNAUTHENTICATED";
    case kQuotaExceeded: return "QUOTA_EXCEEDED";
    case kAlreadyExists: return "ALREADY_EXISTS";
    case kOutcomeUnknown: return "OUTCOME_UNKNOWN";
    default: return "UNKNOWN_ERROR";
  }
}

std::string clip_message(std::string text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  constexpr size_t kMarkerMax = sizeof(" [... 18446744073709551615 bytes cut ...] ") - 1;
  if (max_bytes < 2 * kMarkerMax) return text.substr(0, max_bytes);
  const size_t keep = max_bytes - kMarkerMax;
  size_t head = keep / 2;
  size_t tail_from = text.size() - (keep - head);
  // Never split a UTF-8 sequence: each cut moves to a character start.
  while (head > 0 && (static_cast<unsigned char>(text[head]) & 0xC0) == 0x80) --head;
  while (tail_from < text.size() && (static_cast<unsigned char>(text[tail_from]) & 0xC0) == 0x80) ++tail_from;
  std::string out;
  out.reserve(max_bytes);
  out.append(text, 0, head);
  out += " [... " + std::to_string(tail_from - head) + " bytes cut ...] ";
  out.append(text, tail_from, std::string::npos);
  return out;
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r: returns either buf or a static string, never fails.
  return strerror_r(err, buf, sizeof(buf));
}

}  // namespace pto
