// The fd socket's frames on a connection (docs/proto.md, "The fd socket"):
// a request read as it arrives — all at once, or in parts by a caller that
// must not wait (the job loop) and finished by one that may — and a reply
// sent whole or in parts. The bytes' meaning is fd_frames.h's.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pto/v1/ptod.pb.h"

namespace ptod {

// One request frame: its length, its bytes, and the descriptor that came
// with its first bytes (SCM_RIGHTS; at most one is kept, extra ones are let
// go of at once: release_client_fd).
class FdInbound {
 public:
  enum class Step {
    kWhole,   // the frame is here (or announced too long: too_long())
    kMore,    // part of it is here, the rest is not yet
    kClosed,  // the client closed (or the socket failed) before the frame was whole
    kLate,    // the deadline passed before the frame was whole
  };
  FdInbound() = default;
  ~FdInbound();
  FdInbound(FdInbound&& o) noexcept;
  FdInbound& operator=(FdInbound&& o) noexcept;
  FdInbound(const FdInbound&) = delete;
  FdInbound& operator=(const FdInbound&) = delete;

  // Reads what the socket holds; with a deadline, waits for the rest until
  // then, or until `wake` (an eventfd, -1: none) is readable - the daemon
  // stops - which ends the wait as the deadline would (kLate). Call again
  // after kMore to go on.
  Step read(int c, std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt, int wake = -1);
  bool started() const { return head_got_ > 0; }
  std::chrono::steady_clock::time_point started_at() const { return started_at_; }  // its first byte's arrival
  bool length_known() const { return head_got_ == sizeof head_; }
  bool has_fd() const { return fd_ >= 0; }
  // The length announced is beyond kMaxFdFrame (nothing was allocated for it).
  bool too_long() const { return too_long_; }
  uint32_t announced() const { return announced_; }  // the length its first 4 bytes gave
  // More descriptors came than a request may carry (kMaxFdsPerRequest), or
  // more control data than a message may.
  bool truncated() const { return truncated_; }
  static constexpr int kMaxFdsPerRequest = 4;
  int descriptors() const { return fds_; }  // that came with it so far (a refusal names the count)
  // Bytes of its length and of its body that came so far (a frame cut short is refused naming them).
  size_t head_received() const { return head_got_; }
  size_t body_received() const { return body_got_; }
  const uint8_t* body() const { return body_.data(); }
  size_t size() const { return body_.size(); }
  // The descriptor that came with the frame (-1: none), now the caller's.
  int take_fd();

 private:
  ssize_t receive(int c, void* into, size_t n, bool head);

  uint8_t head_[4] = {};
  size_t head_got_ = 0;
  std::chrono::steady_clock::time_point started_at_;
  std::vector<uint8_t> body_;
  size_t body_got_ = 0;
  int fd_ = -1;
  uint32_t announced_ = 0;
  bool too_long_ = false;
  bool truncated_ = false;
  int fds_ = 0;  // descriptors that came with it
};

// A reply as a frame's bytes: the little-endian length, then the FdReply.
std::string fd_reply_frame(const pto::v1::FdReply& r);
// Sends bytes [*sent, size) of `frame`, advancing *sent; waits when the
// socket is full (its SO_SNDTIMEO bounds that) unless `flags` holds
// MSG_DONTWAIT. False on an error (a full socket without waiting is not one:
// *sent < frame.size()).
bool send_frame(int c, const std::string& frame, size_t* sent, int flags = 0);

}  // namespace ptod
