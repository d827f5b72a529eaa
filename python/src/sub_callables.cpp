#include "sub_callables.h"

#include <fmt/format.h>

#include "arrays.h"
#include "deferred_release.h"
#include "pto/fork_hooks.h"

namespace pto_py {
namespace {

PyGILState_STATE g_fork_gil;
void fork_prepare() {
  g_fork_gil = PyGILState_Ensure();
  PyOS_BeforeFork();
}
void fork_parent() {
  PyOS_AfterFork_Parent();
  PyGILState_Release(g_fork_gil);
}
void fork_child() {
  // First: PyOS_AfterFork_Child runs Python code (the at-fork callbacks), and
  // with it the pending release the parent queued.
  forget_deferred_in_child();
  PyOS_AfterFork_Child();  // and the child keeps the GIL
}

// The resolver each sub worker uses for a by-reference name.
pto::Status resolve_reference(const std::string& name, pto::SubFunction* out) {
  py::gil_scoped_acquire gil;
  try {
    py::object fn = py::module_::import("pto.worker").attr("_resolve")(name);
    *out = python_sub(fn);
    return pto::Status::Ok();
  } catch (py::error_already_set& e) {
    return pto::Status::Error(pto::kWorkerInvalidArgument, fmt::format("{}: {}", name, e.what()));
  }
}

}  // namespace

void install_interpreter_hooks() {
  pto::set_fork_hooks({fork_prepare, fork_parent, fork_child});
  pto::set_sub_function_resolver(resolve_reference);
}

std::string traceback_text(py::error_already_set& e) {
  try {
    py::object lines = py::module_::import("traceback").attr("format_exception")(e.type(), e.value(), e.trace());
    return py::str("").attr("join")(lines).cast<std::string>();
  } catch (...) {
    return e.what();
  }
}

py::list view_list(const pto::TaskArgsView& v) {
  py::list out;
  for (int i = 0; i < v.tensor_count; ++i) out.append(array_over(v.tensors[i]));
  for (int i = 0; i < v.scalar_count; ++i) out.append(py::int_(v.scalars[i]));
  return out;
}

// A Python function as a sub callable: called in a sub worker child with one
// array per tensor (over the shared memory, no copy) and then the scalars.
// The function object is kept for the process's life (children inherit it).
pto::SubFunction python_sub(py::object fn) {
  PyObject* f = fn.release().ptr();  // one reference, never dropped
  return [f](const pto::TaskArgsView& a, std::string& error) -> int {
    py::gil_scoped_acquire gil;
    try {
      py::list args = view_list(a);
      py::object ignored = py::handle(f)(*args);
      return 0;
    } catch (py::error_already_set& e) {
      error = traceback_text(e);
      return 1;
    }
  };
}

std::string qualified_name(const py::object& fn) {
  const std::string module = py::str(fn.attr("__module__")).cast<std::string>();
  const std::string qual = py::hasattr(fn, "__qualname__") ? py::str(fn.attr("__qualname__")).cast<std::string>()
                                                           : py::str(fn.attr("__name__")).cast<std::string>();
  return module + ":" + qual;
}

// After init(), a Python function is registered by reference: its name is
// "module:qualname@<sha256 of the module's file>", and each sub worker
// imports the module, checks the digest and looks the function up. A lambda,
// a closure, a function of __main__ or of a module without a file cannot be
// found that way: refused, saying why.
std::string reference_name(const py::object& fn) {
  const std::string module = py::str(fn.attr("__module__")).cast<std::string>();
  const std::string qual = py::str(fn.attr("__qualname__")).cast<std::string>();
  const std::string what = qualified_name(fn);
  if (qual.find("<lambda>") != std::string::npos || qual.find("<locals>") != std::string::npos)
    throw py::value_error(what +
                          ": a lambda or a closure cannot be registered after init(): the sub workers find a "
                          "function by module and name; define it at module level, or register it before "
                          "init() (the sub workers inherit it through fork)");
  if (module == "__main__")
    throw py::value_error(what +
                          ": a function of __main__ cannot be found by name in a sub worker after init(): "
                          "put it in a module, or register it before init()");
  py::object mod = py::module_::import("sys").attr("modules")[py::str(module)];
  if (!py::hasattr(mod, "__file__") || mod.attr("__file__").is_none())
    throw py::value_error(what + ": its module has no file to import it from in a sub worker");
  py::object digest = py::module_::import("pto.worker").attr("_module_digest")(mod.attr("__file__"));
  return what + "@" + digest.cast<std::string>();
}

}  // namespace pto_py
