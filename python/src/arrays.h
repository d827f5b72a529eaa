// numpy arrays <-> the engine's tensors (docs/python.md, "Memory"): dtypes
// map one to one (pto/dtype.h), an array over shared memory is a view with
// no copy, and a tensor handed to the engine is a C-contiguous array's
// address and shape.
#pragma once

#include <pybind11/numpy.h>

#include "pto/task_args.h"

namespace pto_py {

namespace py = pybind11;

// PTO dtype of a numpy dtype; a TypeError names the ones that have none.
int32_t pto_dtype(const py::dtype& dt);
py::dtype numpy_dtype(int32_t pto_dtype);
// An array over t's bytes, no copy; `base` keeps the memory alive (or is a
// no-op capsule when the memory outlives the array by rule).
py::array array_over(const pto::ContinuousTensor& t, py::object base = py::object());
// The tensor an array is: its address, shape and dtype. C-contiguous only
// (a ValueError otherwise).
pto::ContinuousTensor tensor_of(const py::array& a);

}  // namespace pto_py
