// A request on the fd socket as the daemon reads it: the frame's length, the
// protobuf decoder and the request's checks.
#include <cstddef>
#include <cstdint>

#include "fd_frames.h"
#include "pto/dtype.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint32_t n = ptod::fd_frame_length(data);
  if (n > ptod::kMaxFdFrame || n > size - 4) return 0;  // the daemon refuses these before reading on
  pto::v1::FdRequest req;
  if (!req.ParseFromArray(data + 4, static_cast<int>(n))) return 0;
  if (ptod::check_fd_request(req).empty() && req.op() == pto::v1::FdRequest::UPLOAD) {
    // What passes names a tensor the store can size: known dtype, 1..6 dims, none 0.
    if (req.shape_size() < 1 || req.shape_size() > PTO_TENSOR_MAX_DIMS || pto_dtype_size(req.dtype()) == 0)
      __builtin_trap();
    for (uint32_t d : req.shape())
      if (d == 0) __builtin_trap();
  }
  return 0;
}
