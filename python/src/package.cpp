// What the ptod client (pto/client.py) needs from the C++ side: a kernel
// package bundled for the wire exactly as ptoctl bundles it (so the same
// package gets the same digest from either), and CRC-32C, the checksum of
// tensor transfers (SSE 4.2 where the CPU has it).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "errors.h"
#include "pto/base/crc32c.h"
#include "pto/package/chip_package.h"

namespace py = pybind11;

namespace pto_py {

void bind_package(py::module_& m) {
  m.def(
      "bundle_package",
      [](const std::string& kernels_toml) {
        pto::package::ChipBundle b;
        if (pto::Status s = pto::package::bundle_package(kernels_toml, &b); !s.ok()) raise_error(s);
        py::dict libs;
        for (const auto& [name, bytes] : b.libraries) libs[py::str(name)] = py::bytes(bytes);
        return py::make_tuple(b.config_toml, libs);
      },
      py::arg("kernels_toml"), "The package's config text and its libraries by file name (a ChipBundle's parts).");
  m.def(
      "crc32c",
      [](const py::buffer& data, uint32_t crc) {
        py::buffer_info info = data.request();
        const auto* p = static_cast<const char*>(info.ptr);
        const size_t n = static_cast<size_t>(info.size * info.itemsize);
        py::gil_scoped_release free;
        return pto::crc32c(crc, p, n);
      },
      py::arg("data"), py::arg("crc") = 0, "CRC-32C (Castagnoli) of a buffer's bytes, extending `crc`.");
}

}  // namespace pto_py
