// The tensor streams and the remote session's frames as raw bytes
// (docs/proto.md, "Transfers as raw bytes"; docs/remote.md, "Frames as raw
// bytes"): the top-level fields of a protobuf message held in a gRPC
// ByteBuffer, read or split without copying it whole, the few wire bytes a
// sender writes in front of a bytes field whose contents it passes as a
// slice over its own memory, and the count of such slices gRPC still holds.
//
// Through generated messages a chunk's bytes were copied into the message,
// then into gRPC's buffer (sender), and out of gRPC's buffer into the
// message (receiver). Here a receiver gets a bytes field in pieces, one per
// slice it spans, and puts them straight where they go; the messages on
// the wire are the same.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pto::v1 {

class RawFieldSink {
 public:
  virtual ~RawFieldSink() = default;
  // A length-delimited field of `total` bytes begins; its bytes follow in
  // pieces (none when total is 0).
  virtual bool begin(uint32_t field, uint64_t total) = 0;
  virtual bool piece(uint32_t field, const uint8_t* p, size_t n) = 0;
  // A varint, fixed32 or fixed64 field.
  virtual bool scalar(uint32_t field, uint64_t value) = 0;
};

// Hands every top-level field of the message in `bb` to the sink, in order.
// False when the bytes are malformed (a truncated or overlong varint — a key
// or a length in more than 5 bytes, as protobuf refuses them — a
// length past the end, field number 0, a group or unknown wire type) or the
// sink returned false; *why then names the fault (a sink's refusal: "").
bool read_fields(const grpc::ByteBuffer& bb, RawFieldSink& sink, std::string* why);
// The same over a message's bytes given as consecutive pieces (what the
// ByteBuffer's slices are).
struct Piece {
  const uint8_t* data;
  size_t size;
};
bool read_fields(const std::vector<Piece>& pieces, RawFieldSink& sink, std::string* why);

// Splits the message in `pieces` in two without copying its large part:
// the contents of every length-delimited field whose number's bit is set in
// `take` (fields 1..63) go to `contents` as pieces of the input, one list
// per occurrence in order (protobuf merges an embedded message's
// occurrences; a bytes field's last one counts), with the field's number in
// `taken` (0: none); every other field goes to `rest` as wire bytes (keys
// and varints written canonically). False, with *why, on malformed bytes
// (as read_fields) or when two different fields of `take` occur.
struct Split {
  std::string rest;
  std::vector<std::vector<Piece>> contents;
  uint32_t taken = 0;
};
bool split_fields(const std::vector<Piece>& pieces, uint64_t take, Split* out, std::string* why);

// Slices over a sender's own memory, counted until gRPC has let go of each
// (it may hold one after the call that wrote it returned, until the bytes
// are in the socket or the connection is gone). Each slice keeps this
// object alive, so a late release finds it.
class LentSlices : public std::enable_shared_from_this<LentSlices> {
 public:
  grpc::Slice slice(const void* p, size_t n);
  // Waits until every slice is let go. The liveness check is the
  // connection: while alive() says it is up the slices are on their way
  // out; once it is down they go within moments — 10 s allowed, then false
  // with *why, never a return while gRPC may still read the bytes
  // unnoticed. alive() is asked once a second.
  bool wait(const std::function<bool()>& alive, std::string* why);

 private:
  static void give_back(void* p);
  std::mutex mu_;
  std::condition_variable cv_;
  int held_ = 0;
};

// The wire bytes in front of a length-delimited field's contents.
void put_varint(std::string& out, uint64_t v);
std::string bytes_field_header(uint32_t field, uint64_t length);

}  // namespace pto::v1
