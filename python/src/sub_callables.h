// Python functions as sub callables (docs/python.md, "The Worker"): called in
// a sub worker child — a fork of this process — with numpy views of the
// shared memory, inherited through fork before init() or found by reference
// after it, and the interpreter made safe across the engine's forks.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "pto/callable.h"

namespace pto_py {

namespace py = pybind11;

// The fork hooks (the GIL taken in the forking thread, PyOS_AfterFork_Child
// in the child, which then keeps the GIL: it is the only thread that runs
// Python there) and the by-reference resolver, for every Worker of the process.
void install_interpreter_hooks();
// The traceback of the exception being handled, as Python prints it.
std::string traceback_text(py::error_already_set& e);
// One array per tensor (a view of the shared memory, no copy), then the scalars.
py::list view_list(const pto::TaskArgsView& v);
// `fn` as a sub callable; the function object is kept for the process's life.
pto::SubFunction python_sub(py::object fn);
// "module:qualname" (before init: the object itself is the identity, see worker.cpp).
std::string qualified_name(const py::object& fn);
// After init(): "module:qualname@<SHA-256 of the module's file>", or a
// ValueError saying why the function cannot be found by name in a sub worker.
std::string reference_name(const py::object& fn);

}  // namespace pto_py
