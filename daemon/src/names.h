// Names clients choose (callables, tensors, job labels) end up in logs,
// metadata and error messages: each is at most kMaxNameBytes of UTF-8 with no
// control characters, so a name can neither forge a log line nor push a
// later error past gRPC's metadata limit.
#pragma once

#include <cstddef>
#include <string>

#include "pto/worker.h"

namespace ptod {

inline constexpr size_t kMaxNameBytes = 256;

// "" is allowed (no name). The error says which rule, naming what it is ("callable name").
pto::Status check_name(const char* what, const std::string& name);

// A tensor name: check_name's rules, and not only digits — ptoctl reads a
// number as a tensor id (no '#', which a shell takes for a comment).
pto::Status check_tensor_name(const std::string& name);

}  // namespace ptod
