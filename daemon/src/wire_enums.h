// The engine's enums on the wire (pto.v1) and back. Each proto enum's values
// are pinned to the C/C++ ones here, at compile time (and by wire_test at
// run time), so a conversion is a checked cast, never a bare one.
#pragma once

#include "pto/dtype.h"
#include "pto/v1/ptod.pb.h"
#include "pto/v1/session.pb.h"
#include "pto/worker.h"

namespace ptod {

#define PTOD_PIN(wire, cpp) static_assert(static_cast<int>(wire) == static_cast<int>(cpp), #wire " is " #cpp)
PTOD_PIN(pto::v1::FLOAT32, PTO_FLOAT32);
PTOD_PIN(pto::v1::FLOAT16, PTO_FLOAT16);
PTOD_PIN(pto::v1::BFLOAT16, PTO_BFLOAT16);
PTOD_PIN(pto::v1::INT32, PTO_INT32);
PTOD_PIN(pto::v1::INT64, PTO_INT64);
PTOD_PIN(pto::v1::INT16, PTO_INT16);
PTOD_PIN(pto::v1::INT8, PTO_INT8);
PTOD_PIN(pto::v1::UINT8, PTO_UINT8);
PTOD_PIN(pto::v1::FLOAT64, PTO_FLOAT64);
static_assert(pto::v1::DataType_ARRAYSIZE == PTO_DTYPE_COUNT, "every dtype is on the wire");
PTOD_PIN(pto::v1::SUCCESS, pto::Outcome::SUCCESS);
PTOD_PIN(pto::v1::TASK_FAILURE, pto::Outcome::TASK_FAILURE);
PTOD_PIN(pto::v1::ENDPOINT_FAILURE, pto::Outcome::ENDPOINT_FAILURE);
PTOD_PIN(pto::v1::SKIPPED, pto::Outcome::SKIPPED);
PTOD_PIN(pto::v1::STOPPED, pto::Outcome::STOPPED);
PTOD_PIN(pto::v1::INPUT, pto::TensorArgType::INPUT);
PTOD_PIN(pto::v1::OUTPUT, pto::TensorArgType::OUTPUT);
PTOD_PIN(pto::v1::INOUT, pto::TensorArgType::INOUT);
PTOD_PIN(pto::v1::OUTPUT_EXISTING, pto::TensorArgType::OUTPUT_EXISTING);
PTOD_PIN(pto::v1::NO_DEP, pto::TensorArgType::NO_DEP);
PTOD_PIN(pto::v1::CHIP, pto::CallableKind::CHIP);
PTOD_PIN(pto::v1::NATIVE_IMPORT, pto::CallableKind::NATIVE_IMPORT);
PTOD_PIN(pto::v1::NATIVE_BLOB, pto::CallableKind::NATIVE_BLOB);
PTOD_PIN(pto::v1::FUNCTION, pto::CallableKind::FUNCTION);
PTOD_PIN(pto::v1::LOCAL_CHIP, pto::TargetNamespace::LOCAL_CHIP);
PTOD_PIN(pto::v1::LOCAL_NATIVE, pto::TargetNamespace::LOCAL_NATIVE);
PTOD_PIN(pto::v1::REMOTE, pto::TargetNamespace::REMOTE);
PTOD_PIN(pto::v1::ABI_CHIP, pto::EntryAbi::CHIP);
PTOD_PIN(pto::v1::ABI_SUB, pto::EntryAbi::SUB);
PTOD_PIN(pto::v1::ABI_ORCHESTRATION, pto::EntryAbi::ORCHESTRATION);
PTOD_PIN(pto::v1::DIRECTION_NONE, pto::TensorDirection::NONE);
PTOD_PIN(pto::v1::DIR_IN, pto::TensorDirection::IN);
PTOD_PIN(pto::v1::DIR_OUT, pto::TensorDirection::OUT);
PTOD_PIN(pto::v1::DIR_INOUT, pto::TensorDirection::INOUT);
#undef PTOD_PIN

// A dtype of pto/dtype.h (checked by the caller: pto_dtype_size(d) != 0).
inline pto::v1::DataType to_wire_dtype(int32_t d) { return static_cast<pto::v1::DataType>(d); }
inline pto::v1::Outcome to_wire(pto::Outcome o) { return static_cast<pto::v1::Outcome>(o); }
// Priorities differ by one (the wire's 0 means "not given": NORMAL).
inline pto::v1::Priority to_wire(pto::RunPriority p) {
  switch (p) {
    case pto::RunPriority::LOW: return pto::v1::PRIORITY_LOW;
    case pto::RunPriority::HIGH: return pto::v1::PRIORITY_HIGH;
    case pto::RunPriority::NORMAL: break;
  }
  return pto::v1::PRIORITY_NORMAL;
}
inline pto::RunPriority from_wire(pto::v1::Priority p) {
  switch (p) {
    case pto::v1::PRIORITY_LOW: return pto::RunPriority::LOW;
    case pto::v1::PRIORITY_HIGH: return pto::RunPriority::HIGH;
    default: return pto::RunPriority::NORMAL;
  }
}
inline pto::v1::CallableKind to_wire(pto::CallableKind k) { return static_cast<pto::v1::CallableKind>(k); }
inline pto::v1::TargetNamespace to_wire(pto::TargetNamespace n) { return static_cast<pto::v1::TargetNamespace>(n); }
inline pto::v1::EntryAbi to_wire(pto::EntryAbi a) { return static_cast<pto::v1::EntryAbi>(a); }
inline pto::v1::TensorDirection to_wire(pto::TensorDirection d) { return static_cast<pto::v1::TensorDirection>(d); }
// A tag the caller checked is one of TensorTag's values.
inline pto::TensorArgType from_wire(pto::v1::TensorTag t) { return static_cast<pto::TensorArgType>(t); }

}  // namespace ptod
