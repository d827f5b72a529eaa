#include "pto2/errors.h"

namespace pto2 {

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
    default: return "UNKNOWN_ERROR";
  }
}

}  // namespace pto2
