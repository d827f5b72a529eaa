#include "fd_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "client_fds.h"
#include "fd_frames.h"

namespace ptod {

FdInbound::~FdInbound() { release_client_fd(fd_); }

FdInbound::FdInbound(FdInbound&& o) noexcept { *this = std::move(o); }

FdInbound& FdInbound::operator=(FdInbound&& o) noexcept {
  if (this == &o) return *this;
  release_client_fd(fd_);
  std::memcpy(head_, o.head_, sizeof head_);
  head_got_ = o.head_got_;
  started_at_ = o.started_at_;
  body_ = std::move(o.body_);
  body_got_ = o.body_got_;
  fd_ = o.fd_;
  announced_ = o.announced_;
  too_long_ = o.too_long_;
  truncated_ = o.truncated_;
  fds_ = o.fds_;
  o.fd_ = -1;
  o.head_got_ = o.body_got_ = 0;
  o.body_.clear();
  return *this;
}

int FdInbound::take_fd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

// One read with the descriptors that come with it: the first of the
// frame's head is kept, the others let go of (release_client_fd). Every
// read takes them, the body's too: read by recv(), those would be closed
// by the kernel here - a close that may wait on the client.
ssize_t FdInbound::receive(int c, void* into, size_t n, bool head) {
  return receive_with_descriptors(
      c, into, n,
      [&](int fd) {
        if (++fds_ > kMaxFdsPerRequest) truncated_ = true;
        if (head && fd_ < 0)
          fd_ = fd;
        else
          release_client_fd(fd);  // one descriptor per request: extra ones are not kept
      },
      &truncated_);
}

FdInbound::Step FdInbound::read(int c, std::optional<std::chrono::steady_clock::time_point> deadline, int wake) {
  for (;;) {
    ssize_t got = 0;
    if (head_got_ < sizeof head_) {
      // The length's bytes, and the descriptor that comes with them.
      got = receive(c, head_ + head_got_, sizeof head_ - head_got_, true);
      if (got > 0) {
        if (head_got_ == 0) started_at_ = std::chrono::steady_clock::now();
        head_got_ += static_cast<size_t>(got);
        if (head_got_ == sizeof head_) {
          const uint32_t n = announced_ = fd_frame_length(head_);
          if (n > kMaxFdFrame) {  // a claimed size is bounded before anything is allocated
            too_long_ = true;
            return Step::kWhole;
          }
          body_.resize(n);
        }
        continue;
      }
    } else if (body_got_ < body_.size()) {
      got = receive(c, body_.data() + body_got_, body_.size() - body_got_, false);
      if (got > 0) {
        body_got_ += static_cast<size_t>(got);
        continue;
      }
    } else {
      return Step::kWhole;
    }
    if (got == 0) return Step::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Step::kClosed;
    if (!deadline) return Step::kMore;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Step::kLate;
    pollfd p[2] = {{c, POLLIN, 0}, {wake, POLLIN, 0}};
    if (::poll(p, wake >= 0 ? 2 : 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return Step::kClosed;
    if (wake >= 0 && p[1].revents != 0) return Step::kLate;
  }
}

std::string fd_reply_frame(const pto::v1::FdReply& r) {
  const size_t n = r.ByteSizeLong();
  std::string out(4 + n, '\0');
  for (int i = 0; i < 4; ++i) out[size_t(i)] = static_cast<char>(static_cast<uint32_t>(n) >> (8 * i));
  r.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(out.data() + 4));
  return out;
}

bool send_frame(int c, const std::string& frame, size_t* sent, int flags) {
  while (*sent < frame.size()) {
    const ssize_t w = ::send(c, frame.data() + *sent, frame.size() - *sent, MSG_NOSIGNAL | flags);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (flags & MSG_DONTWAIT) && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (w <= 0) return false;  // SO_SNDTIMEO bounds a client that does not read
    *sent += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace ptod
