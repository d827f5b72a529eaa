// How the extension reports a runtime's error to Python: pto.Error (defined
// in pto/errors.py) with the numeric code, its name and the whole message —
// a deadlock's diagnosis and advice included.
#pragma once

#include <pybind11/pybind11.h>

#include "pto/base/status.h"

namespace pto_py {

// Raises pto.Error(code, name, message) and never returns.
[[noreturn]] void raise_error(const pto::Status& s);

}  // namespace pto_py
