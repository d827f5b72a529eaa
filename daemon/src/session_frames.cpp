#include "session_frames.h"

#include <fmt/format.h>

#include "pto/native_abi.h"

namespace ptod {

std::string check_frame_order(const pto::v1::Frame& f, uint64_t session, uint64_t expected_seq) {
  if (f.version() != kSessionVersion)
    return fmt::format("frame of protocol version {} in a version-{} session", f.version(), kSessionVersion);
  if (f.session() != session) return fmt::format("frame of session {:016x} in session {:016x}", f.session(), session);
  if (f.seq() != expected_seq) return fmt::format("frame seq {} out of order (expected {})", f.seq(), expected_seq);
  return "";
}

std::string check_remote_tensor(const pto::v1::RemoteTensor& t, std::vector<uint32_t>* shape, uint64_t* bytes) {
  shape->assign(t.shape().begin(), t.shape().end());
  const uint64_t esize = pto_dtype_size(t.dtype());
  uint64_t n = esize;
  bool overflow = esize == 0 || shape->size() > PTO_TENSOR_MAX_DIMS;
  for (uint32_t s : *shape) overflow |= __builtin_mul_overflow(n, uint64_t(s), &n);
  if (overflow || n > kMaxRemoteTensorBytes)
    return fmt::format("dtype {} with {} dims is not a valid tensor", int(t.dtype()), shape->size());
  *bytes = n;
  if (t.has_buffer()) return "";
  const bool in = t.direction() == pto::v1::DIR_IN || t.direction() == pto::v1::DIR_INOUT;
  if (in && t.data().size() != n) return fmt::format("{} inline bytes for a {}-byte tensor", t.data().size(), n);
  return "";
}

}  // namespace ptod
