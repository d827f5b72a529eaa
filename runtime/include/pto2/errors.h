// The runtime's error codes and Status: the project's one registry
// (pto/base/status.h), by the names the runtime's API uses. A run that fails
// returns one of the runtime's codes (1..19) with a message that names the
// values involved; the library never exits.
#pragma once

#include "pto/base/status.h"

namespace pto2 {

using pto::clip_message;
using pto::error_name;
using pto::ErrorCode;
using pto::kMaxMessageBytes;
using pto::Result;
using pto::Status;
using enum pto::ErrorCode;

}  // namespace pto2
