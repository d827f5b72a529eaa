// The fd socket's frames as the daemon reads them (docs/proto.md, "The fd
// socket"): a little-endian uint32 length, then an FdRequest. Pure functions
// of the bytes, so a fuzzer can drive them; the socket, the descriptor and
// the tensors are FdTransfers' part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "pto/v1/ptod.pb.h"

namespace ptod {

inline constexpr uint32_t kMaxFdFrame = 64 * 1024;  // a request's bytes after the length
// A remote-buffer chunk, through the fd socket as in a CONTROL over the
// session's stream.
inline constexpr uint64_t kMaxFdBufferChunk = 64u << 20;

// The length a frame's first 4 bytes announce.
uint32_t fd_frame_length(const uint8_t head[4]);

// A parsed request's checks: its op known, an upload's name, shape
// (1..PTO_TENSOR_MAX_DIMS dims, none 0) and dtype known, a download naming
// its tensor, a remote-buffer chunk naming its buffer and generation and of
// 1..kMaxFdBufferChunk bytes, a submit carrying its job. "" or why not, in words for the client.
std::string check_fd_request(const pto::v1::FdRequest& req);

}  // namespace ptod
