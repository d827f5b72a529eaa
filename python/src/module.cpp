// The extension module pto._pto (docs/python.md). The user-facing API is in
// the pure-Python modules over it (pto/__init__.py, pto/chip.py).
#include <pybind11/pybind11.h>

#include "errors.h"
#include "pto/base/freed_memory.h"

namespace py = pybind11;

namespace pto_py {

void raise_error(const pto::Status& s) {
  py::object cls = py::module_::import("pto.errors").attr("Error");
  py::object err = cls(s.code, pto::error_name(s.code), s.message);
  PyErr_SetObject(cls.ptr(), err.ptr());
  throw py::error_already_set();
}

void bind_chip_runner(py::module_& m);  // chip_runner.cpp
void bind_worker(py::module_& m);       // worker.cpp
void bind_package(py::module_& m);      // package.cpp

}  // namespace pto_py

PYBIND11_MODULE(_pto, m) {
  m.doc() = "The PTO runtime's native core; use the pto package (pto.chip, ...).";
  pto_py::bind_chip_runner(m);
  pto_py::bind_worker(m);
  pto_py::bind_package(m);
  // pto.client.keep_freed_memory (client.py says when to call it).
  m.def(
      "keep_freed_memory",
      [](uint64_t nbytes) {
        if (pto::Status s = pto::keep_freed_memory(nbytes); !s.ok()) pto_py::raise_error(s);
      },
      py::arg("nbytes"));
}
