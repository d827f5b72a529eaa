// Descriptors a client sent the daemon (SCM_RIGHTS on the fd socket) are
// the client's objects, and closing the daemon's copy can wait on the
// client: a TCP socket with SO_LINGER and data its peer does not take waits
// up to its linger time, a file on a FUSE mount the client serves waits for
// the client's answer to FLUSH, a unix socket closes the descriptors queued
// in it. Nothing that serves others - the job loop, a connection's thread
// that stop() joins - may wait so (docs/proto.md, "The fd socket").
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstring>

namespace ptod {

// One non-blocking read of up to n bytes (recvmsg) with room for every
// descriptor that may come with them - the kernel's SCM_MAX_FD, 253: with
// less, it closes the rest on the reading thread. Each is given to on_fd;
// *cut is set when control data was dropped all the same. As recvmsg.
template <class F>
ssize_t receive_with_descriptors(int c, void* into, size_t n, F&& on_fd, bool* cut) {
  constexpr size_t kMaxFdsPerMessage = 253;
  iovec iov{into, n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerMessage)];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t got = ::recvmsg(c, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (got <= 0) return got;
  if (m.msg_flags & MSG_CTRUNC) *cut = true;
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
      on_fd(fd);
    }
  }
  return got;
}

// Lets go of a client's descriptor without waiting: a memfd (the only kind
// the daemon uses; any tmpfs file) and a TCP socket that does not linger
// are closed here, anything else on closer threads of the process's own.
// Negative: nothing.
void release_client_fd(int fd);

// Closes a connection of the fd socket: descriptors the client sent that
// are still queued in it are taken and let go of first (closed with it, the
// kernel would close them on this thread). Reads nothing more: the client
// can send no more once it is called.
void close_client_connection(int c);

}  // namespace ptod
