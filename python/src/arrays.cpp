#include "arrays.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "pto/package/npy.h"

namespace pto_py {

int32_t pto_dtype(const py::dtype& dt) {
  const std::string s = py::str(dt.attr("str")).cast<std::string>();
  for (int32_t d :
       {PTO_FLOAT32, PTO_FLOAT16, PTO_BFLOAT16, PTO_INT32, PTO_INT64, PTO_INT16, PTO_INT8, PTO_UINT8, PTO_FLOAT64})
    if (pto::package::npy_descr(d) == s) return d;
  throw py::type_error(
      fmt::format("numpy dtype {} has no PTO dtype (float32, float16, int32, int64, int16, int8, "
                  "uint8, float64)",
                  s));
}

py::dtype numpy_dtype(int32_t d) { return py::dtype(pto::package::npy_descr(d)); }

py::array array_over(const pto::ContinuousTensor& t, py::object base) {
  if (!base) base = py::capsule(reinterpret_cast<void*>(t.data), [](void*) {});  // no copy, nothing to free
  std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndims);
  return py::array(numpy_dtype(t.dtype), shape, reinterpret_cast<void*>(t.data), base);
}

pto::ContinuousTensor tensor_of(const py::array& a) {
  if (!(a.flags() & py::array::c_style))
    throw py::value_error("a tensor argument must be a C-contiguous array (a strided view is not one tensor)");
  if (a.ndim() < 1 || a.ndim() > PTO_TENSOR_MAX_DIMS)
    throw py::value_error(fmt::format("a tensor has 1..{} dimensions, not {}", PTO_TENSOR_MAX_DIMS, a.ndim()));
  std::vector<uint32_t> shape;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    if (a.shape(i) <= 0 || a.shape(i) > py::ssize_t(UINT32_MAX))
      throw py::value_error(fmt::format("dimension {} of the array is {}: 1..2^32-1", i, a.shape(i)));
    shape.push_back(static_cast<uint32_t>(a.shape(i)));
  }
  return pto::make_tensor(const_cast<void*>(a.data()), shape, pto_dtype(a.dtype()));
}

}  // namespace pto_py
