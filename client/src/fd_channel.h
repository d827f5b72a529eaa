// The client's end of ptod's fd socket (docs/proto.md, "The fd socket"): one
// connection; each request an FdRequest with a memfd attached (SCM_RIGHTS),
// each reply an FdReply, both framed as a little-endian uint32 length and
// the message; replies come in the requests' order.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "pto/base/status.h"
#include "pto/v1/ptod.pb.h"

namespace pto::client {

class FdChannel {
 public:
  FdChannel() = default;
  ~FdChannel();
  FdChannel(const FdChannel&) = delete;
  FdChannel& operator=(const FdChannel&) = delete;

  // Connects to `path`; false when nothing listens there (a daemon without
  // the fd socket, or a TCP address).
  bool connect(const std::string& path);
  bool connected() const { return sock_ >= 0; }
  void close() { close_socket(); }
  // One request with `fd` attached. A connection the daemon closed (idle)
  // is opened again and the request sent once more. Failures close the
  // connection: UNAVAILABLE when the request never left (nothing happened:
  // another way may be tried), UNKNOWN when its reply was lost (the
  // transfer may have happened). A connection the daemon refused at accept
  // (too many open) is UNAVAILABLE too: it read nothing.
  Result<pto::v1::FdReply> call(const pto::v1::FdRequest& req, int fd, std::chrono::milliseconds timeout);
  // The two halves of call(), for requests in flight one behind another
  // (the daemon answers them in order): send() reconnects only when asked
  // (never with a request in flight); receive() takes the oldest reply.
  Status send(const pto::v1::FdRequest& req, int fd, std::chrono::milliseconds timeout, bool reconnect);
  Result<pto::v1::FdReply> receive(std::chrono::milliseconds timeout);

 private:
  void close_socket();
  // The whole frame, the descriptor with its first bytes; false if not sent.
  bool send_frame(const std::vector<uint8_t>& frame, int fd);
  int sock_ = -1;
  std::string path_;
};

// The socket path in a "unix:..." gRPC address, "" for any other address.
std::string unix_socket_path(const std::string& address);

}  // namespace pto::client
