// Passing a file descriptor over a unix stream socket (SCM_RIGHTS), as the
// daemon's fd socket does (docs/proto.md, "The fd socket").
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace pto {

// One sendmsg of [data, data + n) with `fd` attached (none when fd < 0):
// what sendmsg returns (bytes sent, or -1 with errno). The descriptor goes
// with the first byte; the caller sends whatever was not sent.
ssize_t send_with_fd(int sock, const void* data, size_t n, int fd);

}  // namespace pto
