// Checks of session frames that both ends make (docs/remote.md, "session
// protocol"): the order of frames within a session and the tensors a TASK
// carries. Pure functions of the frame, so a fuzzer can drive them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pto/v1/session.pb.h"

namespace ptod {

inline constexpr uint32_t kSessionVersion = 1;  // the session protocol this build speaks
inline constexpr uint64_t kMaxRemoteTensorBytes = uint64_t(1) << 40;

// After HELLO every frame carries the session's protocol version, its id and
// the next sequence number. Returns "" when f is in order, else why not.
std::string check_frame_order(const pto::v1::Frame& f, uint64_t session, uint64_t expected_seq);

// A TASK's tensor as the peer will hold it: its shape and byte size (a known
// dtype, at most PTO_TENSOR_MAX_DIMS dims, no overflow, at most 1 TiB), and
// for an inline input exactly that many bytes. "" or why not.
std::string check_remote_tensor(const pto::v1::RemoteTensor& t, std::vector<uint32_t>* shape, uint64_t* bytes);

}  // namespace ptod
