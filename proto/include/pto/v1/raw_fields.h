// The tensor streams as raw bytes (docs/proto.md, "Transfers as raw
// bytes"): the top-level fields of a protobuf message held in a gRPC
// ByteBuffer, read without copying it whole, and the few wire bytes a
// sender writes in front of a bytes field whose contents it passes as a
// slice over its own memory.
//
// Through generated messages a chunk's bytes were copied into the message,
// then into gRPC's buffer (sender), and out of gRPC's buffer into the
// message (receiver). Here a receiver gets a bytes field in pieces, one per
// slice it spans, and puts them straight where they go; the messages on
// the wire are the same.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
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
// False when the bytes are malformed (a truncated or overlong varint, a
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

// The wire bytes in front of a length-delimited field's contents.
void put_varint(std::string& out, uint64_t v);
std::string bytes_field_header(uint32_t field, uint64_t length);

}  // namespace pto::v1
