#include "fd_frames.h"

#include <fmt/format.h>

#include "names.h"
#include "pto/dtype.h"

namespace ptod {

uint32_t fd_frame_length(const uint8_t head[4]) {
  return uint32_t(head[0]) | uint32_t(head[1]) << 8 | uint32_t(head[2]) << 16 | uint32_t(head[3]) << 24;
}

std::string check_fd_request(const pto::v1::FdRequest& r) {
  const pto::v1::FdRequest* req = &r;
  switch (req->op()) {
    case pto::v1::FdRequest::UPLOAD: {
      if (pto::Status s = check_tensor_name(req->name()); !s.ok()) return s.message;
      if (req->shape_size() == 0 || req->shape_size() > PTO_TENSOR_MAX_DIMS)
        return fmt::format("shape has {} dims; a tensor has 1..{}", req->shape_size(), PTO_TENSOR_MAX_DIMS);
      for (uint32_t d : req->shape())
        if (d == 0) return fmt::format("shape [{}] has a zero dimension", fmt::join(req->shape(), ", "));
      if (pto_dtype_size(req->dtype()) == 0) return fmt::format("unknown dtype {}", static_cast<int>(req->dtype()));
      return "";
    }
    case pto::v1::FdRequest::DOWNLOAD:
      if (req->tensor().id() == 0 && req->tensor().name().empty()) return "a download names no tensor (id or name)";
      return "";
    case pto::v1::FdRequest::BUFFER_WRITE:
    case pto::v1::FdRequest::BUFFER_READ:
      if (req->generation() == 0 || req->buffer_id() == 0)
        return fmt::format("a remote-buffer transfer names buffer {} of generation {}: both must be non-zero",
                           req->buffer_id(), req->generation());
      if (req->bytes() == 0 || req->bytes() > kMaxFdBufferChunk)
        return fmt::format("a remote-buffer chunk of {} bytes: must be 1..{}", req->bytes(), kMaxFdBufferChunk);
      return "";
    case pto::v1::FdRequest::SUBMIT:
      // The job itself is checked as Jobs.Submit checks it.
      if (!req->has_submit()) return "a SUBMIT carries no job (its field `submit`)";
      return "";
    default:
      return fmt::format("op {} is none of UPLOAD (1), DOWNLOAD (2), BUFFER_WRITE (3), BUFFER_READ (4), SUBMIT (5)",
                         static_cast<int>(req->op()));
  }
}

}  // namespace ptod
