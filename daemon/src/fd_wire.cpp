#include "fd_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fd_frames.h"

namespace ptod {

FdInbound::~FdInbound() {
  if (fd_ >= 0) ::close(fd_);
}

FdInbound::FdInbound(FdInbound&& o) noexcept { *this = std::move(o); }

FdInbound& FdInbound::operator=(FdInbound&& o) noexcept {
  if (this == &o) return *this;
  if (fd_ >= 0) ::close(fd_);
  std::memcpy(head_, o.head_, sizeof head_);
  head_got_ = o.head_got_;
  started_at_ = o.started_at_;
  body_ = std::move(o.body_);
  body_got_ = o.body_got_;
  fd_ = o.fd_;
  announced_ = o.announced_;
  too_long_ = o.too_long_;
  truncated_ = o.truncated_;
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

FdInbound::Step FdInbound::read(int c, std::optional<std::chrono::steady_clock::time_point> deadline) {
  for (;;) {
    ssize_t got = 0;
    if (head_got_ < sizeof head_) {
      // The length's bytes, and the descriptor that comes with them.
      iovec iov{head_ + head_got_, sizeof head_ - head_got_};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
      msghdr m{};
      m.msg_iov = &iov;
      m.msg_iovlen = 1;
      m.msg_control = control;
      m.msg_controllen = sizeof control;
      got = ::recvmsg(c, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      if (got > 0) {
        if (m.msg_flags & MSG_CTRUNC) truncated_ = true;
        for (cmsghdr* h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
          if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
            const size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < n; ++i) {
              int one = -1;
              std::memcpy(&one, CMSG_DATA(h) + i * sizeof(int), sizeof one);
              if (fd_ < 0)
                fd_ = one;
              else
                ::close(one);  // one descriptor per request: extra ones are not kept
            }
          }
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
      got = ::recv(c, body_.data() + body_got_, body_.size() - body_got_, MSG_DONTWAIT);
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
    pollfd p{c, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return Step::kClosed;
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
