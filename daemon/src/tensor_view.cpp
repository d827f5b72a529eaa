// TensorStore::view_of: a view of a stored tensor's buffer, checked. A pure
// function over bytes a client sent (the fuzz targets link it alone).
#include <fmt/format.h>

#include "tensor_store.h"

namespace ptod {

Status TensorStore::view_of(const TensorEntry& e, uint64_t offset_bytes, const std::vector<uint32_t>& shape,
                            int32_t dtype, bool has_dtype, pto::ContinuousTensor* out) {
  pto::ContinuousTensor t = e.tensor;
  if (has_dtype) t.dtype = dtype;
  if (pto_dtype_size(t.dtype) == 0)
    return Status::Error(pto::kWorkerInvalidArgument, fmt::format("unknown dtype {}", t.dtype));
  if (!shape.empty()) {
    if (shape.size() > PTO_TENSOR_MAX_DIMS)
      return Status::Error(pto::kWorkerInvalidArgument, fmt::format("a view has at most {} dims", PTO_TENSOR_MAX_DIMS));
    t.ndims = static_cast<int32_t>(shape.size());
    for (int i = 0; i < PTO_TENSOR_MAX_DIMS; ++i) t.shape[i] = i < t.ndims ? shape[i] : 0;
  } else if (has_dtype && offset_bytes == 0 && pto_dtype_size(t.dtype) != pto_dtype_size(e.tensor.dtype)) {
    return Status::Error(pto::kWorkerInvalidArgument, "a dtype of another size needs an explicit shape");
  }
  uint64_t bytes = pto_dtype_size(t.dtype);
  for (int i = 0; i < t.ndims; ++i)
    if (__builtin_mul_overflow(bytes, uint64_t(t.shape[i]), &bytes))
      return Status::Error(pto::kWorkerInvalidArgument,
                           fmt::format("view shape [{}] overflows", fmt::join(shape, ", ")));
  if (offset_bytes > e.bytes || bytes > e.bytes - offset_bytes)
    return Status::Error(pto::kWorkerInvalidArgument,
                         fmt::format("view of {} bytes at offset {} exceeds tensor {} ({} bytes)", bytes, offset_bytes,
                                     e.name.empty() ? std::to_string(e.id) : "'" + e.name + "'", e.bytes));
  t.data += offset_bytes;
  *out = t;
  return Status::Ok();
}

}  // namespace ptod
